"""Fast costing of a partition choice: one template part instead of n copies.

Parts of a region op have the same shapes when n divides every split block; otherwise the
first B mod n parts of a block of B rows have one row more (`base.part_sizes`), so the
parts fall into a few classes of equal shapes (two when the region's blocks share one
remainder). One detached copy per op and class (its first part) gives the time of all
parts of the class; the phased simulation then runs on a plain task graph with the n
parts replicated. Border splits and rebuilds are costed from one template each per
class. This is what the part-count and range choices call many times; the chosen plan is
then built for real (`region.build_region`). The choices of one pair share their template
ops (`region.SharedOps`): a range or part count only builds and costs the copies, splits
and rebuilds that no earlier choice made from the same values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.ir import Operation, SSAValue

from lancet_mlir.dialects.comm import AllToAllOp
from lancet_mlir.dialects.destination import in_place_concat, is_gemm_kernel
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.axes import AxisSolution, split_sizes
from lancet_mlir.partition.base import part_sizes, shape_of
from lancet_mlir.partition.origin import mark_moved
from lancet_mlir.partition.phased import ARBITRARY, EPILOGUE, PRELUDE, part_phase, phased_simulate
from lancet_mlir.partition.region import (
    Available,
    OpCost,
    RegionBuilder,
    SharedOps,
    blocked_shape,
)
from lancet_mlir.partition.rewriter import role_of
from lancet_mlir.partition.rules import PARTIAL, build_kernel_op, rebuild_concat

_SUM, _JOINED, _BLOCKED = "partial-sum", "joined", "blocked"
"""Tags of `_rebuild_prices`: how a region result is rebuilt from its parts."""


def _in_place_like(
    classes: Sequence[int], template: dict[int, SSAValue], axis: int, role: dict[str, Any]
) -> bool:
    """Whether the real rebuild (`region.RegionBuilder`, one part per k) is built in place:
    `rules.rebuild_concat` decides on the parts' writers, which the class templates stand
    for (a concat repeating a template would not qualify), so a probe over one template per
    class asks the same question; the probe is dropped again. An in-place rebuild costs 0
    whatever `time_of` is (the cost model's `in-place` source)."""
    probe = rebuild_concat([template[k] for k in classes], axis, role)
    answer = in_place_concat(probe)
    probe.drop_all_references()
    probe.erase(safe_erase=False)
    return answer


def _accumulates_like(builder: RegionBuilder, i: int, j: int) -> bool:
    """Whether the real chain of partial sums of result j of region op i
    (`rules.partial_sum`) is accumulated in place (`destination.accumulation_ok`): its parts
    are copies of op i, so they are single GEMM-family results read only by the chain exactly
    when op i is a single-result GEMM-family kernel whose result no other region op reads.
    An accumulated chain costs 0 whatever `time_of` is (the cost model's `in-place` source)."""
    o = builder.graph.ops[i]
    if not is_gemm_kernel(o) or len(o.results) != 1:
        return False
    return all(u.operation not in builder.originals for u in o.results[j].uses)


def _producers(op: Operation) -> list[Operation]:
    """The ops defining `op`'s operands (block arguments have none)."""
    return [v.owner for v in op.operands if isinstance(v.owner, Operation)]


class _Tasks:
    def __init__(self) -> None:
        self.preds: list[list[int]] = []
        self.is_comm: list[bool] = []
        self.times: list[float] = []
        self.phases: list[int] = []

    def add(self, time: float, comm: bool, phase: int, preds: Sequence[int]) -> int:
        self.preds.append(sorted(set(preds)))
        self.is_comm.append(comm)
        self.times.append(time)
        self.phases.append(phase)
        return len(self.times) - 1


def estimate_range(
    graph: DataflowGraph,
    range_nodes: Sequence[int],
    solution: AxisSolution,
    n: int,
    time_of: OpCost,
    available: Available | None = None,
    shared: SharedOps | None = None,
) -> float:
    """The phased-simulation makespan of `range_nodes` with `solution`'s region split into
    `n` parts (as `simulate_range` of the built region, from one template part).

    `shared` (the same `available` for every call with it) keeps the template ops for the
    next estimates, which reuse those they would make alike; its owner discards them.
    Without it they are discarded here. The result is the same either way."""
    own = shared is None
    shared = SharedOps() if shared is None else shared
    builder = RegionBuilder(graph, solution, n, available or {}, shared)
    classes = part_classes(graph, solution, n)
    try:
        for k in sorted(set(classes)):
            for i in builder.out.nodes:
                builder.copy(i, k)
        return _simulate(graph, range_nodes, builder, classes, time_of)
    finally:
        if own:
            shared.discard()


def part_classes(graph: DataflowGraph, solution: AxisSolution, n: int) -> list[int]:
    """For each part k, the first part with the same shapes everywhere in the region (its
    rows in every split block are the same)."""
    blocks = sorted({b for _, b, _ in split_sizes(graph, solution)})
    sizes = [part_sizes(b, n) for b in blocks]
    first: dict[tuple[int, ...], int] = {}
    return [first.setdefault(tuple(s[k] for s in sizes), k) for k in range(n)]


def _simulate(
    graph: DataflowGraph,
    range_nodes: Sequence[int],
    builder: RegionBuilder,
    classes: list[int],
    time_of: OpCost,
) -> float:
    n, out = builder.n, builder.out
    shared = builder.shared
    assert shared is not None

    def timed(op: Operation) -> float:
        return shared.time(op, time_of)

    tasks = _Tasks()
    task_of: dict[Operation, int] = {}
    for op, phase in zip(list(out.ops), list(out.phases), strict=True):
        if phase == PRELUDE:  # border splits: their inputs come from outside the range
            preds = [task_of[o] for o in _producers(op) if o in task_of]
            task_of[op] = tasks.add(timed(op), False, PRELUDE, preds)
    template: dict[tuple[int, int], Operation] = {}
    for k in sorted(set(classes)):
        for i in out.nodes:
            owner = builder.chunks[(i, 0)][k].owner
            assert isinstance(owner, Operation)
            template[(i, k)] = owner
    node_of = {op: i for (i, _), op in template.items()}
    time_us = {op: timed(op) for op in template.values()}  # once per template, not per part
    part_task: dict[tuple[int, int], int] = {}
    for k in range(n):
        for i in out.nodes:
            copy = template[(i, classes[k])]
            preds = []
            for owner in _producers(copy):
                if owner in node_of:
                    preds.append(part_task[(node_of[owner], k)])
                elif owner in task_of:
                    preds.append(task_of[owner])
            comm = isinstance(copy, AllToAllOp)
            part_task[(i, k)] = tasks.add(time_us[copy], comm, part_phase(k), preds)
    merged: dict[Operation, int] = {}
    inside = set(out.nodes)
    mine = set(out.ops)

    def outside(user: Operation) -> bool:
        # an op outside the region, not one that another choice made (shared, kept for
        # later choices): the uses are those of this choice alone, as when it was built
        return user not in builder.originals and (user in mine or user not in shared.owned_set)

    for i in out.nodes:
        o = graph.ops[i]
        for j, res in enumerate(o.results):
            if any(outside(use.operation) for use in res.uses):
                last = _rebuild_tasks(builder, tasks, part_task, classes, (i, j), timed)
                merged.setdefault(o, last)
    index = {graph.ops[i]: i for i in range_nodes}
    other_task: dict[int, int] = {}
    for i in range_nodes:
        if i in inside:
            continue
        preds = []
        for owner in _producers(graph.ops[i]):
            if owner in merged:
                preds.append(merged[owner])
            elif owner in index and index[owner] in other_task:
                preds.append(other_task[index[owner]])
        other_task[i] = tasks.add(timed(graph.ops[i]), graph.is_comm[i], ARBITRARY, preds)
    result = phased_simulate(tasks.preds, tasks.is_comm, tasks.times, tasks.phases)
    return result.makespan_us


def _rebuild_tasks(
    builder: RegionBuilder,
    tasks: _Tasks,
    part_task: dict[tuple[int, int], int],
    classes: list[int],
    ref: tuple[int, int],
    time_of: OpCost,
) -> int:
    """Tasks rebuilding result j of node i (`ref`) from its n parts, each part costed by
    its class's template; returns the last task."""
    i, j = ref
    parts = [part_task[(i, k)] for k in range(builder.n)]
    prices = _rebuild_prices(builder, classes, ref, time_of)
    if prices[0] == _SUM:
        last, add_us = parts[0], prices[1]
        for k in range(1, builder.n):  # the chain adds part k as soon as it is there
            last = tasks.add(add_us, False, EPILOGUE, [last, parts[k]])
        return last
    if prices[0] == _JOINED:
        return tasks.add(prices[1], False, EPILOGUE, parts)
    _, wide_us, joined_us, back_us = prices
    reshaped = [tasks.add(wide_us[classes[k]], False, EPILOGUE, [p]) for k, p in enumerate(parts)]
    concat_task = tasks.add(joined_us, False, EPILOGUE, reshaped)
    return tasks.add(back_us, False, EPILOGUE, [concat_task])


def _rebuild_prices(
    builder: RegionBuilder, classes: list[int], ref: tuple[int, int], time_of: OpCost
) -> tuple:
    """The times of the ops rebuilding result j of node i (`ref`) from its class templates:
    (_SUM, µs) for partial sums, (_JOINED, µs) for a concatenation, or (_BLOCKED, µs per class of the
    reshapes, µs of the concatenation, µs of the reshape back). Built once per template
    parts in `builder.shared` (and owned by it)."""
    shared = builder.shared
    assert shared is not None
    n = builder.n
    i, j = ref
    origins = builder.rebuild_origins(i, j)
    template = builder.chunks[(i, j)]
    key = (i, j, n, builder.options[i], tuple(classes), tuple(origins),
           *(template[k] for k in sorted(set(classes))))  # fmt: skip
    known = shared.prices.get(key)
    if known is not None:
        return known

    def put(op: Operation) -> Operation:
        mark_moved([op], origins)  # before it is costed, as the built rebuild is
        shared.own([op])
        return op

    o = builder.graph.ops[i]
    role = role_of(o)
    slot = builder.options[i][1][j]
    prices: tuple
    if slot == PARTIAL:
        add = put(build_kernel_op("add", [template[0], template[0]], None, role))
        prices = (_SUM, 0.0 if _accumulates_like(builder, i, j) else time_of(add))
    else:
        assert isinstance(slot, tuple)
        axis, groups = slot
        shape = shape_of(o.results[j])
        assert shape is not None
        if groups == 1:
            inputs = [template[classes[k]] for k in range(n)]
            concat = put(build_kernel_op("concat", inputs, {"axis": axis}, role))
            in_place = _in_place_like(sorted(set(classes)), template, axis, role)
            prices = (_JOINED, 0.0 if in_place else time_of(concat))
        else:
            inner = part_sizes(shape[axis] // groups, n)
            wide: dict[int, Operation] = {}
            for k in sorted(set(classes)):
                wide[k] = put(
                    build_kernel_op(
                        "reshape", [template[k]],
                        {"shape": blocked_shape(shape, axis, groups, inner[k])}, role,
                    )
                )  # fmt: skip
            wide_us = {k: time_of(op) for k, op in wide.items()}
            joined = put(
                build_kernel_op(
                    "concat", [wide[classes[k]].results[0] for k in range(n)], {"axis": axis + 1},
                    role,
                )
            )  # fmt: skip
            joined_us = time_of(joined)
            back = put(build_kernel_op("reshape", [joined.results[0]], {"shape": shape}, role))
            prices = (_BLOCKED, wide_us, joined_us, time_of(back))
    shared.prices[key] = prices
    return prices
