"""`lancet.fill`: the expected share of its padded rows an op really processes.

A token part's window is a full, zero-padded tensor (static shapes), but only the part's own
rows are valid; `lancet.fill = f` says the op touches about f of them, so the cost model
scales the op's compute time by f and costs a collective at f of its payload bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects.builtin import Float64Type, FloatAttr, IntegerAttr
from xdsl.ir import Operation

from lancet_mlir import attrs
from lancet_mlir.dialects.comm import CollectiveOp
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.support.errors import UserError


def op_fill(op: Operation) -> float:
    """The op's `lancet.fill` (1.0 when absent); UserError naming the op when it is not a
    number in (0, 1]."""
    attr = op.attributes.get(attrs.FILL)
    if attr is None:
        return 1.0
    if isinstance(attr, IntegerAttr | FloatAttr) and not isinstance(attr.value.data, bool):
        value = float(attr.value.data)
        if math.isfinite(value) and 0 < value <= 1:
            return value
    raise UserError(
        f"{op_display_name(op)}: {attrs.FILL} must be a number in (0, 1], got {attr}", op=op
    )


def fused_fill(members: Sequence[CollectiveOp]) -> float:
    """The fill of one collective fusing `members`: their payload-weighted mean fill, so the
    fused op is costed at the sum of the members' filled bytes."""
    fills = [op_fill(m) for m in members]
    if len(set(fills)) == 1:  # the common case, kept exact
        return fills[0]
    sizes = [m.payload_bytes() for m in members]
    total = sum(sizes)
    if total == 0:
        return 1.0
    return min(1.0, sum(f * n for f, n in zip(fills, sizes, strict=True)) / total)


def set_fill(op: Operation, fill: float) -> None:
    """Write `fill` on `op` (f64), or remove the annotation for a full op (fill 1)."""
    if fill >= 1.0:
        op.attributes.pop(attrs.FILL, None)
    else:
        op.attributes[attrs.FILL] = FloatAttr(fill, Float64Type())
