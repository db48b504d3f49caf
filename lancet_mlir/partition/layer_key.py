"""Canonical keys of per-layer planning problems, so a block plans each distinct layer once
(issue #21).

A block of a generated model (and of a real transformer) repeats identical layers: the
planning problem of one MoE layer (`capacity_plan.choose_range`, `token_block.best_token_plan`)
is then the problem of another at a different offset. `layer_key` describes, without the
offset, everything such a decision reads of the block; two problems with equal keys have the
same decision up to the offset (`placed_solution` moves an axis solution there), and the
caller builds the new layer's region from it as for any other decision.

The key of a window (one or more program-order segments of nodes, `segments`) holds, per node
in order (node positions are indices into the concatenated segments):

* the op's class and costed signature (name, operand and result types, properties, every
  attribute: the role, the annotations the copies carry, `lancet.origin`), its `time_of` and
  whether the graph counts it as a collective: the axis rules, the copies and their costs,
  the rebuilds' in-place and accumulation decisions read these;
* each operand: the producing node's position and result index when inside the window, else a
  first-seen number of the outside value with its type and the origin a border split of it
  takes (`origin.moved_origin` of its producer); and for every operand what `available` offers
  for it: the (chunking, n) keys, each part's type and writer (first-seen number, and whether
  an in-place concatenation already claims it: an in-place rebuild of parts read through views
  asks this, `destination.writer_claimed`);
* each result: its users, in program order, by position and operand index inside the window;
  the runs of readers outside it by the origin the first of them offers (a rebuild's origin is
  the first costed one of the op and its readers, in program order), and whether a detached
  op or the terminator uses it (a rebuild is needed then too).

A window holding an op with regions or successors has no key (its cost and copies read its
bodies): such a problem is planned afresh. The memo (`LayerMemo`) compares keys by exact
equality and lives for one block's planning.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from xdsl.ir import Operation, SSAValue

from lancet_mlir.dialects.destination import writer_claimed
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.axes import AxisSolution
from lancet_mlir.partition.base import value_ref
from lancet_mlir.partition.origin import moved_origin
from lancet_mlir.partition.region import Available

Decision = TypeVar("Decision")


@dataclass(frozen=True)
class LayerKey:
    """The canonical key of one planning problem and where its positions lie in the block."""

    key: tuple
    nodes: tuple[int, ...]
    """Node of each position (the segments' nodes, in order)."""
    position: dict[int, int] = field(compare=False, hash=False, repr=False)
    """Position of each node of the window."""


@dataclass
class MemoStats:
    """What a memo did: problems found (`hits`), planned and remembered (`misses`), and
    planned without a key (`unkeyed`: a window `layer_key` cannot describe)."""

    hits: int = 0
    misses: int = 0
    unkeyed: int = 0


class LayerMemo(Generic[Decision]):
    """The decisions of one block's planning by layer key (exact equality of keys). Disabled,
    it makes no keys, so every problem is planned afresh (the same plans, more slowly)."""

    def __init__(self, enabled: bool = True, stats: MemoStats | None = None) -> None:
        self.enabled = enabled
        self.stats = MemoStats() if stats is None else stats
        self._known: dict[tuple, Decision] = {}

    def key(
        self,
        graph: DataflowGraph,
        segments: Sequence[Sequence[int]],
        time_of: Callable[[Operation], float],
        available: Available,
        extra: Hashable = (),
    ) -> LayerKey | None:
        """`layer_key` of the problem (None when disabled or without a key)."""
        if not self.enabled:
            return None
        found = layer_key(graph, segments, time_of, available, extra)
        if found is None:
            self.stats.unkeyed += 1
        return found

    def get(self, key: LayerKey | None) -> Decision | None:
        """The decision remembered for `key` (None: none yet, or no key)."""
        if key is None:
            return None
        found = self._known.get(key.key)
        if found is None:
            self.stats.misses += 1
        else:
            self.stats.hits += 1
        return found

    def put(self, key: LayerKey | None, decision: Decision) -> None:
        """Remember `decision` (in positions, see `canonical_solution`) for `key`."""
        if key is not None:
            self._known[key.key] = decision


def layer_key(
    graph: DataflowGraph,
    segments: Sequence[Sequence[int]],
    time_of: Callable[[Operation], float],
    available: Available,
    extra: Hashable = (),
) -> LayerKey | None:
    """The canonical key of the problem on the nodes of `segments` (module doc), with `extra`
    (what the caller's decision reads besides, in positions); None when the nodes are not in
    increasing program order or an op of the window has regions or successors."""
    nodes = tuple(i for segment in segments for i in segment)
    if any(b <= a for a, b in zip(nodes, nodes[1:], strict=False)):
        return None
    position = {i: p for p, i in enumerate(nodes)}
    outside: dict[SSAValue, tuple] = {}
    writers: dict[Operation, int] = {}
    parts: list[tuple] = [tuple(len(s) for s in segments), extra]
    for i in nodes:
        op = graph.ops[i]
        if op.regions or op.successors:
            return None
        operands = []
        for v in op.operands:
            ref = value_ref(graph, v)
            if ref is not None and ref[0] in position:
                where: tuple = ("in", position[ref[0]], ref[1])
            else:
                where = outside.get(v) or outside.setdefault(v, _outside_value(v, len(outside)))
            operands.append((where, _offered(available.get(v), writers)))
        results = tuple(_users(graph, r, position) for r in op.results)
        parts.append(
            (
                type(op),
                op.name,
                tuple(v.type for v in op.operands),
                tuple(r.type for r in op.results),
                tuple(sorted(op.properties.items())),
                tuple(sorted(op.attributes.items())),
                time_of(op),
                graph.is_comm[i],
                tuple(operands),
                results,
            )
        )
    return LayerKey(tuple(parts), nodes, position)


def _outside_value(v: SSAValue, number: int) -> tuple:
    """A value from outside the window: its number, type and the origin a split of it takes."""
    producer = v.owner if isinstance(v.owner, Operation) else None
    return ("out", number, v.type, moved_origin([producer]))


def _offered(by: dict | None, writers: dict[Operation, int]) -> tuple:
    """What `available` offers for one value: per (chunking, n), each part's type and writer."""
    if not by:
        return ()
    out = []
    for key in sorted(by):
        described = []
        for p in by[key]:
            found = writer_claimed(p)
            if found is None:
                described.append((p.type, None))
            else:
                writer, claimed = found
                described.append((p.type, writers.setdefault(writer, len(writers)), claimed))
        out.append((key, tuple(described)))
    return tuple(out)


def _users(graph: DataflowGraph, r: SSAValue, position: dict[int, int]) -> tuple:
    """The uses of result `r` in program order: (position, operand index) inside the window,
    one entry per run of readers outside it (the origin the first costed one offers), and
    whether something that is no node of the block (a detached op, the terminator) uses it."""
    seen: list[tuple[int, int, Operation]] = []
    foreign = False
    for use in r.uses:
        node = graph.index.get(use.operation)
        if node is None:
            foreign = True
        else:
            seen.append((node, use.index, use.operation))
    seen.sort(key=lambda t: (t[0], t[1]))
    out: list[tuple] = []
    run: list[Operation] = []
    for node, index, user in seen:
        if node in position:
            if run:
                out.append(("out", moved_origin(run)))
                run = []
            out.append((position[node], index))
        else:
            run.append(user)
    if run:
        out.append(("out", moved_origin(run)))
    return tuple(out), foreign


def canonical_solution(solution: AxisSolution, key: LayerKey) -> AxisSolution:
    """`solution` with its nodes as positions of `key` (to remember)."""
    options = {key.position[i]: option for i, option in solution.options.items()}
    return AxisSolution(options, solution.weight, solution.exact)


def placed_solution(solution: AxisSolution, key: LayerKey) -> AxisSolution:
    """A remembered (canonical) `solution` at the nodes of `key`."""
    options = {key.nodes[p]: option for p, option in solution.options.items()}
    return AxisSolution(options, solution.weight, solution.exact)
