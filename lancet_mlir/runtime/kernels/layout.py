"""Data-movement kernels: embedding (+ gradient), reshape, transpose, split, concat,
reduce_sum, fill and zeros."""

from __future__ import annotations

from typing import Any

from lancet_mlir.dialects.kernels.shape import resolve_shape
from lancet_mlir.runtime.kernels.base import (
    Array,
    ArrayNamespace,
    cast,
    check_ids,
    contiguous,
    dtype_of,
    implements,
    numpy_dtype,
)


@implements("embedding")
def _embedding(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    table, ids = xs
    return cast(xp, [table[check_ids(xp, ids, table.shape[0])]], dtype_of(table))


@implements("embedding_dw")
def _embedding_dw(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    dy, ids = xs
    rows = check_ids(xp, ids, p["num_embeddings"]).reshape(-1)
    out = xp.zeros((p["num_embeddings"], dy.shape[-1]), dtype=dy.dtype)
    # rows.shape[0], not -1: reshape(-1, 0) is ambiguous for a zero-width dy
    xp.add.at(
        out, rows, dy.reshape(rows.shape[0], dy.shape[-1])
    )  # sequential on numpy: deterministic
    return cast(xp, [out], dtype_of(dy))


@implements("reshape")
def _reshape(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    return [contiguous(xp, xs[0]).reshape(resolve_shape(p["shape"], xs[0].size))]


@implements("transpose")
def _transpose(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    return [contiguous(xp, xp.transpose(xs[0], p["perm"]))]


@implements("split")
def _split(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    sizes = p.get("sizes") or ()
    # uneven slices: split at the running offsets (the first offset 0 is implicit)
    cuts = [sum(sizes[:k]) for k in range(1, len(sizes))] if sizes else p["num"]
    return [contiguous(xp, a) for a in xp.split(xs[0], cuts, axis=p["axis"])]


@implements("concat")
def _concat(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    return [xp.concatenate(xs, axis=p["axis"])]


@implements("reduce_sum")
def _reduce_sum(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    total = xp.sum(xs[0], axis=tuple(p["axes"]), keepdims=p["keepdims"])
    return cast(xp, [total], dtype_of(xs[0]))


def _fill(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    return [xp.full(p["shape"], p.get("value", 0), dtype=numpy_dtype(p["dtype"]))]


implements("fill")(_fill)
implements("zeros")(_fill)
