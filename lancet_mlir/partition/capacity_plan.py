"""Capacity-axis regions of `moe-partition` (algo=range|dp), planned on data: which range
around each all-to-all pair is split and into how many parts (`choose_range`), costed by the
phased simulation (`region.simulate_range`) and the estimate of the split range
(`estimate.estimate_range`). The pass builds and applies the chosen region."""

from __future__ import annotations

from dataclasses import dataclass

from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.axes import AxisSolution, Option, solve_axes, unfit
from lancet_mlir.partition.base import PartitionError
from lancet_mlir.partition.dp import best_ranges
from lancet_mlir.partition.estimate import estimate_range
from lancet_mlir.partition.region import Available, OpCost, simulate_range

OptionsCache = dict[tuple[int, tuple[int, ...]], list[tuple[Option, tuple[int, ...]]]]
"""Axis options per (node, parts) key, valid while the graph does not change."""


class ForcedPartsError(PartitionError):
    """A forced part count (`parts`) that does not fit a pair's region; the message names
    the op and dimension."""


@dataclass(frozen=True)
class CapacitySearch:
    """What `choose_range` tries: `algo` range or dp, a forced part count (`parts`) or
    every count 2..`max_parts`."""

    algo: str
    parts: int | None
    max_parts: int


@dataclass(frozen=True)
class Choice:
    """How one range runs: its nodes, the region solved in it and the chosen part count
    (None: not partitioned), with the simulated makespans."""

    range_nodes: list[int]
    solution: AxisSolution | None
    parts: int | None
    base_us: float
    cost_us: float


def choose_range(
    graph: DataflowGraph,
    entry: int,
    exit_: int,
    time_of: OpCost,
    available: Available,
    search: CapacitySearch,
) -> Choice:
    """How the region around the all-to-all pair (entry, exit_) runs: with `search.algo`
    range (or a forced count), the MoE layer's own ops; with dp, the range around the pair
    that Lancet's DP over ranges (§8.3) finds cheapest."""
    nodes = layer_range(graph, entry, exit_)
    options: OptionsCache = {}  # valid while the graph does not change
    if search.algo == "range" or search.parts is not None:
        return best_parts(graph, nodes, entry, exit_, time_of, available, options, search)
    # dp: cut the layer's ops into ranges (the pair's own span is one group) and
    # partition the range holding the pair that the DP finds cheapest (§8.3)
    groups = [[i] for i in nodes if i < entry]
    groups.append(list(range(entry, exit_ + 1)))
    groups += [[i] for i in nodes if i > exit_]
    core = next(g for g, members in enumerate(groups) if entry in members)
    choices: dict[tuple[int, int], Choice] = {}

    def local(j: int, i: int) -> float:
        members = [m for g in groups[j:i] for m in g]
        if j <= core < i:
            choices[(j, i)] = best_parts(
                graph, members, entry, exit_, time_of, available, options, search
            )
            return choices[(j, i)].cost_us
        return simulate_range(graph, members, time_of).makespan_us

    plan = best_ranges(len(groups), len(groups), local)
    return next(choices[r] for r in plan.ranges if r in choices)

def best_parts(
    graph: DataflowGraph,
    nodes: list[int],
    entry: int,
    exit_: int,
    time_of: OpCost,
    available: Available,
    options: OptionsCache,
    search: CapacitySearch,
) -> Choice:
    """The part count (or none) that the phased simulation rates best for the region
    around the pair within `nodes`."""
    base = simulate_range(graph, nodes, time_of).makespan_us
    weights = {i: max(time_of(graph.ops[i]), 1e-3) for i in nodes}

    def solve(parts: int) -> AxisSolution | None:
        return solve_axes(graph, nodes, [entry, exit_], weights, parts=parts, cache=options)

    if search.parts is not None:
        solution = solve(search.parts)
        if solution is not None:
            return Choice(nodes, solution, search.parts, base, base)
        loose = solve(2)
        if loose is None:
            return Choice(nodes, None, None, base, base)  # no axis for this pair at all
        reason = unfit(graph, loose, search.parts) or f"{search.parts} parts do not fit"
        raise ForcedPartsError(reason)
    best = Choice(nodes, None, None, base, base)
    # a solution per count (uneven counts too): the axis that allows n parts may differ
    # from the one for 2; every count is costed, the cheapest wins (ties: fewer parts)
    for n in range(2, search.max_parts + 1):
        solution = solve(n)
        if solution is None:
            continue  # a reshape's blocks may take 4 parts but not 3
        cost = estimate_range(graph, nodes, solution, n, time_of, available)
        if cost < best.cost_us:
            best = Choice(nodes, solution, n, base, cost)
    return best



def layer_range(graph: DataflowGraph, entry: int, exit_: int) -> list[int]:
    """The MoE layer's own ops in program order: from the entry all-to-all's nearest compute
    producer (the dispatch) to the exit's nearest compute consumer (the combine); a backward
    pass's later readers of the forward values are not part of the layer."""
    lo = max([p for p in graph.preds[entry] if not graph.is_comm[p]], default=entry)
    hi = min([s for s in graph.succs[exit_] if not graph.is_comm[s]], default=exit_)
    return list(range(lo, hi + 1))
