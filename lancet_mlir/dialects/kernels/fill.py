"""Constant kernels: fill (a given value) and zeros."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lancet_mlir.dialects.kernels.base import (
    ALL_DTYPES,
    Kernel,
    KernelError,
    Params,
    ParamSpec,
    Sigs,
    TensorSig,
    register,
)
from lancet_mlir.dialects.kernels.rules import zero_flops

_DTYPE_PARAM = ParamSpec(str, "f32", choices=ALL_DTYPES)


def _fill_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    if any(d < 0 for d in params["shape"]):
        raise KernelError(f"bad shape {params['shape']}")
    return [TensorSig(params["shape"], params["dtype"])]


def _make_fill(name: str, params: Mapping[str, Any], doc: str) -> Kernel:
    return Kernel(
        name=name,
        num_inputs=0,
        input_names=(),
        params=params,
        infer=_fill_infer,
        flops=zero_flops,
        partition=lambda ins, outs, p: [((), (i,)) for i in range(outs[0].rank)],
        doc=doc,
    )


register(
    _make_fill(
        "fill",
        {"shape": ParamSpec(tuple), "dtype": _DTYPE_PARAM, "value": 0.0},
        "() -> tensor of `shape` and `dtype` filled with `value`",
    )
)
register(
    _make_fill(
        "zeros",
        {"shape": ParamSpec(tuple), "dtype": _DTYPE_PARAM},
        "() -> tensor of `shape` and `dtype` filled with zeros",
    )
)
