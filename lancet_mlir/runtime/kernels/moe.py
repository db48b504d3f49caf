"""The MoE gate and its gradient: GShard top-1 / top-2 routing with capacity."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lancet_mlir.runtime.kernels.base import (
    Array,
    ArrayNamespace,
    cast,
    dtype_of,
    implements,
    log_softmax,
)


@dataclass
class _Routing:
    """GShard-style routing of S tokens: per choice k, expert, slot, kept flag, gate."""

    probs: Array  # [S, E] softmax of the logits
    experts: list[Array]  # [S] chosen expert per choice
    slots: list[Array]  # [S] position inside that expert's capacity
    kept: list[Array]  # [S] bool: slot < capacity
    raw: list[Array]  # [S] probability of the choice (0 when dropped)
    denom: Array | None  # [S] top2 normaliser (None for switch)


def _route(xp: ArrayNamespace, logits: Array, gate: str, capacity: int) -> _Routing:
    """Top-1/top-2 routing with positions by cumulative sum in token order.

    Second choices are placed after all kept first choices of their expert (GShard); tokens
    whose position reaches `capacity` are dropped. Ties pick the lowest expert index.
    """
    probs = xp.exp(log_softmax(xp, logits))
    s_idx = xp.arange(logits.shape[0])
    n_exp = logits.shape[1]
    offset = xp.zeros(n_exp, dtype=xp.int64)
    avail = probs.copy()
    r = _Routing(probs, [], [], [], [], None)
    for _ in range(1 if gate == "switch" else 2):
        e = xp.argmax(avail, axis=1)
        onehot = xp.eye(n_exp, dtype=xp.int64)[e]
        slot = (xp.cumsum(onehot, axis=0) - 1)[s_idx, e] + offset[e]
        kept = slot < capacity
        offset = offset + (onehot * kept[:, None]).sum(axis=0)
        avail[s_idx, e] = -math.inf
        r.experts.append(e)
        r.slots.append(slot)
        r.kept.append(kept)
        r.raw.append(xp.where(kept, probs[s_idx, e], 0).astype(probs.dtype))
    if gate == "top2":
        eps = xp.finfo(probs.dtype).eps
        r.denom = xp.maximum(r.raw[0] + r.raw[1], probs.dtype.type(eps))
    return r


def _gate_values(r: _Routing) -> list[Array]:
    return r.raw if r.denom is None else [g / r.denom for g in r.raw]


@implements("moe_gate")
def _moe_gate(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    logits = xs[0]
    s, e = logits.shape
    r = _route(xp, logits, p["gate"], p["capacity"])
    combine = xp.zeros((s, e, p["capacity"]), dtype=logits.dtype)
    dispatch = xp.zeros_like(combine)
    for ex, slot, kept, g in zip(r.experts, r.slots, r.kept, _gate_values(r), strict=True):
        rows = xp.nonzero(kept)[0]
        combine[rows, ex[rows], slot[rows]] = g[rows]
        dispatch[rows, ex[rows], slot[rows]] = 1
    return cast(xp, [combine, dispatch], dtype_of(logits))


@implements("moe_gate_dx")
def _moe_gate_dx(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    dcombine, logits = xs
    r = _route(xp, logits, p["gate"], p["capacity"])
    s_idx = xp.arange(logits.shape[0])
    # gradient of each kept choice's combine weight
    dc = [
        xp.where(k, dcombine[s_idx, e, xp.minimum(sl, p["capacity"] - 1)], 0)
        for e, sl, k in zip(r.experts, r.slots, r.kept, strict=True)
    ]
    if r.denom is None:
        draw = dc
    else:  # c_k = g_k / (g_1 + g_2): dc/dg through the normaliser
        d2 = r.denom * r.denom
        draw = [(dc[0] - dc[1]) * r.raw[1] / d2, (dc[1] - dc[0]) * r.raw[0] / d2]
    dprobs = xp.zeros_like(r.probs)
    for e, k, d in zip(r.experts, r.kept, draw, strict=True):
        dprobs[s_idx, e] += xp.where(k, d, 0).astype(dprobs.dtype)
    inner = (dprobs * r.probs).sum(axis=-1, keepdims=True)
    return cast(xp, [r.probs * (dprobs - inner)], dtype_of(logits))
