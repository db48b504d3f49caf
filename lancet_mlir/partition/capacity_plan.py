"""Capacity-axis regions of `moe-partition` (algo=range|dp), planned on data: which range
around each all-to-all pair is split and into how many parts (`choose_range`), costed by the
phased simulation (`region.simulate_range`) and the estimate of the split range
(`estimate.estimate_range`).

`plan_capacity_block` plans every pair of a block on the input graph, in program order: a
later pair's region takes the parts of the values an earlier region rebuilds (`available`,
keyed by the original value: a backward region reads a forward region's activations in
parts), exactly as if the earlier region had been applied first, since the pairs' layer
ranges are disjoint. `CapacityPlan.layout` is the block the plan gives (`layout.Layout`,
`layout.planned_graph`), so the pass simulates it before the IR changes and then applies it
(`layout.apply_layout`) or discards it: the IR is built once, never cloned and restored.

A block of repeated layers asks the same question once per layer: a pair whose layer has the
key of an earlier pair's (`layer_key`: everything the choice reads, without the offset) takes
that choice at its own nodes instead of searching again; its region is built as any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.ir import Operation

from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.axes import AxisSolution, Option, solve_axes, unfit, unfit_op
from lancet_mlir.partition.base import PartitionError, node_name
from lancet_mlir.partition.dp import best_ranges
from lancet_mlir.partition.estimate import estimate_range
from lancet_mlir.partition.expert_span import all_to_all_pairs
from lancet_mlir.partition.layer_key import (
    LayerKey,
    LayerMemo,
    MemoStats,
    canonical_solution,
    placed_solution,
)
from lancet_mlir.partition.layout import Layout, layout, planned_graph
from lancet_mlir.partition.region import (
    Available,
    OpCost,
    PartitionedRegion,
    SharedOps,
    build_region,
    simulate_range,
)

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
    shared = SharedOps()  # the template ops of the estimates, shared by the choices
    try:
        return _choose(graph, nodes, entry, exit_, time_of, available, search, options, shared)
    finally:
        shared.discard()


def _choose(
    graph: DataflowGraph,
    nodes: list[int],
    entry: int,
    exit_: int,
    time_of: OpCost,
    available: Available,
    search: CapacitySearch,
    options: OptionsCache,
    shared: SharedOps,
) -> Choice:
    """`choose_range` with its caches."""
    if search.algo == "range" or search.parts is not None:
        return best_parts(graph, nodes, entry, exit_, time_of, available, options, search, shared)
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
                graph, members, entry, exit_, time_of, available, options, search, shared
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
    shared: SharedOps | None = None,
) -> Choice:
    """The part count (or none) that the phased simulation rates best for the region
    around the pair within `nodes` (`shared`: template ops kept across the calls for one
    pair, `estimate.estimate_range`)."""
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
        raise ForcedPartsError(reason, unfit_op(graph, loose, search.parts) or graph.ops[entry])
    best = Choice(nodes, None, None, base, base)
    # a solution per count (uneven counts too): the axis that allows n parts may differ
    # from the one for 2; every count is costed, the cheapest wins (ties: fewer parts)
    for n in range(2, search.max_parts + 1):
        solution = solve(n)
        if solution is None:
            continue  # a reshape's blocks may take 4 parts but not 3
        cost = estimate_range(graph, nodes, solution, n, time_of, available, shared)
        if cost < best.cost_us:
            best = Choice(nodes, solution, n, base, cost)
    return best


@dataclass
class CapacityPlan:
    """The regions chosen for a block's all-to-all pairs (none inserted yet), each with the
    range it replaces and that range's launch order (from `simulate_range`)."""

    graph: DataflowGraph
    regions: list[PartitionedRegion] = field(default_factory=list)
    ranges: list[list[int]] = field(default_factory=list)
    orders: list[list[Operation]] = field(default_factory=list)
    pairs: list[tuple[int, int]] = field(default_factory=list)
    """(entry, exit) of the pair of each region."""
    choices: list[Choice] = field(default_factory=list)
    """The choice of each region (its axis solution and part count)."""

    def layout(self) -> Layout:
        """What applying the plan does to the block, as data."""
        pieces = list(zip(self.ranges, self.orders, strict=True))
        return layout(self.graph, pieces, self.regions)

    def epilogues(self) -> list[Operation]:
        """Every rebuild op, in creation order (some become unused once applied)."""
        return [op for region in self.regions for op in region.epilogue]

    def planned_graph(self) -> DataflowGraph:
        """The graph the block has once the plan is applied and the rebuilds nobody reads
        are erased (`erase_unused`), without changing the IR."""
        return planned_graph(self.graph, self.layout(), self.epilogues())

    def discard(self) -> None:
        """Erase every new op (none was inserted), later regions first (they may read an
        earlier region's parts)."""
        for region in reversed(self.regions):
            region.discard()
        self.regions.clear()
        self.ranges.clear()
        self.orders.clear()
        self.pairs.clear()
        self.choices.clear()


