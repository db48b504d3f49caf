"""Where the cost model's time for an op comes from.

The cost model (cost_model.py) takes an op's time from the first source of its chain that
answers (sources.py): by default the op's own `lancet.time_us` attribute ("attribute"), a
profile entry for its op key or its origin's ("profile"), the caller's sources (their own
names), for a collective the comm tables ("table", when a table holds that collective kind) or
the device's alpha-beta model ("alpha-beta"), the roofline estimate from FLOPs and bytes
("roofline"), and else 0 ("zero"). `time_source` names that source for one op, so reports can
count the sources and traces can name each event's. A `lancet.fill` scales the time but does
not change its source (a filled collective skips the profile, as in the model).
"""

from __future__ import annotations

from collections.abc import Iterable

from xdsl.ir import Operation

from lancet_mlir.cost.cost_model import CostModel

SOURCES = ("attribute", "profile", "table", "alpha-beta", "roofline", "zero")
"""The built-in time sources, in the default chain's order of priority."""


def time_source(model: CostModel, op: Operation) -> str:
    """The name of the source of `model`'s time for `op` (one of SOURCES, or a custom
    source's name)."""
    return model.time_and_source(op)[1]


def count_sources(model: CostModel, ops: Iterable[Operation]) -> dict[str, int]:
    """How many of `ops` take their time from each source (every built-in source listed, 0 if
    none; a custom source after them, when it gave a time)."""
    counts: dict[str, int] = dict.fromkeys(SOURCES, 0)
    for op in ops:
        name = time_source(model, op)
        counts[name] = counts.get(name, 0) + 1
    return counts
