"""`lancet.origin` / `lancet.share` on the parts a partitioning pass creates.

A part of op P (a chunk of its capacity slots, a token part, a region part) records P's op
key and the share of P's work it does, so that a measured cost source (a profile of the
unpartitioned program) costs the part as that share of P's measured time instead of falling
back to an estimate of another kind (cost/sources.py, "Derived ops"). The share is the part's
FLOPs over P's (its bytes' share for an op without FLOPs) unless the pass knows it (a token
part: its share of the tokens), so n even parts of P together cost what P does. A part of a part keeps the first op's key and multiplies the shares. A part with
P's own key and all of its work (a token part's window, which `lancet.fill` scales) records
nothing: its own key already finds P's entry.

The ops that only move data around a partitioned region (border splits and their reshapes,
the concatenations, reshapes and partial-sum adds that rebuild a result) record with
`mark_moved` the op they came from, `lancet.origin`, and the bytes that op's measured time
moves, `lancet.origin_bytes`, so a profile of the unpartitioned program costs them at that
op's measured time per byte (cost/sources.py): the same measurements as the rest of the
block, not another device's roofline. The op they came from is the first compute op with
bytes of the candidates the pass names: for a split, the producer of the value it cuts (the
op that wrote those bytes), then the region op that reads the parts; for a rebuild, the
region op whose result it rebuilds, then that result's first reader outside the region.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from xdsl.dialects.builtin import FloatAttr, IntegerAttr, StringAttr, f64, i64
from xdsl.ir import Operation

from lancet_mlir import attrs
from lancet_mlir.cost.keys import op_key
from lancet_mlir.cost.roofline import op_flops_bytes
from lancet_mlir.cost.sources import ZERO_COST_OPS, op_origin, op_origin_bytes
from lancet_mlir.dialects.comm import CollectiveOp
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.graph.fill import op_fill


def work_share(part: Operation, whole: Operation) -> float:
    """`part`'s FLOPs over `whole`'s (bytes when `whole` has no FLOPs), in (0, 1]; 1 when
    unknown."""
    mine, theirs = op_flops_bytes(part), op_flops_bytes(whole)
    if mine is None or theirs is None:
        return 1.0
    for num, den in zip(mine, theirs, strict=True):
        if den > 0:
            return min(1.0, num / den) if num > 0 else 1.0
    return 1.0


def mark_derived(part: Operation, whole: Operation, share: float | None = None) -> None:
    """Record on `part` (a new op computing a share of `whole`'s work) where it came from;
    `share` None: `work_share` (a caller that knows better, e.g. a token part's s / S of the
    tokens for a kernel whose FLOP count ignores the tokens, passes it)."""
    if op_origin_bytes(whole) is not None:  # a part of a data-moving op moves its bytes
        part.attributes[attrs.ORIGIN] = whole.attributes[attrs.ORIGIN]
        part.attributes[attrs.ORIGIN_BYTES] = whole.attributes[attrs.ORIGIN_BYTES]
        part.attributes.pop(attrs.SHARE, None)
        return
    share = work_share(part, whole) if share is None else share
    origin = op_origin(whole)
    key = op_key(whole) if origin is None else origin[0]
    if origin is not None:
        share *= origin[1]
    if share >= 1.0 and key == op_key(part):  # a part's own key only when it may be whole
        part.attributes.pop(attrs.ORIGIN, None)
        part.attributes.pop(attrs.SHARE, None)
        return
    part.attributes[attrs.ORIGIN] = origin_attr(key)
    if share < 1.0:
        # in (0, 1): shared per value (0.0 and -0.0 are equal keys of a cache, not equal attributes)
        cached = share > 0.0
        part.attributes[attrs.SHARE] = share_attr(share) if cached else FloatAttr(share, f64)
    else:
        part.attributes.pop(attrs.SHARE, None)


@lru_cache(maxsize=1 << 12)
def origin_attr(key: str) -> StringAttr:
    """The `lancet.origin` value of `key`, one object per key while it is used: attributes are
    immutable, so the parts of an op share it (a new one per part was about 2 % of building a
    token candidate) and number by identity (`support.numbering`)."""
    return StringAttr(key)


@lru_cache(maxsize=1 << 12)
def share_attr(share: float) -> FloatAttr:
    """The `lancet.share` value `share`, shared as `origin_attr` is; for a share > 0 only (0.0
    and -0.0 are one key of the cache but two attributes)."""
    return FloatAttr(share, f64)


def moved_origin(candidates: Sequence[Operation | None]) -> tuple[str, float] | None:
    """(origin key, bytes its measured time moves) for ops that move the data of the first
    candidate that is a costed compute op with bytes (a part counts as its origin's key and
    its bytes over its share; a data-moving op passes its own origin on), or None."""
    for op in candidates:
        if op is None or isinstance(op, CollectiveOp) or op_display_name(op) in ZERO_COST_OPS:
            continue
        moved = op_origin_bytes(op)
        origin = op_origin(op)
        if moved is not None and origin is not None:
            return origin[0], moved
        counted = op_flops_bytes(op)
        if counted is None or counted[1] <= 0:
            continue
        # its measured time is (origin's) x share x fill: per byte, over bytes / share / fill
        per = op_fill(op) * (1.0 if origin is None else origin[1])
        return (op_key(op) if origin is None else origin[0]), counted[1] / per
    return None


def mark_moved(ops: Sequence[Operation], candidates: Sequence[Operation | None]) -> None:
    """Record on each of `ops` (new ops that only move data, module doc) the origin that
    `moved_origin(candidates)` picks; nothing when none qualifies."""
    found = moved_origin(candidates)
    if found is None:
        return
    key, nbytes = found
    for op in ops:
        op.attributes[attrs.ORIGIN] = origin_attr(key)
        # whole bytes (an integer prints plainly; a part's bytes over its share round off
        # by less than a byte)
        op.attributes[attrs.ORIGIN_BYTES] = IntegerAttr(max(1, round(nbytes)), i64)
