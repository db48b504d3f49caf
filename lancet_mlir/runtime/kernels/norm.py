"""Normalisation and loss kernels: layer_norm (+ gradients), softmax (+ gradient),
cross-entropy (+ gradient)."""

from __future__ import annotations

import math
from typing import Any

from lancet_mlir.dialects.kernels.loss import loss_dtype
from lancet_mlir.runtime.kernels.base import (
    Array,
    ArrayNamespace,
    as_dtype,
    cast,
    check_ids,
    dtype_of,
    implements,
    implements_into,
    log_softmax,
)


def _layer_norm_stats(xp: ArrayNamespace, x: Array, eps: float) -> tuple[Array, Array]:
    """(x - mean, 1/sqrt(var + eps)) over the last axis, in x's dtype."""
    xc = x - x.mean(axis=-1, keepdims=True)
    var = (xc * xc).mean(axis=-1, keepdims=True)
    rstd = 1 / xp.sqrt(var + x.dtype.type(eps))
    return xc, rstd


@implements("layer_norm")
def _layer_norm(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    x, gamma, beta = xs
    xc, rstd = _layer_norm_stats(xp, x, p["eps"])
    return cast(xp, [xc * rstd * gamma + beta], dtype_of(x))


@implements_into("layer_norm")
def _layer_norm_into(
    xp: ArrayNamespace, xs: list[Array], p: dict[str, Any], outs: list[Array | None]
) -> list[Array]:
    x, gamma, beta = xs
    xc, rstd = _layer_norm_stats(xp, x, p["eps"])
    return [xp.add(xc * rstd * gamma, beta, out=outs[0])]


@implements("layer_norm_dx")
def _layer_norm_dx(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    dy, x, gamma = xs
    xc, rstd = _layer_norm_stats(xp, x, p["eps"])
    xhat = xc * rstd
    g = dy * gamma
    mean_g = g.mean(axis=-1, keepdims=True)
    mean_gx = (g * xhat).mean(axis=-1, keepdims=True)
    return cast(xp, [rstd * (g - mean_g - xhat * mean_gx)], dtype_of(x))


@implements("layer_norm_dw")
def _layer_norm_dw(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    dy, x = xs
    xc, rstd = _layer_norm_stats(xp, x, p["eps"])
    lead = tuple(range(x.ndim - 1))
    return cast(xp, [(dy * xc * rstd).sum(axis=lead), dy.sum(axis=lead)], dtype_of(x))


@implements("softmax")
def _softmax(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    return cast(xp, [_softmax_into(xp, xs, p, [None])[0]], dtype_of(xs[0]))


@implements_into("softmax")
def _softmax_into(
    xp: ArrayNamespace, xs: list[Array], p: dict[str, Any], outs: list[Array | None]
) -> list[Array]:
    x = xs[0]
    if p["causal"]:
        rows, cols = x.shape[-2:]
        future = xp.triu(xp.ones((rows, cols), dtype=bool), k=1)  # key j > query i
        x = xp.where(future, x.dtype.type(-math.inf), x)
    z = xp.exp(x - x.max(axis=p["axis"], keepdims=True))
    return [xp.divide(z, z.sum(axis=p["axis"], keepdims=True), out=outs[0])]


@implements("softmax_dx")
def _softmax_dx(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    dy, y = xs
    return cast(xp, [y * (dy - (dy * y).sum(axis=p["axis"], keepdims=True))], dtype_of(y))


@implements("cross_entropy")
def _cross_entropy(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    logits, labels = xs
    out_dtype = loss_dtype(dtype_of(logits))
    lp = log_softmax(xp, as_dtype(xp, logits, out_dtype))
    rows = xp.arange(lp.shape[0])
    picked = lp[rows, check_ids(xp, labels, lp.shape[1])]
    return cast(xp, [-picked.mean()], out_dtype)


@implements("cross_entropy_dx")
def _cross_entropy_dx(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    logits, labels = xs
    dtype = dtype_of(logits)
    grad = xp.exp(log_softmax(xp, logits))
    rows = xp.arange(grad.shape[0])
    grad[rows, check_ids(xp, labels, grad.shape[1])] -= 1
    return cast(xp, [grad / grad.dtype.type(grad.shape[0])], dtype)
