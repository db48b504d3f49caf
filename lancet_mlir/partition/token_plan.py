"""A token-part plan of one MoE layer with the regions around it (issue #10's regions
beyond the MoE layer).

The layer's forward token parts (`token.py`) take the logits and the dispatch input in
parts and give the combine's output in parts; here a capacity-free region before the gate
(attention, layer norms, the gate's matmul: any op whose registry rule allows splitting
along the token rows) and one after the combine (the residual add, the next layers' ops)
are solved with those values pinned to the token axis (`axes.solve_axes(fixed=...)`), so
part k flows from the region before, through the MoE layer, into the region after with no
concatenation in between: part k's all-to-alls overlap part k±1's attention and FFN. The
three are costed and emitted as one pipeline (phased simulation, §5.3); the backward's
token parts are their own range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from xdsl.ir import Operation, SSAValue

from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.axes import AxisSolution, solve_axes
from lancet_mlir.partition.base import PartitionError, value_ref
from lancet_mlir.partition.layout import Layout, Piece, apply_layout, layout
from lancet_mlir.partition.region import (
    Available,
    OpCost,
    PartitionedRegion,
    build_region,
    simulate_range,
)
from lancet_mlir.partition.token import TokenBuilder, TokenLayer, TokenRegions

TOKEN_AXIS = (0, 1)
"""The slot of a [S, ...] value cut into consecutive token ranges."""


@dataclass
class TokenPlan:
    """One layer's token parts with the regions around its forward and its backward."""

    layer: TokenLayer
    n: int
    core: TokenRegions
    around: list[PartitionedRegion | None]
    """Regions before the gate, after the combine, before the combine's gradient and
    after the dispatch's gradient (None: no op there takes the token axis)."""
    offered: Available
    """Parts of values this plan (and the earlier ones) make, for later plans."""
    solved: list[AxisSolution | None] = field(default_factory=list)
    """The axis solutions of the four regions around the layer (`plan_layer`'s `solved`)."""

    def forward(self) -> PartitionedRegion:
        """The forward's regions as one (their new ops, phases and rebuilds)."""
        return _joined([self.around[0], self.core.forward, self.around[1]], self.n)

    def backward(self) -> PartitionedRegion | None:
        """The backward's regions as one (None without a backward pass)."""
        if self.core.backward is None:
            return None
        return _joined([self.around[2], self.core.backward, self.around[3]], self.n)

    def ranges(self) -> list[list[int]]:
        """The program-order ranges of the forward and the backward regions."""
        out = []
        for region in (self.forward(), self.backward()):
            if region is not None:
                out.append(list(range(min(region.nodes), max(region.nodes) + 1)))
        return out

    def epilogues(self) -> list[Operation]:
        """Every rebuild op (some become unused once applied: later regions read parts)."""
        return [op for r in self.regions() for op in r.epilogue]

    def regions(self) -> list[PartitionedRegion]:
        """Every region of the plan."""
        core = [self.core.forward, self.core.backward]
        return [r for r in [*self.around, *core] if r is not None]

    def discard(self) -> None:
        """Erase every new op (none was inserted)."""
        for region in reversed(self.regions()):
            region.discard()


def _joined(regions: Sequence[PartitionedRegion | None], n: int) -> PartitionedRegion:
    out = PartitionedRegion([], n)
    for region in regions:
        if region is None:
            continue
        out.nodes = sorted(set(out.nodes) | set(region.nodes))
        out.ops += region.ops
        out.phases += region.phases
        out.merged.update(region.merged)
        out.epilogue += region.epilogue
    return out


@dataclass(frozen=True)
class Spans:
    """Nodes each region around a layer may take (program order)."""

    before: Sequence[int] = ()
    after: Sequence[int] = ()
    bwd_before: Sequence[int] = ()
    bwd_after: Sequence[int] = ()


