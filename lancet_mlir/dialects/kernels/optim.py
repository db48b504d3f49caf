"""Optimizer-update kernels: SGD and bias-corrected Adam (element-wise over a parameter)."""

from __future__ import annotations

from collections.abc import Sequence

from lancet_mlir.dialects.kernels.base import (
    InferFn,
    Kernel,
    KernelError,
    Params,
    Sigs,
    TensorSig,
    register,
)
from lancet_mlir.dialects.kernels.rules import (
    elementwise_rule,
    expect_float,
    per_element,
    same_dtype,
    same_shape,
)
from lancet_mlir.dialects.vocab import Role


def _same_as_first_infer(names: Sequence[str], n_out: int) -> InferFn:
    """Shape rule of element-wise kernels whose inputs and outputs all share one sig."""

    def infer(ins: Sigs, params: Params) -> list[TensorSig]:
        expect_float(ins[0], names[0])
        same_shape(ins, names)
        same_dtype(ins)
        return [ins[0]] * n_out

    return infer


def _adam_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    if params["step"] < 1:
        raise KernelError(f"step must be >= 1, got {params['step']}")
    return _same_as_first_infer(("param", "grad", "m", "v"), 3)(ins, params)


register(
    Kernel(
        name="sgd_update",
        num_inputs=2,
        input_names=("param", "grad"),
        params={"lr": 0.01},
        infer=_same_as_first_infer(("param", "grad"), 1),
        flops=per_element(2),
        partition=elementwise_rule,
        role=Role.UPDATE,
        doc="(param, grad; lr) -> param - lr * grad",
    )
)

register(
    Kernel(
        name="adam_update",
        num_inputs=4,
        input_names=("param", "grad", "m", "v"),
        params={"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "step": 1},
        infer=_adam_infer,
        flops=per_element(12),
        partition=elementwise_rule,
        role=Role.UPDATE,
        doc="(param, grad, m, v; lr, beta1, beta2, eps, step) -> (param', m', v'), "
        "bias-corrected Adam",
    )
)
