"""Expert spans: the compute between a dispatching all-to-all and its returning one.

Planning works on a `DataflowGraph` and plain data (node indices, `ValueRef`s); it never
edits the IR. `plan_expert_spans` finds every span whose ops can all be split along the
capacity axis (checked against the registry's partition rules), `check_reassembly` checks
that every chunked value needed whole elsewhere can be put back together.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from xdsl.ir import Operation

from lancet_mlir.dialects.comm import AllToAllOp
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.base import PartitionError, ValueRef, shape_of, value_of, value_ref
from lancet_mlir.partition.rules import PARTIAL, Axis, Combo, partition_combos

Layout = tuple[int, int]
"""(group size, capacity) of a span: chunks of two spans line up row for row iff equal."""

Chunked = dict[ValueRef, tuple[Layout, int]]
"""Values chunked by the spans planned so far: their layout and chunk axis."""


@dataclass
class ExpertSpan:
    """One expert span of a block's graph (all node indices refer to that graph).

    `entry` is the all-to-all that brings tokens to the experts, `exit` the one that
    returns them, `core` the compute ops between the two, and `tail` the ops on span values
    whose outputs are partial sums over the chunks (weight gradients). `combos` holds the
    registry combination chosen for each core and tail op, `values` the chunk axis of every
    chunked value (entry result, core results).
    """

    entry: int
    exit: int
    axis: int
    """Capacity axis: the entry's concat axis, which is the exit's split axis."""
    group: int
    capacity: int
    core: list[int] = field(default_factory=list)
    tail: list[int] = field(default_factory=list)
    combos: dict[int, Combo] = field(default_factory=dict)
    values: dict[ValueRef, int] = field(default_factory=dict)

    @property
    def layout(self) -> Layout:
        """Chunks of two spans line up row for row iff their layouts are equal."""
        return (self.group, self.capacity)

    @property
    def nodes(self) -> list[int]:
        """Every node the rewrite replaces."""
        return [self.entry, self.exit, *self.core, *self.tail]


def plan_expert_spans(graph: DataflowGraph) -> list[ExpertSpan]:
    """Every expert span of the graph, in program order of the entry all-to-alls.

    A value chunked by an earlier span (e.g. a forward activation) may be used chunked by a
    later span of the same layout; this is how a backward span reads the forward span's
    chunks.
    """
    chunked: Chunked = {}
    used: set[int] = set()
    spans: list[ExpertSpan] = []
    for a in graph.comm_nodes():
        if a in used:
            continue
        span = _plan_span(graph, a, chunked)
        if span is None:
            continue
        used.update((span.entry, span.exit))
        spans.append(span)
    return spans


def a2a_axes(op: Operation) -> tuple[int, int] | None:
    """(split, concat) axes of a single-tensor all-to-all, else None."""
    if not isinstance(op, AllToAllOp) or len(op.inputs) != 1:
        return None
    return op.split_axis.value.data, op.concat_axis.value.data


def _compute_descendants(graph: DataflowGraph, a: int) -> tuple[set[int], list[int]]:
    """Compute nodes reachable from `a` without crossing a collective, and the collectives
    met on the way (sorted)."""
    seen: set[int] = set()
    met: set[int] = set()
    queue = deque(graph.succs[a])
    while queue:
        i = queue.popleft()
        if i in seen or i in met:
            continue
        if graph.is_comm[i]:
            met.add(i)
            continue
        seen.add(i)
        queue.extend(graph.succs[i])
    return seen, sorted(met)


def _ancestors_within(graph: DataflowGraph, node: int, within: set[int]) -> set[int]:
    """Nodes of `within` from which `node` is reachable through nodes of `within`."""
    found: set[int] = set()
    queue = deque(p for p in graph.preds[node] if p in within)
    while queue:
        i = queue.popleft()
        if i in found:
            continue
        found.add(i)
        queue.extend(p for p in graph.preds[i] if p in within)
    return found


def _plan_span(graph: DataflowGraph, a: int, chunked: Chunked) -> ExpertSpan | None:
    """The expert span entered by node `a`, or None when `a` enters none."""
    entry = graph.ops[a]
    axes = a2a_axes(entry)
    if axes is None or axes[0] == axes[1]:
        return None
    split, r = axes
    desc, met = _compute_descendants(graph, a)
    exit_ = next((m for m in met if a2a_axes(graph.ops[m]) is not None), None)
    if exit_ is None or a2a_axes(graph.ops[exit_]) != (r, split):
        return None
    in_shape = shape_of(entry.operands[0])
    out_shape = shape_of(entry.results[0])
    if in_shape is None or out_shape is None or in_shape[r] < 1:
        return None
    span = ExpertSpan(a, exit_, r, out_shape[r] // in_shape[r], in_shape[r])
    span.core = sorted(_ancestors_within(graph, exit_, desc))
    if not span.core:
        return None
    local: dict[ValueRef, int] = {(a, 0): r}
    for i in span.core:
        combo = _match(graph, i, _input_axes(graph, i, local, chunked, span), partial=False)
        if combo is None:
            return None
        span.combos[i] = combo
        local.update(((i, j), ax) for j, ax in enumerate(combo[1]))  # type: ignore[misc]
    if local.get(value_ref(graph, graph.ops[exit_].operands[0]) or (-1, -1)) != r:
        return None
    core = set(span.core)
    for i in sorted(desc - core):
        if not any(value_ref(graph, v) in local for v in graph.ops[i].operands):
            continue
        combo = _match(graph, i, _input_axes(graph, i, local, chunked, span), partial=True)
        if combo is not None:
            span.tail.append(i)
            span.combos[i] = combo
    span.values = local
    chunked.update((ref, (span.layout, ax)) for ref, ax in local.items())
    return span


def check_reassembly(graph: DataflowGraph, spans: list[ExpertSpan]) -> None:
    """Raise PartitionError (before any rewrite) when a chunked value used outside every
    span cannot be reassembled from its chunks (its chunk dim is not group x capacity)."""
    replaced = {graph.ops[i] for s in spans for i in s.nodes}
    for span in spans:
        for ref, axis in span.values.items():
            v = value_of(graph, ref)
            if all(use.operation in replaced for use in v.uses):
                continue
            shape = shape_of(v)
            if shape is None or shape[axis] != span.group * span.capacity:
                raise PartitionError(
                    f"cannot reassemble '{v.name_hint or 'a value'}' from its chunks "
                    f"(dim {axis} is not group x capacity) for its uses outside the expert block",
                    graph.ops[ref[0]],
                )


def _input_axes(
    graph: DataflowGraph, node: int, local: dict[ValueRef, int], chunked: Chunked, span: ExpertSpan
) -> tuple[Axis, ...]:
    """Chunk axis of each operand of `node`: span values, values chunked by an earlier span
    of the same layout, None for everything else (used whole by every chunk)."""
    axes: list[Axis] = []
    for v in graph.ops[node].operands:
        ref = value_ref(graph, v)
        if ref is not None and ref in local:
            axes.append(local[ref])
            continue
        prior = chunked.get(ref) if ref is not None else None
        axes.append(prior[1] if prior is not None and prior[0] == span.layout else None)
    return tuple(axes)


def _match(
    graph: DataflowGraph, node: int, in_axes: tuple[Axis, ...], *, partial: bool
) -> Combo | None:
    """The registry combination of `node` that splits exactly `in_axes`, with split outputs
    (partial=False) or partial-sum outputs (partial=True); None if there is none."""
    for cin, cout in partition_combos(graph.ops[node]):
        if cin != in_axes:
            continue
        if partial and all(c == PARTIAL for c in cout):
            return (cin, cout)
        if not partial and all(isinstance(c, int) for c in cout):
            return (cin, cout)
    return None


def _flat(graph: DataflowGraph, a: int) -> bool:
    """True for an all-to-all with split = concat whose group divides that dimension
    (PyTorch's `all_to_all_single` of a MoE dispatch)."""
    op = graph.ops[a]
    assert isinstance(op, AllToAllOp)
    shape = shape_of(op.operands[0])
    size = op.group_size()
    axis = op.split_axis.value.data
    return shape is not None and size is not None and size > 1 and shape[axis] % size == 0


def all_to_all_pairs(graph: DataflowGraph) -> list[tuple[int, int]]:
    """(entry, exit) of every all-to-all pair: a single-tensor all-to-all (split s,
    concat c) whose compute-only descendants reach one with the axes swapped, in program
    order of the entries. Forward MoE layers and their backward passes both qualify. With
    split = concat (PyTorch's `all_to_all_single`) the exit has the same axes and returns
    the entry's input shape."""
    pairs: list[tuple[int, int]] = []
    used: set[int] = set()
    for a in graph.comm_nodes():
        axes = a2a_axes(graph.ops[a])
        if a in used or axes is None or (axes[0] == axes[1] and not _flat(graph, a)):
            continue
        _, met = _compute_descendants(graph, a)
        exit_ = next((m for m in met if a2a_axes(graph.ops[m]) is not None), None)
        if exit_ is None or a2a_axes(graph.ops[exit_]) != (axes[1], axes[0]):
            continue
        if axes[0] == axes[1] and (
            exit_ in used
            or shape_of(graph.ops[exit_].results[0]) != shape_of(graph.ops[a].operands[0])
        ):
            continue
        used.update((a, exit_))
        pairs.append((a, exit_))
    return pairs
