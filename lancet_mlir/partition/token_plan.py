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
from dataclasses import dataclass

from xdsl.ir import Operation, SSAValue

from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.axes import solve_axes
from lancet_mlir.partition.base import value_ref
from lancet_mlir.partition.region import (
    Available,
    OpCost,
    PartitionedRegion,
    build_region,
    simulate_range,
)
from lancet_mlir.partition.token import TokenLayer, TokenRegions, build_token_layer

TOKEN_AXIS = (0, 1)
"""The slot of a [S, ...] value cut into consecutive token ranges."""


@dataclass
class TokenPlan:
    """One layer's token parts with the regions before and after its forward."""

    layer: TokenLayer
    n: int
    core: TokenRegions
    before: PartitionedRegion | None
    after: PartitionedRegion | None

    def forward(self) -> PartitionedRegion:
        """The forward's three regions as one (their new ops, phases and rebuilds)."""
        out = PartitionedRegion([], self.n)
        for region in (self.before, self.core.forward, self.after):
            if region is None:
                continue
            out.nodes = sorted(set(out.nodes) | set(region.nodes))
            out.ops += region.ops
            out.phases += region.phases
            out.merged.update(region.merged)
            out.epilogue += region.epilogue
        return out

    def ranges(self) -> list[list[int]]:
        """The program-order ranges of the forward (with the regions) and the backward."""
        fwd = self.forward().nodes
        out = [list(range(min(fwd), max(fwd) + 1))]
        if self.layer.bwd is not None:
            bwd = self.layer.bwd_nodes
            out.append(list(range(min(bwd), max(bwd) + 1)))
        return out

    def discard(self) -> None:
        """Erase every new op (none was inserted)."""
        if self.after is not None:
            self.after.discard()
        self.core.discard()
        if self.before is not None:
            self.before.discard()


def plan_layer(
    graph: DataflowGraph,
    layer: TokenLayer,
    n: int,
    before: Sequence[int],
    after: Sequence[int],
    weights: Mapping[int, float],
) -> TokenPlan:
    """The layer in `n` token parts, with a region solved within the nodes `before` the
    gate and one within the nodes `after` the combine (each left out when no op there
    takes the token axis). Raises PartitionError when the layer itself cannot be split."""
    g = graph.ops
    logits, x = g[layer.gate].operands[0], g[layer.dispatch].operands[0]
    y = g[layer.combine].results[0]
    core_ops = frozenset(g[i] for i in layer.fwd_nodes)
    pre = _region(graph, before, [logits, x], {logits: TOKEN_AXIS, x: TOKEN_AXIS}, n, weights)
    readers = [graph.index[u.operation] for u in y.uses if u.operation in graph.index]
    post = _region(
        graph, after, [], {y: TOKEN_AXIS}, n, weights, [r for r in readers if r in set(after)]
    )
    pre_region = None
    available: Available = {}
    if pre is not None:
        pre_region = build_region(graph, pre, n, takers=core_ops)
        for (i, j), (slot, parts) in pre_region.chunks.items():
            available.setdefault(g[i].results[j], {})[(slot, n)] = parts
    takers = frozenset(g[i] for i in post.options) if post is not None else frozenset()
    try:
        core = build_token_layer(graph, layer, n, available, takers)
    except Exception:
        if pre_region is not None:
            pre_region.discard()
        raise
    post_region = None
    if post is not None:
        available.setdefault(y, {})[(TOKEN_AXIS, n)] = core.parts[y]
        post_region = build_region(graph, post, n, available)
    return TokenPlan(layer, n, core, pre_region, post_region)


def _region(
    graph: DataflowGraph,
    nodes: Sequence[int],
    produced: Sequence[SSAValue],
    fixed: Mapping[SSAValue, tuple[int, int]],
    n: int,
    weights: Mapping[int, float],
    anchors: Sequence[int] = (),
):
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
    return solve_axes(graph, nodes, sorted(set(need)), weights, parts=n, fixed=fixed)


def simulate_plan(
    graph: DataflowGraph, plan: TokenPlan | None, ranges: Sequence[Sequence[int]], time_of: OpCost
) -> tuple[float, list[list[Operation]]]:
    """Phased-simulation makespan of `ranges` (summed) and their launch orders, with the
    plan's parts (or unpartitioned when `plan` is None)."""
    regions: list[PartitionedRegion | None] = [None, None]
    if plan is not None:
        regions = [plan.forward(), plan.core.backward]
    total = 0.0
    orders: list[list[Operation]] = []
    for nodes, region in zip(ranges, regions, strict=False):
        cost = simulate_range(graph, nodes, time_of, region)
        total += cost.makespan_us
        orders.append(cost.order)
    return total, orders


def apply_plan(
    graph: DataflowGraph, plan: TokenPlan, orders: Sequence[Sequence[Operation]]
) -> None:
    """Replace the plan's ranges by `orders` (from `simulate_plan`), reroute the rebuilt
    results and erase the original ops."""
    ranges = plan.ranges()
    forward = plan.forward()
    regions = [forward] + ([plan.core.backward] if plan.core.backward is not None else [])
    block = graph.block
    assert block is not None
    first, last = ranges[0][0], ranges[-1][-1]
    anchor = graph.ops[last + 1] if last + 1 < len(graph.ops) else graph.terminator
    originals = [graph.ops[i] for r in regions for i in r.nodes]
    doomed = set(originals)
    for region in regions:
        for (i, j), v in region.merged.items():
            graph.ops[i].results[j].replace_uses_with_if(v, lambda use: use.operation not in doomed)
    sequence: list[Operation] = list(orders[0])
    if len(ranges) > 1:
        sequence += [graph.ops[i] for i in range(ranges[0][-1] + 1, ranges[1][0])]
        sequence += orders[1]
    for i in range(first, last + 1):
        graph.ops[i].detach()
    if anchor is None:
        block.add_ops(sequence)
    else:
        block.insert_ops_before(sequence, anchor)
    for op in originals:
        op.drop_all_references()
    for op in reversed(originals):
        op.erase(safe_erase=False)