def plan_layer(
    graph: DataflowGraph,
    layer: TokenLayer,
    n: int,
    spans: Spans,
    weights: Mapping[int, float],
    earlier: Available | None = None,
    solved: Sequence[AxisSolution | None] | None = None,
) -> TokenPlan:
    """The layer in `n` token parts with a region solved within each span: before the
    gate (giving the logits and the dispatch input in parts), after the combine (taking
    its output in parts), before the combine's gradient (giving it in parts) and after
    the dispatch's and the gate's gradients (taking them in parts). Backward regions read
    forward values in parts where the forward made them; every region takes the parts
    that `earlier` plans (of other layers) offer. `solved`: the four regions' solutions as
    this call would find them (an equal layer's, `token_block`), instead of solving again.
    Raises PartitionError when the layer itself cannot be split."""
    if solved is None:
        solved = _solve_regions(graph, layer, n, spans, weights)
    return _build_plan(graph, layer, n, solved, earlier)


def _solve_regions(
    graph: DataflowGraph, layer: TokenLayer, n: int, spans: Spans, weights: Mapping[int, float]
) -> list[AxisSolution | None]:
    """The solutions of the four regions of `plan_layer` (None: no region there)."""
    g = graph.ops
    logits, x = g[layer.gate].operands[0], g[layer.dispatch].operands[0]
    y = g[layer.combine].results[0]
    pins: dict[SSAValue, tuple[int, int]] = {logits: TOKEN_AXIS, x: TOKEN_AXIS}
    solved = [_region(graph, spans.before, [logits, x], pins, n, weights)]
    solved.append(
        _region(
            graph, spans.after, [], {y: TOKEN_AXIS}, n, weights, _readers(graph, y, spans.after)
        )
    )
    b = layer.bwd
    if b is not None:
        dy = g[b.combine_dx].operands[0]
        grads = [g[b.dispatch_dx].results[0], g[b.gate_dx].results[0]]
        pins_before: dict[SSAValue, tuple[int, int]] = {dy: TOKEN_AXIS}
        # weight gradients stay whole there: n partial sums of each cost more than they hide
        solved.append(_region(graph, spans.bwd_before, [dy], pins_before, n, weights, (), False))
        readers = sorted({r for v in grads for r in _readers(graph, v, spans.bwd_after)})
        pins_after: dict[SSAValue, tuple[int, int]] = {v: TOKEN_AXIS for v in grads}
        solved.append(_region(graph, spans.bwd_after, [], pins_after, n, weights, readers, False))
    else:
        solved += [None, None]
    return solved


def _build_plan(
    graph: DataflowGraph,
    layer: TokenLayer,
    n: int,
    solved: Sequence[AxisSolution | None],
    earlier: Available | None,
) -> TokenPlan:
    """The plan of `plan_layer` from the regions' solutions."""
    g = graph.ops
    b = layer.bwd
    y = g[layer.combine].results[0]
    built: list[PartitionedRegion | None] = [None] * 4
    available: Available = {v: dict(by) for v, by in (earlier or {}).items()}
    builder = TokenBuilder(graph, layer, n, available)
    try:
        built[0] = _build(graph, solved[0], n, available)
        builder.forward()
        _offer(available, builder.parts, [y], n)
        built[1] = _build(graph, solved[1], n, available)
        if b is not None:
            built[2] = _build(graph, solved[2], n, available)
            builder.backward()
            _offer(
                available, builder.parts, [g[b.dispatch_dx].results[0], g[b.gate_dx].results[0]], n
            )
            built[3] = _build(graph, solved[3], n, available)
    except PartitionError:
        for region in [*built, builder.fwd, builder.bwd]:
            if region is not None:
                region.discard()
        raise
    return TokenPlan(layer, n, builder.regions(), built, available, list(solved))


def _readers(graph: DataflowGraph, v: SSAValue, nodes: Sequence[int]) -> list[int]:
    inside = set(nodes)
    return sorted(
        {graph.index[u.operation] for u in v.uses if graph.index.get(u.operation) in inside}
    )


