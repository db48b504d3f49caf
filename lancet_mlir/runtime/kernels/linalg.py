"""Contractions: the matmul family and the MoE dispatch/combine kernels, via `xp.matmul`."""

from __future__ import annotations

import math
from typing import Any

from lancet_mlir.dialects.kernels.linalg import MATMUL_KINDS, matmul_kernel_name, matmul_spec
from lancet_mlir.dialects.kernels.moe import MOE_CONTRACTIONS
from lancet_mlir.dialects.kernels.rules import parse_spec
from lancet_mlir.runtime.kernels.base import (
    Array,
    ArrayNamespace,
    as_dtype,
    cast,
    dtype_of,
    implements,
    implements_into,
)


def contract(xp: ArrayNamespace, spec: str, x: Array, y: Array, out: Array | None = None) -> Array:
    """Two-operand contraction through xp.matmul (BLAS), deterministic for fixed inputs.

    Letters in both inputs and the output are batch dims, in both inputs only are
    contracted; the rest are free dims of one input. With `out` (a contiguous array of the
    result's shape and dtype) the product is written into it when the output needs no
    transposition (`xp.matmul(out=)`, as a GEMM writes through its C pointer), and `out` is
    returned; otherwise the result is returned as usual and the caller copies it.
    """
    (lx, ly), spec_out = parse_spec(spec)
    size = {c: d for s, a in ((lx, x), (ly, y)) for c, d in zip(s, a.shape, strict=True)}
    batch = [c for c in spec_out if c in lx and c in ly]
    red = [c for c in lx if c in ly and c not in spec_out]
    fx = [c for c in lx if c not in ly]
    fy = [c for c in ly if c not in lx]
    bs = [size[c] for c in batch]

    def prep(a: Array, s: str, order: list[str], rows: list[str], cols: list[str]) -> Array:
        t = xp.transpose(a, [s.index(c) for c in order])
        return t.reshape([*bs, math.prod(size[c] for c in rows), math.prod(size[c] for c in cols)])

    xm = prep(x, lx, batch + fx + red, fx, red)
    ym = prep(y, ly, batch + red + fy, red, fy)
    order = batch + fx + fy
    rows, cols = math.prod(size[c] for c in fx), math.prod(size[c] for c in fy)
    if out is not None and order == list(spec_out) and out.dtype == xm.dtype:
        xp.matmul(xm, ym, out=out.reshape([*bs, rows, cols]))
        return out
    r = xp.matmul(xm, ym).reshape([*bs, *(size[c] for c in fx + fy)])
    return xp.transpose(r, [order.index(c) for c in spec_out])


def _matmul(kind: str, batch: bool) -> None:
    @implements(matmul_kernel_name(kind, batch))
    def run(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
        spec = matmul_spec(kind, batch, p["transpose_a"], p["transpose_b"])
        return [contract(xp, spec, xs[0], xs[1])]

    @implements_into(matmul_kernel_name(kind, batch))
    def run_into(
        xp: ArrayNamespace, xs: list[Array], p: dict[str, Any], outs: list[Array | None]
    ) -> list[Array]:
        spec = matmul_spec(kind, batch, p["transpose_a"], p["transpose_b"])
        return [contract(xp, spec, xs[0], xs[1], outs[0])]


def _moe(name: str, spec: str) -> None:
    @implements(name)
    def run(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
        dtype = dtype_of(xs[0])
        x, y = as_dtype(xp, xs[0], dtype), as_dtype(xp, xs[1], dtype)
        return cast(xp, [contract(xp, spec, x, y)], dtype)


for _batch in (False, True):
    for _kind in MATMUL_KINDS:
        _matmul(_kind, _batch)
for _name, _spec in MOE_CONTRACTIONS.items():
    _moe(_name, _spec)
