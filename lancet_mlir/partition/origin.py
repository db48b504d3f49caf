"""`lancet.origin` / `lancet.share` on the parts a partitioning pass creates.

A part of op P (a chunk of its capacity slots, a token part, a region part) records P's op
key and the share of P's work it does, so that a measured cost source (a profile of the
unpartitioned program) costs the part as that share of P's measured time instead of falling
back to an estimate of another kind (cost/sources.py, "Derived ops"). The share is the part's
FLOPs over P's (its bytes' share for an op without FLOPs) unless the pass knows it (a token
part: its share of the tokens), so n even parts of P together cost what P does. A part of a part keeps the first op's key and multiplies the shares. A part with
P's own key and all of its work (a token part's window, which `lancet.fill` scales) records
nothing: its own key already finds P's entry.
"""

from __future__ import annotations

from xdsl.dialects.builtin import FloatAttr, StringAttr, f64
from xdsl.ir import Operation

from lancet_mlir import attrs
from lancet_mlir.cost.keys import op_key
from lancet_mlir.cost.roofline import op_flops_bytes
from lancet_mlir.cost.sources import op_origin


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
    share = work_share(part, whole) if share is None else share
    origin = op_origin(whole)
    key = op_key(whole) if origin is None else origin[0]
    if origin is not None:
        share *= origin[1]
    if key == op_key(part) and share >= 1.0:
        part.attributes.pop(attrs.ORIGIN, None)
        part.attributes.pop(attrs.SHARE, None)
        return
    part.attributes[attrs.ORIGIN] = StringAttr(key)
    if share < 1.0:
        part.attributes[attrs.SHARE] = FloatAttr(share, f64)
    else:
        part.attributes.pop(attrs.SHARE, None)
