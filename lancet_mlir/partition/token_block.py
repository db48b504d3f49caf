"""Token parts for every MoE layer of a block, planned on data (`moe-partition{axis=token}`).

`plan_token_block` finds the block's MoE layers, the spans each layer's plan may extend over
(`token_spans`) and, per layer, the part count the phased simulation rates best
(`best_token_plan`); all layers are planned on the input graph (a layer's regions take the
parts the previous layer's regions left, so nothing is concatenated and split again between
them). A plan's new ops are built detached: `planned_graph` is the block as it will be once
the plans are applied (`token_plan.apply_plans`, then `region.erase_unused`), so the caller
simulates the result before touching the IR and either applies the plans or discards them
(`discard_plans`): the IR is built once, never cloned and restored. A layer whose problem has
the key of an earlier layer's (`layer_key`) takes that layer's decision instead of searching
again (`_replay`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation

from lancet_mlir import attrs
from lancet_mlir.dialects.vocab import Role
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.axes import AxisSolution
from lancet_mlir.partition.base import PartitionError, node_name, value_ref
from lancet_mlir.partition.layer_key import (
    LayerKey,
    LayerMemo,
    MemoStats,
    canonical_solution,
    placed_solution,
)
from lancet_mlir.partition.layout import planned_graph as layout_graph
from lancet_mlir.partition.region import Available, OpCost
from lancet_mlir.partition.token import TokenLayer, find_layer, token_gates
from lancet_mlir.partition.token_plan import (
    Spans,
    TokenPlan,
    overlaps,
    plan_layer,
    plans_layout,
    simulate_plan,
)

EXTENDS = ("none", "forward", "all")
"""How far a layer's plan extends (`moe-partition` option `extend`)."""

ChosenPlan = tuple[TokenPlan, list[list[Operation]]]
"""A layer's plan and the launch orders of its ranges (from `simulate_plan`)."""


@dataclass(frozen=True)
class TokenSearch:
    """What `plan_token_block` tries: a forced part count (`parts`; errors are raised) or
    every count 2..`max_parts`, and the spans around each layer (`extend`, see EXTENDS)."""

    parts: int | None
    max_parts: int
    extend: str


Steps = tuple[tuple[int, tuple[AxisSolution | None, ...]], ...]
"""The plans `best_token_plan` keeps in turn (the last is chosen; none: no plan), each as
its part count and its regions' solutions (`TokenPlan.solved`)."""


def plan_token_block(
    graph: DataflowGraph,
    time_of: OpCost,
    search: TokenSearch,
    memo: bool = True,
    stats: MemoStats | None = None,
) -> list[ChosenPlan]:
    """The chosen plan of every MoE layer of the block of `graph` that has one, in program
    order (none applied yet). With `search.parts`, a layer that cannot be split so raises
    PartitionError with the reason; else such a layer is left out.

    `memo`: a layer that is the same problem as an earlier layer's (`layer_key`: its spans,
    its ops and what the earlier plans offer them) takes that layer's decision at its own
    offset, and only the plans that decision kept are built (the same plans; False plans
    every layer afresh); `stats` counts what the memo did."""
    forced = search.parts is not None
    decisions: LayerMemo[Steps] = LayerMemo(memo, stats)  # this block's planning only
    layers: list[TokenLayer | None] = []
    for gate in token_gates(graph):
        try:
            layers.append(find_layer(graph, gate))
        except PartitionError:
            if forced:
                raise
            layers.append(None)
    chosen: list[ChosenPlan] = []
    taken: list[tuple[int, int]] = []
    offered: Available = {}
    for t, layer in enumerate(layers):
        if layer is None:
            continue
        spans = token_spans(graph, layers, t, time_of)
        if search.extend != "all":
            spans = Spans(spans.before, spans.after)
        if search.extend == "none":
            spans = Spans()
        nodes = [*spans.before, *spans.after, *spans.bwd_before, *spans.bwd_after]
        weights = {i: max(time_of(graph.ops[i]), 1e-3) for i in nodes}
        window = _window(graph, layer, spans)
        key = None
        if window is not None:
            key = decisions.key(graph, window[0], time_of, offered, window[1])
        elif decisions.enabled:
            decisions.stats.unkeyed += 1
        known = decisions.get(key)
        if known is not None:
            assert key is not None
            plan = _replay(graph, layer, spans, weights, time_of, offered, known, key)
        else:
            steps: list[tuple[int, list[AxisSolution | None]]] = []
            plan = best_token_plan(graph, layer, spans, weights, time_of, offered, search, steps)
            if key is not None:
                decisions.put(key, _canonical_steps(steps, key))
        if plan is None:
            continue
        if overlaps(plan[0], taken):  # an input order that interleaves two layers
            plan[0].discard()
            if forced:
                raise PartitionError(
                    f"token parts: the MoE layer of '{node_name(graph, layer.gate)}' "
                    "interleaves in program order with an earlier one (each layer's ops must "
                    "form one range)",
                    graph.ops[layer.gate],
                )
            continue
        chosen.append(plan)
        taken += [(r[0], r[-1]) for r in plan[0].ranges()]
        offered = plan[0].offered
    return chosen


