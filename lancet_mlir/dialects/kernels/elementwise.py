"""Element-wise arithmetic kernels: add, sub, mul (numpy broadcasting), bias_add, scale."""

from __future__ import annotations

import numpy as np

from lancet_mlir.dialects.kernels.base import (
    Kernel,
    KernelError,
    Params,
    PartitionCombo,
    Sigs,
    TensorSig,
    register,
)
from lancet_mlir.dialects.kernels.rules import (
    elementwise_rule,
    expect_float,
    expect_min_rank,
    expect_rank,
    per_element,
    same_dtype,
)
from lancet_mlir.dialects.vocab import Role


def _broadcast_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    dtype = same_dtype(ins)
    try:
        shape = np.broadcast_shapes(*(s.shape for s in ins))
    except ValueError:
        raise KernelError(
            f"shapes {' and '.join(str(s) for s in ins)} are not broadcast-compatible"
        ) from None
    return [TensorSig(tuple(shape), dtype)]


def _binary(name: str, doc: str, params: dict | None = None) -> Kernel:
    return Kernel(
        name=name,
        num_inputs=2,
        input_names=("a", "b"),
        params=params or {},
        infer=_broadcast_infer,
        flops=per_element(1),
        partition=elementwise_rule,
        doc=doc,
    )


register(
    _binary(
        "add",
        "(a, b) -> a + b with numpy broadcasting; `in_place`: b's GEMM added its product into "
        "a's buffer (a partial sum accumulated in place, `dialects/destination.py`)",
        {"in_place": False},
    )
)
register(_binary("sub", "(a, b) -> a - b with numpy broadcasting"))
register(_binary("mul", "(a, b) -> a * b with numpy broadcasting"))


def _bias_add_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    x, b = ins
    expect_min_rank(x, 1, "input")
    expect_rank(b, 1, "bias")
    same_dtype(ins)
    if b.shape[0] != x.shape[-1]:
        raise KernelError(f"bias size {b.shape[0]} differs from last input dim {x.shape[-1]}")
    return [x]


def _bias_add_partition(ins: Sigs, outs: Sigs, params: Params) -> list[PartitionCombo]:
    rank = ins[0].rank
    combos: list[PartitionCombo] = [((i, None), (i,)) for i in range(rank - 1)]
    combos.append(((rank - 1, 0), (rank - 1,)))
    return combos


register(
    Kernel(
        name="bias_add",
        num_inputs=2,
        input_names=("x", "bias"),
        params={},
        infer=_bias_add_infer,
        flops=per_element(1),
        partition=_bias_add_partition,
        role=Role.FWD,
        doc="(x [..., N], bias [N]) -> x + bias",
    )
)


def unary_same_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    """Shape rule of float element-wise kernels of one input: the output is like the input."""
    expect_float(ins[0], "input")
    return [ins[0]]


register(
    Kernel(
        name="scale",
        num_inputs=1,
        input_names=("x",),
        params={"alpha": 1.0},
        infer=unary_same_infer,
        flops=per_element(1),
        partition=elementwise_rule,
        doc="(x) -> alpha * x (e.g. gradient averaging, attention scaling)",
    )
)
