"""The MoE gate and its gradient: GShard top-1 / top-2 routing with capacity, and the windowed
switch gate of one token part (`moe_gate_window`: the same routing started from per-expert
slot offsets, written to window-relative slots)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lancet_mlir.dialects.kernels import KernelError
from lancet_mlir.runtime.kernels.base import (
    Array,
    ArrayNamespace,
    cast,
    contiguous,
    dtype_of,
    implements,
    log_softmax,
)


@dataclass
class _Routing:
    """GShard-style routing of S tokens: per choice k, expert, slot, kept flag, gate."""

    probs: Array  # [S, E] softmax of the logits
    base: Array  # [E] slots of each expert filled before these tokens (0 for a whole layer)
    filled: Array  # [E] slots filled after them: base + the kept choices
    experts: list[Array]  # [S] chosen expert per choice
    slots: list[Array]  # [S] position inside that expert's capacity (base included)
    kept: list[Array]  # [S] bool: slot < capacity
    raw: list[Array]  # [S] probability of the choice (0 when dropped)
    denom: Array | None  # [S] top2 normaliser (None for switch)

    def window_slots(self) -> list[Array]:
        """Per choice, the slot relative to `base`: the row in this call's [E, C] window."""
        return [sl - self.base[e] for e, sl in zip(self.experts, self.slots, strict=True)]


def _route(
    xp: ArrayNamespace, logits: Array, gate: str, capacity: int, offsets: Array | None = None
) -> _Routing:
    """Top-1/top-2 routing with positions by cumulative sum in token order.

    Second choices are placed after all kept first choices of their expert (GShard); tokens
    whose position reaches `capacity` are dropped. Ties pick the lowest expert index.
    `offsets[e]` (default 0) slots of expert e are taken by earlier tokens routed elsewhere
    (a previous token part): positions count from there.
    """
    probs = xp.exp(log_softmax(xp, logits))
    s_idx = xp.arange(logits.shape[0])
    n_exp = logits.shape[1]
    offset = xp.zeros(n_exp, dtype=xp.int64) if offsets is None else _offsets(xp, offsets)
    avail = probs.copy()
    r = _Routing(probs, offset, offset, [], [], [], [], None)
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
    r.filled = offset
    if gate == "top2":
        eps = xp.finfo(probs.dtype).eps
        r.denom = xp.maximum(r.raw[0] + r.raw[1], probs.dtype.type(eps))
    return r


def _offsets(xp: ArrayNamespace, offsets: Array) -> Array:
    """A window's starting slot counters as int64; KernelError when one is negative (a
    counter above the capacity is fine: that expert takes no more tokens)."""
    start = xp.asarray(offsets).astype(xp.int64)
    if start.size and int(start.min()) < 0:
        raise KernelError(f"offsets must be >= 0, got {int(start.min())}")
    return start


def _gate_values(r: _Routing) -> list[Array]:
    return r.raw if r.denom is None else [g / r.denom for g in r.raw]


def _gate_tensors(xp: ArrayNamespace, r: _Routing, logits: Array, capacity: int) -> list[Array]:
    """(combine, dispatch) [S, E, C] of a routing; rows are window slots (slot - base)."""
    s, e = logits.shape
    combine = xp.zeros((s, e, capacity), dtype=logits.dtype)
    dispatch = xp.zeros_like(combine)
    choices = zip(r.experts, r.window_slots(), r.kept, _gate_values(r), strict=True)
    for ex, slot, kept, g in choices:
        rows = xp.nonzero(kept)[0]
        combine[rows, ex[rows], slot[rows]] = g[rows]
        dispatch[rows, ex[rows], slot[rows]] = 1
    return cast(xp, [combine, dispatch], dtype_of(logits))


def _gate_grad(
    xp: ArrayNamespace, dcombine: Array, r: _Routing, logits: Array, capacity: int
) -> Array:
    """dlogits of a routing's combine tensor, given its gradient (window slots as in
    `_gate_tensors`)."""
    s_idx = xp.arange(logits.shape[0])
    # gradient of each kept choice's combine weight
    dc = [
        xp.where(k, dcombine[s_idx, e, xp.minimum(sl, capacity - 1)], 0)
        for e, sl, k in zip(r.experts, r.window_slots(), r.kept, strict=True)
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
    return cast(xp, [r.probs * (dprobs - inner)], dtype_of(logits))[0]


@implements("moe_gate")
def _moe_gate(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    logits = xs[0]
    r = _route(xp, logits, p["gate"], p["capacity"])
    return _gate_tensors(xp, r, logits, p["capacity"])


@implements("moe_gate_dx")
def _moe_gate_dx(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    dcombine, logits = xs
    r = _route(xp, logits, p["gate"], p["capacity"])
    return [_gate_grad(xp, dcombine, r, logits, p["capacity"])]


@implements("moe_gate_window")
def _moe_gate_window(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    logits, offsets = xs
    r = _route(xp, logits, p["gate"], p["capacity"], offsets)
    counts = contiguous(xp, r.filled - r.base, xp.int64)
    next_offsets = contiguous(xp, r.filled, xp.int64)
    return [*_gate_tensors(xp, r, logits, p["capacity"]), counts, next_offsets]


@implements("moe_gate_window_dx")
def _moe_gate_window_dx(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    dcombine, logits, offsets = xs
    r = _route(xp, logits, p["gate"], p["capacity"], offsets)
    return [_gate_grad(xp, dcombine, r, logits, p["capacity"])]