def best_token_plan(
    graph: DataflowGraph,
    layer: TokenLayer,
    spans: Spans,
    weights: dict[int, float],
    time_of: OpCost,
    offered: Available,
    search: TokenSearch,
    steps: list[tuple[int, list[AxisSolution | None]]] | None = None,
) -> ChosenPlan | None:
    """The token plan (part count) that saves the most phased-simulation time over the
    unpartitioned ranges (None: none saves any); with `search.parts`, that count or a
    PartitionError. `steps` receives the plans kept in turn (part count and solutions):
    each was built while the one before it was still there (see `_replay`)."""
    forced = search.parts is not None
    if search.parts is not None and search.parts > layer.tokens:
        raise PartitionError(
            f"{search.parts} token parts exceed the {layer.tokens} tokens "
            f"of '{node_name(graph, layer.gate)}'",
            graph.ops[layer.gate],
        )
    top = min(search.max_parts, layer.tokens)
    counts = [search.parts] if search.parts is not None else list(range(2, top + 1))
    best: tuple[float, TokenPlan, list[list[Operation]]] | None = None
    for n in counts:
        try:
            plan = plan_layer(graph, layer, n, spans, weights, offered)
        except PartitionError:
            if forced:
                raise
            continue
        ranges = plan.ranges()
        cost, orders = simulate_plan(graph, plan, ranges, time_of)
        # a forced count is kept whatever it saves: the unpartitioned ranges need no costing
        saving = 0.0 if forced else simulate_plan(graph, None, ranges, time_of)[0] - cost
        if forced or (saving > 0 and (best is None or saving > best[0])):
            if best is not None:
                best[1].discard()
            best = (saving, plan, orders)
            if steps is not None:
                steps.append((n, plan.solved))
        else:
            plan.discard()
    return None if best is None else (best[1], best[2])


def _window(
    graph: DataflowGraph, layer: TokenLayer, spans: Spans
) -> tuple[list[range], tuple] | None:
    """The segments a layer's decision reads (its forward with the spans around it, then its
    backward with its spans) and, in their positions, the layer and the spans: the rest of
    `layer_key`'s arguments; None when a value of the layer lies outside them."""
    forward = [*spans.before, *layer.fwd_nodes, *spans.after]
    segments = [range(min(forward), max(forward) + 1)]
    backward = [*spans.bwd_before, *layer.bwd_nodes, *spans.bwd_after]
    if backward:
        segments.append(range(min(backward), max(backward) + 1))
    position = {i: p for p, i in enumerate(i for segment in segments for i in segment)}

    def at(nodes: Sequence[int]) -> tuple[int, ...]:
        return tuple(position[i] for i in nodes)  # every node of the layer and its spans

    slots = []
    for v, slot in layer.slots.items():
        ref = value_ref(graph, v)
        if ref is None or ref[0] not in position:
            return None
        slots.append((position[ref[0]], ref[1], slot))
    b = layer.bwd
    bwd = None if b is None else (
        at([b.combine_dx, b.combine_dw, b.gate_dx, b.entry, b.exit, b.dispatch_dx]), at(b.chain)
    )  # fmt: skip
    where = at([layer.gate, layer.dispatch, layer.fwd_entry, layer.fwd_exit, layer.combine])
    described = (where, at(layer.fwd_chain), bwd, layer.tokens, tuple(sorted(slots)))
    spanned = tuple(at(s) for s in (spans.before, spans.after, spans.bwd_before, spans.bwd_after))
    return segments, (described, spanned)


def _canonical_steps(steps: list[tuple[int, list[AxisSolution | None]]], key: LayerKey) -> Steps:
    """`steps` in the positions of `key` (to remember)."""
    return tuple(
        (n, tuple(None if s is None else canonical_solution(s, key) for s in solved))
        for n, solved in steps
    )


