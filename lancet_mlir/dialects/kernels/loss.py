"""Loss kernels: mean token cross-entropy and its gradient."""

from __future__ import annotations

from lancet_mlir.dialects.kernels.base import (
    DType,
    Kernel,
    KernelError,
    Params,
    Sigs,
    TensorSig,
    register,
)
from lancet_mlir.dialects.kernels.rules import expect_float, expect_int, expect_rank
from lancet_mlir.dialects.vocab import Role


def _ce_check(ins: Sigs) -> None:
    logits, labels = ins
    expect_rank(logits, 2, "logits")
    expect_float(logits, "logits")
    expect_rank(labels, 1, "labels")
    expect_int(labels, "labels")
    if labels.shape[0] != logits.shape[0]:
        raise KernelError(f"token dims differ: {logits.shape[0]} vs {labels.shape[0]}")
    if 0 in logits.shape:  # a mean over no tokens / a softmax over no classes is undefined
        raise KernelError(f"logits {logits} must have at least one token and one class")


def loss_dtype(dtype: DType) -> DType:
    """The dtype the loss is reduced in: at least f32 (half types would lose the mean)."""
    return "f64" if dtype == "f64" else "f32"


def _ce_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    _ce_check(ins)
    return [TensorSig((), loss_dtype(ins[0].dtype))]


def _ce_dx_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    _ce_check(ins)
    return [ins[0]]


register(
    Kernel(
        name="cross_entropy",
        num_inputs=2,
        input_names=("logits", "labels"),
        params={},
        infer=_ce_infer,
        flops=lambda ins, outs, p: 4.0 * ins[0].numel,
        role=Role.FWD,
        doc="(logits [S, V], labels int [S]) -> mean token loss, rank 0 (f32, f64 for f64)",
    )
)

register(
    Kernel(
        name="cross_entropy_dx",
        num_inputs=2,
        input_names=("logits", "labels"),
        params={},
        infer=_ce_dx_infer,
        flops=lambda ins, outs, p: 5.0 * ins[0].numel,
        role=Role.DX,
        doc="(logits [S, V], labels [S]) -> (softmax(logits) - onehot(labels)) / S",
    )
)
