"""Activation kernels: gelu (tanh approximation) and its gradient gelu_dx."""

from __future__ import annotations

from lancet_mlir.dialects.kernels.base import Kernel, Params, Sigs, TensorSig, register
from lancet_mlir.dialects.kernels.elementwise import unary_same_infer
from lancet_mlir.dialects.kernels.rules import (
    elementwise_rule,
    expect_float,
    per_element,
    same_dtype,
    same_shape,
)
from lancet_mlir.dialects.vocab import Role


def _gelu_dx_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    expect_float(ins[1], "x")
    same_shape([ins[1], ins[0]], ("x", "dy"))
    same_dtype(ins)
    return [ins[1]]


register(
    Kernel(
        name="gelu",
        num_inputs=1,
        input_names=("x",),
        params={},
        infer=unary_same_infer,
        flops=per_element(8),
        partition=elementwise_rule,
        role=Role.FWD,
        doc="(x) -> 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))",
    )
)

register(
    Kernel(
        name="gelu_dx",
        num_inputs=2,
        input_names=("dy", "x"),
        params={},
        infer=_gelu_dx_infer,
        flops=per_element(14),
        partition=elementwise_rule,
        role=Role.DX,
        doc="(dy, x) -> dy · gelu'(x) (tanh approximation)",
    )
)