def _replay(
    graph: DataflowGraph,
    layer: TokenLayer,
    spans: Spans,
    weights: dict[int, float],
    time_of: OpCost,
    offered: Available,
    steps: Steps,
    key: LayerKey,
) -> ChosenPlan | None:
    """The plan `best_token_plan` chooses for a layer whose key remembered `steps`: the kept
    plans are built again in turn, each while the one before it is still there (a plan's
    rebuilds depend on who reads a value, and the kept plan's ops read some), so the last is
    built exactly as the search built it; the others the search tried and dropped are not."""
    plan: TokenPlan | None = None
    for n, solved in steps:
        placed = [None if s is None else placed_solution(s, key) for s in solved]
        new = plan_layer(graph, layer, n, spans, weights, offered, placed)
        if plan is not None:
            plan.discard()
        plan = new
    if plan is None:
        return None
    return plan, simulate_plan(graph, plan, plan.ranges(), time_of)[1]


def planned_graph(graph: DataflowGraph, chosen: Sequence[ChosenPlan]) -> DataflowGraph:
    """The graph the block of `graph` has once `chosen` is applied and the rebuilds nobody
    reads are erased, built from the detached new ops without changing the IR."""
    epilogues = [op for plan, _ in chosen for op in plan.epilogues()]
    return layout_graph(graph, plans_layout(graph, chosen), epilogues)


def discard_plans(chosen: Sequence[ChosenPlan]) -> None:
    """Erase the new ops of every plan (none inserted), later plans first (they may read
    parts an earlier plan made)."""
    for plan, _ in reversed(chosen):
        plan.discard()


def token_spans(
    graph: DataflowGraph, layers: Sequence[TokenLayer | None], t: int, time_of: OpCost
) -> Spans:
    """The nodes layer t's token plan may extend over (all layers found in one graph).

    Forward: before the gate, from where the previous MoE layer's span after its combine
    ends (else from the start); after the combine, up to the middle (by time) of the ops
    between it and the next MoE layer's gate, or for the last one up to the end of the
    forward (the first op with a non-forward role, or the layer's backward). Backward (in
    program order the later layer's backward comes first): before the combine's gradient,
    from the middle of the ops after the next MoE layer's backward (else from the end of
    the forward); after the dispatch's gradient, up to the middle of the ops before the
    previous MoE layer's backward (else up to the first op that is no gradient)."""
    layer = layers[t]
    assert layer is not None
    n_ops = len(graph.ops)
    prev = next((x for x in reversed(layers[:t]) if x is not None), None)
    nxt = next((x for x in layers[t + 1 :] if x is not None), None)
    fwd_end = first_role(graph, layer.combine + 1, min(layer.bwd_nodes, default=n_ops), Role.FWD)
    lo = _forward_split(graph, prev, layer, time_of) if prev is not None else 0
    end = _forward_split(graph, layer, nxt, time_of) if nxt is not None else fwd_end
    before, after = range(lo, layer.gate), range(layer.combine + 1, min(end, fwd_end))
    if layer.bwd is None:
        return Spans(before, after)
    first, last = min(layer.bwd_nodes), max(layer.bwd_nodes)
    start = fwd_end
    if nxt is not None and nxt.bwd is not None and max(nxt.bwd_nodes) < first:
        start = middle(graph, max(nxt.bwd_nodes) + 1, first, time_of)
    stop = first_role(graph, last + 1, n_ops, Role.DX, Role.DW)
    if prev is not None and prev.bwd is not None and min(prev.bwd_nodes) > last:
        stop = min(stop, middle(graph, last + 1, min(prev.bwd_nodes), time_of))
    return Spans(before, after, range(max(start, after.stop), first), range(last + 1, stop))


def _forward_split(graph: DataflowGraph, a: TokenLayer, b: TokenLayer, time_of: OpCost) -> int:
    """Where the span after layer a's combine ends and the span before b's gate starts."""
    return middle(graph, a.combine + 1, max(a.combine + 1, b.gate), time_of)


def first_role(graph: DataflowGraph, lo: int, hi: int, *roles: str) -> int:
    """The first node in [lo, hi) whose `lancet.role` is not one of `roles` (else hi)."""
    for i in range(lo, hi):
        role = graph.ops[i].attributes.get(attrs.ROLE)
        if isinstance(role, StringAttr) and role.data not in roles:
            return i
    return hi


def middle(graph: DataflowGraph, lo: int, hi: int, time_of: OpCost) -> int:
    """The node of [lo, hi] where the ops from lo have taken half the time of [lo, hi)."""
    times = [time_of(graph.ops[i]) for i in range(lo, hi)]
    half, acc, at = sum(times) / 2, 0.0, lo
    for dt in times:
        if acc >= half:
            break
        acc += dt
        at += 1
    return at