def _offer(
    available: Available,
    parts: Mapping[SSAValue, list[SSAValue]],
    values: Sequence[SSAValue],
    n: int,
) -> None:
    for v in values:
        available.setdefault(v, {})[(TOKEN_AXIS, n)] = parts[v]


def _build(
    graph: DataflowGraph, solution, n: int, available: Available
) -> PartitionedRegion | None:
    """Build a solved region (its border inputs from `available` where there) and offer
    its split results to the regions built after it."""
    if solution is None:
        return None
    region = build_region(graph, solution, n, available)
    for (i, j), (slot, parts) in region.chunks.items():
        available.setdefault(graph.ops[i].results[j], {})[(slot, n)] = parts
    return region


def _region(
    graph: DataflowGraph,
    nodes: Sequence[int],
    produced: Sequence[SSAValue],
    fixed: Mapping[SSAValue, tuple[int, int]],
    n: int,
    weights: Mapping[int, float],
    anchors: Sequence[int] = (),
    partial: bool = True,
) -> AxisSolution | None:
    """The heaviest region within `nodes` with `fixed` values on the token axis that
    contains the producers of `produced` (and `anchors`), or None."""
    if not nodes:
        return None
    inside = set(nodes)
    need = list(anchors)
    for v in produced:
        ref = value_ref(graph, v)
        if ref is None or ref[0] not in inside:
            return None
        need.append(ref[0])
    if not need:
        return None
    return solve_axes(
        graph, nodes, sorted(set(need)), weights, parts=n, fixed=fixed, partial=partial
    )


def simulate_plan(
    graph: DataflowGraph, plan: TokenPlan | None, ranges: Sequence[Sequence[int]], time_of: OpCost
) -> tuple[float, list[list[Operation]]]:
    """Phased-simulation makespan of `ranges` (summed) and their launch orders, with the
    plan's parts (or unpartitioned when `plan` is None)."""
    regions: list[PartitionedRegion | None] = [None, None]
    if plan is not None:
        regions = [plan.forward(), plan.backward()]
    total = 0.0
    orders: list[list[Operation]] = []
    for nodes, region in zip(ranges, regions, strict=False):
        cost = simulate_range(graph, nodes, time_of, region)
        total += cost.makespan_us
        orders.append(cost.order)
    return total, orders


def layout_plans(
    graph: DataflowGraph, plans: Sequence[tuple[TokenPlan, Sequence[Sequence[Operation]]]]
) -> tuple[list[Operation], dict[SSAValue, SSAValue], list[Operation]]:
    """What applying `plans` does, as data (`layout.layout`): the block's new op sequence
    (every plan's ranges, disjoint: see `overlaps`, replaced by their orders from
    `simulate_plan`), the rerouting of the regions' results to their rebuilt values (for
    every use outside the replaced ops) and the replaced original ops."""
    planned = plans_layout(graph, plans)
    return planned.sequence, planned.rename, planned.originals


def plans_layout(
    graph: DataflowGraph, plans: Sequence[tuple[TokenPlan, Sequence[Sequence[Operation]]]]
) -> Layout:
    """`layout_plans` as a `layout.Layout`."""
    pieces: list[Piece] = []
    regions: list[PartitionedRegion] = []
    for plan, orders in plans:
        pieces += list(zip(plan.ranges(), orders, strict=True))
        regions += [r for r in (plan.forward(), plan.backward()) if r is not None]
    return layout(graph, pieces, regions)


def apply_plans(
    graph: DataflowGraph, plans: Sequence[tuple[TokenPlan, Sequence[Sequence[Operation]]]]
) -> None:
    """Apply `layout_plans`: relink the block in the new sequence, reroute the rebuilt
    results and erase the original ops."""
    apply_layout(graph, plans_layout(graph, plans))


def overlaps(plan: TokenPlan, taken: Sequence[tuple[int, int]]) -> bool:
    """True when one of the plan's ranges meets one of the (first, last) ranges `taken`."""
    return any(
        nodes[0] <= last and first <= nodes[-1] for nodes in plan.ranges() for first, last in taken
    )
