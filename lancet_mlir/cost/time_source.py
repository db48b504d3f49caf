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

import sys
from collections.abc import Iterable, Sequence
from typing import Any

from xdsl.ir import Operation

from lancet_mlir.cost.cost_model import CostModel
from lancet_mlir.dialects.comm import CollectiveOp

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


def source_summary(
    model: CostModel, blocks: Iterable[tuple[str, Sequence[Operation]]]
) -> dict[str, Any]:
    """The report's `time_sources`: `count_sources` over every block's ops, and, when a
    block's compute ops take their times from measured sources (a profile, a trace) and from
    estimates (the roofline) both, `mixed`: one entry per such block, `{"block": label,
    "measured": {source: ops}, "estimated": {source: ops}}`. Explicit times (`attribute`),
    collectives and ops costed 0 are left out of that test: estimates of other kinds in one
    block are comparable, measurements next to estimates of another device may not be."""
    counts: dict[str, int] = dict.fromkeys(SOURCES, 0)
    measured = {s.name for s in model.chain if s.measured}
    mixed: list[dict[str, Any]] = []
    for label, ops in blocks:
        kinds: dict[bool, dict[str, int]] = {True: {}, False: {}}
        for op in ops:
            t, name = model.time_and_source(op)
            counts[name] = counts.get(name, 0) + 1
            if isinstance(op, CollectiveOp) or t == 0 or name in ("attribute", "zero"):
                continue
            side = kinds[name in measured]
            side[name] = side.get(name, 0) + 1
        if kinds[True] and kinds[False]:
            mixed.append({"block": label, "measured": kinds[True], "estimated": kinds[False]})
    summary: dict[str, Any] = dict(counts)
    if mixed:
        summary["mixed"] = mixed
    return summary


def warn_mixed(summary: dict[str, Any], tool: str = "lancet") -> bool:
    """One warning line on stderr when `summary` (source_summary) has mixed blocks."""
    mixed = summary.get("mixed")
    if not mixed:
        return False
    first = mixed[0]

    def phrase(side: dict[str, int]) -> str:
        return ", ".join(f"{n} {name}" for name, n in side.items())

    more = f" (and {len(mixed) - 1} more block(s))" if len(mixed) > 1 else ""
    sys.stderr.write(
        f"{tool}: warning: {first['block']}: compute costed from measurements "
        f"({phrase(first['measured'])}) and estimates ({phrase(first['estimated'])}){more}; "
        "their times may not be comparable (report: time_sources.mixed)\n"
    )
    return True
