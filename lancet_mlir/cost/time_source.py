"""Where the cost model's time for an op comes from.

The cost model (cost_model.py) takes an op's time from the first of: the op's own
`lancet.time_us` attribute ("attribute"), a profile entry for its op key ("profile"), for a
collective the comm tables ("table", when a table holds that collective kind) or the device's
alpha-beta model ("alpha-beta"), the roofline estimate from FLOPs and bytes ("roofline"),
and else 0 ("zero"). `time_source` answers that question for one op with the same order, so
reports can count the sources and traces can name each event's. A `lancet.fill` scales the
time but does not change its source (a filled collective skips the profile, as in the model).
"""

from __future__ import annotations

from collections.abc import Iterable

from xdsl.ir import Operation

from lancet_mlir.cost.cost_model import CostModel, explicit_time_us
from lancet_mlir.cost.keys import op_key
from lancet_mlir.cost.roofline import op_roofline_us
from lancet_mlir.dialects.comm import CollectiveOp
from lancet_mlir.graph.fill import op_fill

SOURCES = ("attribute", "profile", "table", "alpha-beta", "roofline", "zero")
"""Every time source, in the cost model's order of priority."""


def time_source(model: CostModel, op: Operation) -> str:
    """The source of `model`'s time for `op` (one of SOURCES)."""
    if explicit_time_us(op) is not None:
        return "attribute"
    filled_comm = isinstance(op, CollectiveOp) and op_fill(op) < 1  # skips the profile
    if model.config.profiles and not filled_comm and model.profile.mean_us(op_key(op)) is not None:
        return "profile"
    if isinstance(op, CollectiveOp):
        return "table" if model.comm.group_sizes(op.KIND) else "alpha-beta"
    if op_roofline_us(op, model.device) is not None:
        return "roofline"
    return "zero"


def count_sources(model: CostModel, ops: Iterable[Operation]) -> dict[str, int]:
    """How many of `ops` take their time from each source (every source listed, 0 if none)."""
    counts: dict[str, int] = dict.fromkeys(SOURCES, 0)
    for op in ops:
        counts[time_source(model, op)] += 1
    return counts
