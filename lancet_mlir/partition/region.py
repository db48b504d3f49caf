"""A solved region rewritten into n parts: border splits, per-part copies, merges.

`build_region` creates the new ops detached (nothing in the block changes), so a plan
can be costed with the phased simulator and then applied (`apply_region`, or for a whole
block `layout.apply_layout`) or dropped
(`PartitionedRegion.discard`). Values are planned by `ValueRef`; the IR is touched only
to create, insert and erase ops.

* Operands from outside the region are split at the border (prelude): `comp.split`
  for a contiguous chunking, reshape + split + reshape for a chunking in blocks; values
  used whole stay as they are. When n does not divide a block of B rows, the parts are
  uneven (`base.part_sizes`: the first B mod n parts get one row more) and the split
  carries its `sizes`; every block of a blocked chunking is cut the same way.
* Each op of the region gets n copies (part k: phase k + 1, `lancet.part = k`): compute
  ops through the registry (result types re-inferred; a `shape` parameter, as a
  reshape's, becomes the part's shape), all-to-alls with their chunked types. Uneven
  parts are simply tensors of different static types: a plain `comm.all_to_all` per part
  moves exactly its part's bytes (every rank sends equal slices of each part), so no
  `comm.all_to_allv` is needed.
* Results needed outside the region are rebuilt (epilogue): concatenation (in blocks when
  needed) for chunked results, a chain of adds for partial sums.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Operation, SSAValue

from lancet_mlir import attrs
from lancet_mlir.dialects.comm import AllToAllOp, CollectiveOp
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import relink
from lancet_mlir.partition.axes import AxisSolution, Chunking
from lancet_mlir.partition.base import ValueRef, part_attr, part_sizes, shape_of, value_ref
from lancet_mlir.partition.origin import mark_moved
from lancet_mlir.partition.phased import ARBITRARY, EPILOGUE, PRELUDE, part_phase, phased_simulate
from lancet_mlir.partition.rewriter import carried_annotations, role_of
from lancet_mlir.partition.rules import (
    PARTIAL,
    build_kernel_op,
    clone_kernel_op,
    partial_sum,
    rebuild_concat,
)

OpCost = Callable[[Operation], float]
"""Time of one (possibly detached) op in µs."""


@dataclass
class PartitionedRegion:
    """The detached new ops of one region split into `n` parts, with their phases."""

    nodes: list[int]
    n: int
    ops: list[Operation] = field(default_factory=list)
    phases: list[int] = field(default_factory=list)
    merged: dict[ValueRef, SSAValue] = field(default_factory=dict)
    """Rebuilt value of every region result used outside the region."""
    chunks: dict[ValueRef, tuple[Chunking, list[SSAValue]]] = field(default_factory=dict)
    """Chunking and parts of every rebuilt (non-partial) result, for later regions."""
    epilogue: list[Operation] = field(default_factory=list)

    def add(self, op: Operation, phase: int) -> Operation:
        """Record a new op and its phase."""
        self.ops.append(op)
        self.phases.append(phase)
        return op

    def discard(self) -> None:
        """Erase the new ops (they were never inserted)."""
        for op in reversed(self.ops):
            op.drop_all_references()
        for op in reversed(self.ops):
            op.erase(safe_erase=False)
        self.ops.clear()


class SharedOps:
    """Detached ops that the estimates of one pair's choices share (`estimate.estimate_range`):
    a part copy or border split is made once per (op, part, n, option, inputs) and reused by
    every builder that would make exactly the same op from exactly the same values, so the
    ranges and part counts the DP tries build only what differs. Owns what it made:
    `discard` erases it."""

    def __init__(self) -> None:
        self.made: dict[tuple, tuple[list[Operation], list[SSAValue]]] = {}
        """Key of a copy or split -> the ops it made (creation order) and its parts."""
        self.owned: list[Operation] = []
        self.owned_set: set[Operation] = set()
        self.times: dict[Operation, float] = {}
        self.prices: dict[tuple, tuple] = {}
        """Costs of rebuilds made from the same template parts (`estimate`)."""

    def own(self, ops: Sequence[Operation]) -> None:
        """Take `ops` (new, detached) to erase with the rest."""
        self.owned.extend(ops)
        self.owned_set.update(ops)

    def time(self, op: Operation, time_of: OpCost) -> float:
        """`time_of(op)`, asked once per op."""
        known = self.times.get(op)
        if known is None:
            known = self.times[op] = time_of(op)
        return known

    def discard(self) -> None:
        """Erase every op made (none was inserted)."""
        for op in reversed(self.owned):
            op.drop_all_references()
        for op in reversed(self.owned):
            op.erase(safe_erase=False)
        self.owned.clear()
        self.owned_set.clear()
        self.made.clear()
        self.times.clear()
        self.prices.clear()


def part_shape(shape: Sequence[int], chunking: Chunking, n: int, k: int) -> tuple[int, ...]:
    """The shape of part k of n of a value of `shape` chunked along `chunking`."""
    axis, groups = chunking
    out = list(shape)
    out[axis] = groups * part_sizes(shape[axis] // groups, n)[k]
    return tuple(out)


def split_params(axis: int, rows: int, n: int) -> dict[str, object]:
    """Parameters of the `comp.split` of `rows` rows along `axis` into n parts: uneven
    parts carry their sizes (the equal form keeps its plain spelling)."""
    sizes = part_sizes(rows, n)
    params: dict[str, object] = {"axis": axis, "num": n}
    if len(set(sizes)) > 1:
        params["sizes"] = tuple(sizes)
    return params


def blocked_shape(shape: Sequence[int], axis: int, groups: int, inner: int) -> tuple[int, ...]:
    """`shape` with dimension `axis` written as (groups, inner)."""
    return (*shape[:axis], groups, inner, *shape[axis + 1 :])


Available = dict[SSAValue, dict[tuple[Chunking, int], list[SSAValue]]]
"""Parts of values rebuilt by regions applied earlier: value -> (chunking, n) -> parts."""


class RegionBuilder:
    """Creates the detached ops of a region split into n parts (see the module doc)."""

    def __init__(
        self,
        graph: DataflowGraph,
        solution: AxisSolution,
        n: int,
        available: Available,
        shared: SharedOps | None = None,
    ):
        self.available = available
        self.shared = shared
        """With `shared`, equal copies and splits are taken from it (and owned by it)."""
        self.graph = graph
        self.options = solution.options
        self.out = PartitionedRegion(solution.nodes, n)
        self.n = n
        self.chunks: dict[ValueRef, dict[int, SSAValue]] = {}
        """Part k of every region result built so far: ref -> k -> value."""
        self.border: dict[tuple[SSAValue, Chunking], list[SSAValue]] = {}
        self.originals = {graph.ops[i] for i in solution.nodes}

    def build(self) -> PartitionedRegion:
        for k in range(self.n):
            for i in self.out.nodes:
                self.copy(i, k)
        for i in self.out.nodes:
            for j, res in enumerate(self.graph.ops[i].results):
                if any(use.operation not in self.originals for use in res.uses):
                    first = len(self.out.ops)
                    self.out.merged[(i, j)] = self._rebuild(i, j)
                    mark_moved(self.out.ops[first:], self.rebuild_origins(i, j))
                    self.out.epilogue += self.out.ops[first:]
                    slot = self.options[i][1][j]
                    if isinstance(slot, tuple):
                        self.out.chunks[(i, j)] = (slot, self.parts(i, j))
        return self.out

    # ---- border splits (prelude) -----------------------------------------------------------
    def _split(self, v: SSAValue, chunking: Chunking, like: Operation) -> list[SSAValue]:
        key = (v, chunking)
        if key in self.border:
            return self.border[key]
        earlier = self.available.get(v, {}).get((chunking, self.n))
        if earlier is not None:
            return earlier  # an earlier region left exactly these parts
        shared_key = ("split", v, chunking, self.n, like)
        if self.shared is not None and shared_key in self.shared.made:
            made, parts = self.shared.made[shared_key]
            for op in made:
                self.out.add(op, PRELUDE)
            self.border[key] = parts
            return parts
        axis, groups = chunking
        role = role_of(like)
        shape = shape_of(v)
        assert shape is not None
        block = shape[axis] // groups
        first = len(self.out.ops)
        if groups == 1:
            split = self.out.add(
                build_kernel_op("split", [v], split_params(axis, block, self.n), role), PRELUDE
            )
            parts: list[SSAValue] = list(split.results)
        else:
            wide = self.out.add(
                build_kernel_op(
                    "reshape", [v], {"shape": blocked_shape(shape, axis, groups, block)}, role
                ),
                PRELUDE,
            )
            split = self.out.add(
                build_kernel_op(
                    "split", [wide.results[0]], split_params(axis + 1, block, self.n), role
                ),
                PRELUDE,
            )
            parts = [
                self.out.add(
                    build_kernel_op(
                        "reshape", [p], {"shape": part_shape(shape, chunking, self.n, k)}, role
                    ),
                    PRELUDE,
                ).results[0]
                for k, p in enumerate(split.results)
            ]
        producer = v.owner if isinstance(v.owner, Operation) else None
        mark_moved(self.out.ops[first:], [producer, like])
        if self.shared is not None:
            self.shared.made[shared_key] = (self.out.ops[first:], parts)
            self.shared.own(self.out.ops[first:])
        self.border[key] = parts
        return parts

    # ---- per-part copies ----------------------------------------------------------------------
    def parts(self, i: int, j: int) -> list[SSAValue]:
        """The n parts of result j of region op i (after `build`)."""
        built = self.chunks[(i, j)]
        return [built[k] for k in range(self.n)]

    def _operand(self, v: SSAValue, slot: object, k: int, like: Operation) -> SSAValue:
        if slot is None:
            return v
        assert isinstance(slot, tuple)
        ref = value_ref(self.graph, v)
        if ref is not None and ref in self.chunks:
            return self.chunks[ref][k]
        return self._split(v, slot, like)[k]

    def copy(self, i: int, k: int) -> None:
        """Create part k of region op i."""
        o = self.graph.ops[i]
        ins, outs = self.options[i]
        inputs = [self._operand(v, s, k, o) for v, s in zip(o.operands, ins, strict=True)]
        shared_key = ("copy", i, k, self.n, self.options[i], *inputs)
        if self.shared is not None and shared_key in self.shared.made:
            self._record(i, k, self.shared.made[shared_key][0][0])
            return
        carried: dict[str, Attribute] = carried_annotations(o)
        carried[attrs.PART] = part_attr(k)
        shapes = [
            part_shape(shape_of(res) or (), slot, self.n, k) if isinstance(slot, tuple) else None
            for res, slot in zip(o.results, outs, strict=True)
        ]
        if isinstance(o, AllToAllOp):
            types = []
            for res, shape in zip(o.results, shapes, strict=True):
                assert shape is not None
                assert isinstance(res.type, TensorType)
                types.append(TensorType(res.type.element_type, shape))
            copy: Operation = AllToAllOp(inputs, types, dict(o.properties))
            copy.attributes.update(carried)
        else:
            copy = clone_kernel_op(o, inputs, carried, shapes)
        if self.shared is not None:
            self.shared.made[shared_key] = ([copy], [])
            self.shared.own([copy])
        self._record(i, k, copy)

    def _record(self, i: int, k: int, copy: Operation) -> None:
        """Add `copy` as part k of region op i."""
        o = self.graph.ops[i]
        self.out.add(copy, part_phase(k))
        for j, (res, old) in enumerate(zip(copy.results, o.results, strict=True)):
            self.chunks.setdefault((i, j), {})[k] = res
            if old.name_hint:
                res.name_hint = f"{old.name_hint}_part{k}"

    # ---- rebuilt results (epilogue) -----------------------------------------------------------
    def rebuild_origins(self, i: int, j: int) -> list[Operation]:
        """Where the rebuild of result j of region op i comes from (`origin.mark_moved`):
        the op, then the result's readers outside the region in program order."""
        readers = {u.operation for u in self.graph.ops[i].results[j].uses}
        outside = sorted(
            self.graph.index[r] for r in readers - self.originals if r in self.graph.index
        )
        return [self.graph.ops[i], *(self.graph.ops[r] for r in outside)]

    def _rebuild(self, i: int, j: int) -> SSAValue:
        o = self.graph.ops[i]
        slot = self.options[i][1][j]
        parts = self.parts(i, j)
        role = role_of(o)
        if slot == PARTIAL:
            total = parts[0]
            for p in parts[1:]:
                total = self.out.add(partial_sum(total, p, role), EPILOGUE).results[0]
            return total
        assert isinstance(slot, tuple)
        axis, groups = slot
        shape = shape_of(o.results[j])
        assert shape is not None
        if groups == 1:
            return self.out.add(rebuild_concat(parts, axis, role), EPILOGUE).results[0]
        inner = part_sizes(shape[axis] // groups, self.n)
        wide = [
            self.out.add(
                build_kernel_op(
                    "reshape", [p], {"shape": blocked_shape(shape, axis, groups, inner[k])}, role
                ),
                EPILOGUE,
            ).results[0]
            for k, p in enumerate(parts)
        ]
        joined = self.out.add(rebuild_concat(wide, axis + 1, role), EPILOGUE)
        back = build_kernel_op("reshape", [joined.results[0]], {"shape": shape}, role)
        return self.out.add(back, EPILOGUE).results[0]


def build_region(
    graph: DataflowGraph, solution: AxisSolution, n: int, available: Available | None = None
) -> PartitionedRegion:
    """The region of `solution` split into `n` parts, as detached ops (see module doc).
    Operands in `available` with the wanted chunking and n reuse those parts instead of
    being split again (a backward region reading a forward region's activations)."""
    return RegionBuilder(graph, solution, n, available or {}).build()


def erase_unused(ops: Sequence[Operation]) -> None:
    """Erase the ops of `ops` (in a block) whose results are all unused, last first, so
    rebuilds that every reader now takes in parts disappear."""
    for op in reversed(ops):
        if op.parent_block() is not None and all(not r.uses for r in op.results):
            op.detach()
            op.erase()


@dataclass(frozen=True)
class RangeCost:
    """The phased simulation of a range: its makespan and the launch order of its ops."""

    makespan_us: float
    order: list[Operation]


def simulate_range(
    graph: DataflowGraph,
    range_nodes: Sequence[int],
    time_of: OpCost,
    region: PartitionedRegion | None = None,
) -> RangeCost:
    """Phased simulation of the ops of `range_nodes` (external inputs ready at 0); with a
    partitioned `region`, its new ops replace the region's nodes and the other nodes of
    the range are free to run in any phase (§8.3 local cost)."""
    inside = set(region.nodes) if region is not None else set()
    others = [graph.ops[i] for i in range_nodes if i not in inside]
    ops: list[Operation] = (list(region.ops) if region is not None else []) + others
    phases = (list(region.phases) if region is not None else []) + [ARBITRARY] * len(others)
    task = {op: t for t, op in enumerate(ops)}
    redirect: dict[Operation, Operation] = {}
    if region is not None:
        for (i, _j), v in region.merged.items():
            owner = v.owner
            assert isinstance(owner, Operation)
            redirect.setdefault(graph.ops[i], owner)
    preds: list[list[int]] = []
    for op in ops:
        ps: set[int] = set()
        for v in op.operands:
            owner = v.owner
            if isinstance(owner, Operation):
                owner = redirect.get(owner, owner)
                if owner in task:
                    ps.add(task[owner])
        preds.append(sorted(ps))
    is_comm = [graph.is_comm[graph.index[op]] if op in graph.index else isinstance(op, CollectiveOp)
               for op in ops]  # fmt: skip
    result = phased_simulate(preds, is_comm, [time_of(op) for op in ops], phases)
    return RangeCost(result.makespan_us, [ops[t] for t in result.order])


def apply_region(
    graph: DataflowGraph,
    range_nodes: Sequence[int],
    region: PartitionedRegion,
    order: Sequence[Operation],
) -> None:
    """Replace the ops of `range_nodes` by `order` (the range's other ops and the region's
    new ops, topologically ordered) at the range's place, reroute the region's results to
    their rebuilt values and erase the region's original ops."""
    last = max(range_nodes)
    anchor = graph.ops[last + 1] if last + 1 < len(graph.ops) else graph.terminator
    block = graph.block
    assert block is not None
    originals = [graph.ops[i] for i in region.nodes]
    doomed = set(originals)
    for (i, j), v in region.merged.items():
        graph.ops[i].results[j].replace_uses_with_if(v, lambda use: use.operation not in doomed)
    relink(block, order, anchor)  # the region's originals are erased below
    for op in originals:  # detached first: drop_all_references clears the parent only
        op.detach()
    for op in originals:
        op.drop_all_references()
    for op in reversed(originals):
        op.erase(safe_erase=False)
