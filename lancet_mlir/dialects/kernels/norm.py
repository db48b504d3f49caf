"""Normalisation kernels: layer_norm (+ `_dx`, `_dw`) and softmax (+ `_dx`, causal mask)."""

from __future__ import annotations

from collections.abc import Sequence

from lancet_mlir.dialects.kernels.base import (
    PARTIAL,
    Kernel,
    KernelError,
    Params,
    Sigs,
    TensorSig,
    register,
)
from lancet_mlir.dialects.kernels.rules import (
    elementwise_partition,
    expect_float,
    expect_min_rank,
    expect_rank,
    norm_axis,
    per_element,
    rows_partition,
    same_dtype,
    same_shape,
)
from lancet_mlir.dialects.vocab import Role


def _check_norm_params(x: TensorSig, gammas: Sigs, names: Sequence[str]) -> None:
    expect_min_rank(x, 1, "input")
    expect_float(x, "input")
    for g, n in zip(gammas, names, strict=True):
        expect_rank(g, 1, n)
        if g.shape[0] != x.shape[-1]:
            raise KernelError(f"{n} size {g.shape[0]} differs from last input dim {x.shape[-1]}")
    same_dtype([x, *gammas])


def _layer_norm_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    _check_norm_params(ins[0], ins[1:], ("gamma", "beta"))
    return [ins[0]]


register(
    Kernel(
        name="layer_norm",
        num_inputs=3,
        input_names=("x", "gamma", "beta"),
        params={"eps": 1e-5},
        infer=_layer_norm_infer,
        flops=per_element(8),  # mean, centre, square, var, rsqrt-mul, scale, shift
        partition=lambda ins, outs, p: rows_partition(ins[0].rank - 1, 3, (1, 2), None),
        role=Role.FWD,
        doc="(x [..., M], gamma [M], beta [M]) -> normalise x over its last axis",
    )
)


def _layer_norm_dx_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    dy, x, gamma = ins
    _check_norm_params(x, [gamma], ("gamma",))
    same_shape([x, dy], ("x", "dy"))
    same_dtype([x, dy])
    return [x]


register(
    Kernel(
        name="layer_norm_dx",
        num_inputs=3,
        input_names=("dy", "x", "gamma"),
        params={"eps": 1e-5},
        infer=_layer_norm_dx_infer,
        flops=per_element(12),
        partition=lambda ins, outs, p: rows_partition(ins[0].rank - 1, 3, (2,), None),
        role=Role.DX,
        doc="(dy, x, gamma) -> dx of layer_norm (recomputes the statistics from x)",
    )
)


def _layer_norm_dw_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    dy, x = ins
    expect_min_rank(x, 1, "x")
    expect_float(x, "x")
    same_shape([x, dy], ("x", "dy"))
    same_dtype(ins)
    vec = TensorSig((x.shape[-1],), x.dtype)
    return [vec, vec]


register(
    Kernel(
        name="layer_norm_dw",
        num_inputs=2,
        input_names=("dy", "x"),
        params={"eps": 1e-5},
        infer=_layer_norm_dw_infer,
        flops=lambda ins, outs, p: 8.0 * ins[0].numel,
        partition=lambda ins, outs, p: rows_partition(ins[0].rank - 1, 2, (), (PARTIAL, PARTIAL)),
        role=Role.DW,
        doc="(dy, x) -> (dgamma [M], dbeta [M]) of layer_norm",
    )
)


def _softmax_axes(sig: TensorSig, params: Params) -> list[int]:
    """Axes that must not be split: the softmax axis (and both mask axes if causal)."""
    axis = norm_axis(params["axis"], sig.rank)
    return [axis, sig.rank - 2] if params.get("causal") else [axis]


def _softmax_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    x = ins[0]
    expect_min_rank(x, 1, "input")
    expect_float(x, "input")
    if x.shape[norm_axis(params["axis"], x.rank)] == 0:
        raise KernelError(f"softmax over an empty axis of {x}")
    if params["causal"]:
        expect_min_rank(x, 2, "causal softmax input")
        if norm_axis(params["axis"], x.rank) != x.rank - 1:
            raise KernelError("causal softmax must normalise the last axis")
    return [x]


register(
    Kernel(
        name="softmax",
        num_inputs=1,
        input_names=("x",),
        params={"axis": -1, "causal": False},
        infer=_softmax_infer,
        flops=per_element(5),  # max, sub, exp, sum, div
        partition=lambda ins, outs, p: elementwise_partition(ins, outs, _softmax_axes(ins[0], p)),
        role=Role.FWD,
        doc="(x) -> softmax over `axis`; causal masks keys j > query i on the last two axes",
    )
)


def _softmax_dx_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    dy, y = ins
    expect_float(y, "y")
    same_shape([y, dy], ("y", "dy"))
    same_dtype(ins)
    norm_axis(params["axis"], y.rank)
    return [y]


register(
    Kernel(
        name="softmax_dx",
        num_inputs=2,
        input_names=("dy", "y"),
        params={"axis": -1},
        infer=_softmax_dx_infer,
        flops=per_element(4),
        partition=lambda ins, outs, p: elementwise_partition(
            ins, outs, [norm_axis(p["axis"], ins[1].rank)]
        ),
        role=Role.DX,
        doc="(dy, y=softmax(x)) -> dx = y * (dy - sum(dy * y, axis))",
    )
)