def plan_capacity_block(
    graph: DataflowGraph,
    time_of: OpCost,
    search: CapacitySearch,
    memo: bool = True,
    stats: MemoStats | None = None,
) -> CapacityPlan:
    """The region chosen for every all-to-all pair of the block of `graph` (module doc),
    in program order. A pair whose MoE layer meets an earlier chosen range in program order
    (an interleaved input order) is left whole, or with `search.parts` raises
    ForcedPartsError; so does a forced count that does not fit.

    `memo`: a pair whose layer is the same problem as an earlier pair's (`layer_key`) takes
    that pair's choice at its own offset instead of searching again (the same plan; False
    searches every pair); `stats` counts what the memo did."""
    plan = CapacityPlan(graph)
    available: Available = {}
    choices: LayerMemo[Choice] = LayerMemo(memo, stats)  # this block's planning only
    try:
        for entry, exit_ in all_to_all_pairs(graph):
            _plan_pair(plan, entry, exit_, time_of, available, search, choices)
    except ForcedPartsError:
        plan.discard()
        raise
    return plan


def _plan_pair(
    plan: CapacityPlan,
    entry: int,
    exit_: int,
    time_of: OpCost,
    available: Available,
    search: CapacitySearch,
    memo: LayerMemo[Choice],
) -> None:
    """Add the region chosen for the pair (entry, exit_) to `plan` (if any) and offer the
    parts of the values it rebuilds to later pairs."""
    graph = plan.graph
    layer = layer_range(graph, entry, exit_)
    if any(r[0] <= layer[-1] and layer[0] <= r[-1] for r in plan.ranges):
        if search.parts is not None:
            raise ForcedPartsError(
                f"the MoE layer of '{node_name(graph, entry)}' interleaves in program "
                "order with an earlier one (each layer's ops must form one range)",
                graph.ops[entry],
            )
        return
    # the choice reads the layer's own ops only (plus what `available` offers them and who
    # reads their results): the key holds all of it, so an equal key means an equal choice
    key = memo.key(graph, [layer], time_of, available, (entry - layer[0], exit_ - layer[0]))
    known = memo.get(key)
    if known is not None:
        assert key is not None
        choice = _placed_choice(known, key)
    else:
        choice = choose_range(graph, entry, exit_, time_of, available, search)
        if key is not None:
            memo.put(key, _canonical_choice(choice, key))
    if choice.parts is None or choice.solution is None:
        return
    region = build_region(graph, choice.solution, choice.parts, available)
    cost = simulate_range(graph, choice.range_nodes, time_of, region)
    plan.regions.append(region)
    plan.ranges.append(choice.range_nodes)
    plan.orders.append(cost.order)
    plan.pairs.append((entry, exit_))
    plan.choices.append(choice)
    for ref, (chunking, parts) in region.chunks.items():
        # keyed by the original value: later regions read it before the plan is applied
        # (once applied, its uses outside the region read the rebuilt value)
        original = graph.ops[ref[0]].results[ref[1]]
        available.setdefault(original, {})[(chunking, region.n)] = parts


def _canonical_choice(choice: Choice, key: LayerKey) -> Choice:
    """`choice` in the positions of `key` (to remember)."""
    solution = None if choice.solution is None else canonical_solution(choice.solution, key)
    nodes = [key.position[i] for i in choice.range_nodes]
    return Choice(nodes, solution, choice.parts, choice.base_us, choice.cost_us)


def _placed_choice(choice: Choice, key: LayerKey) -> Choice:
    """A remembered (canonical) `choice` at the nodes of `key`."""
    solution = None if choice.solution is None else placed_solution(choice.solution, key)
    nodes = [key.nodes[p] for p in choice.range_nodes]
    return Choice(nodes, solution, choice.parts, choice.base_us, choice.cost_us)


def layer_range(graph: DataflowGraph, entry: int, exit_: int) -> list[int]:
    """The MoE layer's own ops in program order: from the entry all-to-all's nearest compute
    producer (the dispatch) to the exit's nearest compute consumer (the combine); a backward
    pass's later readers of the forward values are not part of the layer."""
    lo = max([p for p in graph.preds[entry] if not graph.is_comm[p]], default=entry)
    hi = min([s for s in graph.succs[exit_] if not graph.is_comm[s]], default=exit_)
    return list(range(lo, hi + 1))
