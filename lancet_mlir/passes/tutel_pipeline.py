"""tutel-pipeline: Tutel-style pipelining of each MoE expert block, a baseline schedule."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir.dialects.comm import AllToAllOp
from lancet_mlir.dialects.comp import build_op, kernel_of, kernel_params, op_sigs
from lancet_mlir.dialects.kernels import PARTIAL, KernelError
from lancet_mlir.graph.dataflow import DataflowGraph, op_display_name
from lancet_mlir.graph.rewrite import apply_order, check_dominance, schedulable_blocks
from lancet_mlir.passes.options import CheckedOptions, check_int

PART_ATTR = "lancet.part"
ROLE_ATTR = "lancet.role"
# timing annotations describe the whole op; a chunk must not inherit them
_DROPPED_ATTRS = ("lancet.time_us", "lancet.start_us", "lancet.end_us", "lancet.stream")

Combo = tuple[tuple, tuple]


@dataclass
class Region:
    """One expert block: entry all-to-all `entry`, exit all-to-all `exit`, the compute ops
    between them (`core`), and weight-gradient ops on region values whose outputs are
    partial sums over the chunks (`tail`). Node indices refer to the block's graph."""

    entry: int
    exit: int
    axis: int
    """Capacity axis: entry's concat axis = exit's split axis."""
    group: int
    capacity: int
    core: list[int] = field(default_factory=list)
    tail: list[int] = field(default_factory=list)
    combos: dict[int, Combo] = field(default_factory=dict)
    values: dict[SSAValue, int] = field(default_factory=dict)
    """Chunked values (entry result, core results) and their chunk axis."""

    @property
    def layout(self) -> tuple[int, int]:
        """Chunks of two regions line up row for row iff their layouts are equal."""
        return (self.group, self.capacity)


@dataclass(frozen=True)
class TutelPipelinePass(CheckedOptions, ModulePass):
    """Tutel's expert pipelining: chunk each MoE expert block along the capacity dim.

    An expert block is a `comm.all_to_all` (split s, concat r) whose compute-only
    descendants reach a second `comm.all_to_all` (split r, concat s); the compute ops between
    the two (forward: batch_matmul, gelu, batch_matmul; backward: their `_dx` forms) must all
    be splittable along the row axis that the first all-to-all concatenates (checked with the
    kernel registry's partition rules). Both forward and backward blocks qualify. For
    `degree` = n each block becomes: `comp.split` of the dispatched buffer along the
    capacity dim into n chunks; per chunk k an all-to-all, the expert ops and the return
    all-to-all, all tagged `lancet.part = k`; `comp.concat` of the returned chunks. Weight
    gradients of the expert weights (batch_matmul_dw on block values) are computed per chunk
    and summed. Launch order: a2a(0), then per chunk k: a2a(k+1), expert ops(k), a2a back(k),
    so chunk k's compute overlaps chunk k+1's all-to-all. Values are unchanged (up to float
    rounding of the chunked weight-gradient sums). `degree=1` leaves the module unchanged.

    Options:
      degree: number of chunks per expert block (Tutel sweeps 1, 2, 4, 8); must divide
              every block's capacity, else the pass fails.
    """

    name = "tutel-pipeline"

    degree: int = 2

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        check_int(self.name, "degree", self.degree, 1)
        check_dominance(op)
        if self.degree == 1:
            return
        plans: list[tuple[DataflowGraph, list[Region]]] = []
        for block in schedulable_blocks(op):  # plan and check everything before any edit
            graph = DataflowGraph.from_block(block)
            regions = plan_regions(graph)
            if not regions:
                continue
            for region in regions:
                self._check_divisible(graph, region)
            check_reassembly(graph, regions)
            plans.append((graph, regions))
        for graph, regions in plans:
            _Rewriter(graph, self.degree).rewrite(regions)
            assert graph.block is not None
            fixed = DataflowGraph.from_block(graph.block)
            apply_order(fixed, fixed.topo_order())
        check_dominance(op)

    def _check_divisible(self, graph: DataflowGraph, region: Region) -> None:
        if region.capacity % self.degree == 0:
            return
        entry = graph.ops[region.entry]
        name = entry.results[0].name_hint or op_display_name(entry)
        raise PassFailedException(
            f"tutel-pipeline: capacity {region.capacity} of the expert block entered by "
            f"'{name}' is not divisible by degree {self.degree}"
        )


# ---------------------------------------------------------------------------------------
# Planning (plain data; no IR edits)
# ---------------------------------------------------------------------------------------


def plan_regions(graph: DataflowGraph) -> list[Region]:
    """Every expert block of the graph, in program order of the entry all-to-alls.

    A value chunked by an earlier block (e.g. a forward activation) may be used chunked by a
    later block with the same layout (group size and capacity); this is how the backward
    block reads the forward block's chunks.
    """
    chunked: dict[SSAValue, tuple[tuple[int, int], int]] = {}
    used: set[int] = set()
    regions: list[Region] = []
    for a in graph.comm_nodes():
        if a in used:
            continue
        region = _plan_region(graph, a, chunked)
        if region is None:
            continue
        used.update((region.entry, region.exit))
        regions.append(region)
    return regions


def _a2a_axes(op: Operation) -> tuple[int, int] | None:
    """(split, concat) of a single-tensor all-to-all, else None."""
    if not isinstance(op, AllToAllOp) or len(op.inputs) != 1:
        return None
    return op.split_axis.value.data, op.concat_axis.value.data


def _compute_descendants(graph: DataflowGraph, a: int) -> tuple[set[int], list[int]]:
    """Compute ops reachable from `a` without crossing a collective, and the collectives
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


def _plan_region(
    graph: DataflowGraph, a: int, chunked: dict[SSAValue, tuple[tuple[int, int], int]]
) -> Region | None:
    """The expert block entered by node `a`, or None when `a` enters none."""
    entry = graph.ops[a]
    axes = _a2a_axes(entry)
    if axes is None or axes[0] == axes[1]:
        return None
    split, r = axes
    desc, met = _compute_descendants(graph, a)
    exit_ = next((m for m in met if _a2a_axes(graph.ops[m]) is not None), None)
    if exit_ is None or _a2a_axes(graph.ops[exit_]) != (r, split):
        return None
    in_shape = _shape(entry.operands[0])
    out_shape = _shape(entry.results[0])
    if in_shape is None or out_shape is None or in_shape[r] < 1:
        return None
    region = Region(a, exit_, r, out_shape[r] // in_shape[r], in_shape[r])
    region.core = sorted(_ancestors_within(graph, exit_, desc))
    if not region.core:
        return None
    local: dict[SSAValue, int] = {entry.results[0]: r}
    for i in region.core:
        combo = _match(graph.ops[i], _input_axes(graph.ops[i], local, chunked, region), False)
        if combo is None:
            return None
        region.combos[i] = combo
        local.update(zip(graph.ops[i].results, combo[1], strict=True))
    if local.get(graph.ops[exit_].operands[0]) != r:
        return None
    core = set(region.core)
    for i in sorted(desc - core):
        o = graph.ops[i]
        if not any(v in local for v in o.operands):
            continue
        combo = _match(o, _input_axes(o, local, chunked, region), True)
        if combo is not None:
            region.tail.append(i)
            region.combos[i] = combo
    region.values = local
    chunked.update((v, (region.layout, ax)) for v, ax in local.items())
    return region


def check_reassembly(graph: DataflowGraph, regions: list[Region]) -> None:
    """Fail (before any rewrite) when a chunked value used outside every expert block
    cannot be reassembled from its chunks (its chunk dim is not group x capacity)."""
    replaced = {graph.ops[i] for r in regions for i in (r.entry, r.exit, *r.core, *r.tail)}
    for region in regions:
        for v, axis in region.values.items():
            if all(use.operation in replaced for use in v.uses):
                continue
            shape = _shape(v)
            if shape is None or shape[axis] != region.group * region.capacity:
                raise PassFailedException(
                    f"tutel-pipeline: cannot reassemble '{v.name_hint or 'a value'}' from its "
                    f"chunks (dim {axis} is not group x capacity) for its uses outside the "
                    "expert block"
                )


def _shape(v: SSAValue) -> tuple[int, ...] | None:
    t = v.type
    return tuple(t.get_shape()) if isinstance(t, TensorType) else None


def _input_axes(
    o: Operation,
    local: dict[SSAValue, int],
    chunked: dict[SSAValue, tuple[tuple[int, int], int]],
    region: Region,
) -> tuple[int | None, ...]:
    """Chunk axis of each operand of `o`: region values, values chunked by an earlier block
    of the same layout, None for everything else (used whole by every chunk)."""
    axes: list[int | None] = []
    for v in o.operands:
        if v in local:
            axes.append(local[v])
            continue
        prior = chunked.get(v)
        axes.append(prior[1] if prior is not None and prior[0] == region.layout else None)
    return tuple(axes)


def _match(o: Operation, in_axes: tuple[int | None, ...], partial: bool) -> Combo | None:
    """The registry partition combination of `o` that splits exactly `in_axes`, with split
    outputs (partial=False) or partial-sum outputs (partial=True); None if there is none."""
    kernel = kernel_of(o)
    if kernel is None:
        return None
    try:
        ins, outs = op_sigs(o)
        combos = kernel.allowed_partitions(ins, outs, kernel_params(o))
    except KernelError:
        return None
    for cin, cout in combos:
        if tuple(cin) != in_axes:
            continue
        if partial and all(c == PARTIAL for c in cout):
            return (tuple(cin), tuple(cout))
        if not partial and all(isinstance(c, int) for c in cout):
            return (tuple(cin), tuple(cout))
    return None


# ---------------------------------------------------------------------------------------
# Rewriting
# ---------------------------------------------------------------------------------------


def _annotations(o: Operation) -> dict[str, Attribute]:
    return {k: v for k, v in o.attributes.items() if "." in k and k not in _DROPPED_ATTRS}


def _role(o: Operation) -> dict[str, Attribute]:
    role = o.attributes.get(ROLE_ATTR)
    return {} if role is None else {ROLE_ATTR: role}


def _chunk_type(t: Attribute, axis: int, n: int) -> TensorType:
    assert isinstance(t, TensorType)
    shape = list(t.get_shape())
    shape[axis] //= n
    return TensorType(t.element_type, shape)


class _Rewriter:
    """Applies planned regions to the IR (see TutelPipelinePass)."""

    def __init__(self, graph: DataflowGraph, degree: int):
        self.graph = graph
        self.n = degree
        self.chunks: dict[SSAValue, list[SSAValue]] = {}
        self.axis_of: dict[SSAValue, int] = {}
        self.layout_of: dict[SSAValue, Region] = {}

    def rewrite(self, regions: list[Region]) -> None:
        """Rewrite every region, reassemble chunked values still used elsewhere, erase the
        replaced ops."""
        originals: list[int] = []
        for region in regions:
            self._rewrite_region(region)
            originals += [region.entry, region.exit, *region.core, *region.tail]
        doomed = {self.graph.ops[i] for i in originals}
        for v in list(self.chunks):
            if any(use.operation not in doomed for use in v.uses):
                self._merge(v, doomed)
        for i in sorted(originals, reverse=True):
            doomed_op = self.graph.ops[i]
            doomed_op.detach()
            doomed_op.erase()

    # ---- one region ------------------------------------------------------------------------
    def _rewrite_region(self, region: Region) -> None:
        g, n, r = self.graph, self.n, region.axis
        entry, exit_ = g.ops[region.entry], g.ops[region.exit]
        block = entry.parent_block()
        assert block is not None
        split = build_op("split", [entry.operands[0]], {"axis": r, "num": n}, _role(entry))
        ins = [self._a2a_chunk(entry, split.results[k], r, k) for k in range(n)]
        self._record(entry.results[0], [o.results[0] for o in ins], r, region)
        stages: list[list[Operation]] = []
        outs: list[Operation] = []
        partials: dict[int, list[list[SSAValue]]] = {i: [] for i in region.tail}
        for k in range(n):
            stage: list[Operation] = []
            for i in sorted(region.core + region.tail):
                clone = self._clone(g.ops[i], region.combos[i][0], k)
                stage.append(clone)
                if i in partials:
                    partials[i].append(list(clone.results))
                elif k == n - 1:
                    self._record_outputs(g.ops[i], region, region.combos[i][1])
            outs.append(self._a2a_chunk(exit_, self._chunk(exit_.operands[0], k), r, k))
            stages.append(stage)
        concat = build_op("concat", [o.results[0] for o in outs], {"axis": r}, _role(exit_))
        new_ops: list[Operation] = [split, ins[0]]
        for k in range(n):
            new_ops += ([ins[k + 1]] if k + 1 < n else []) + stages[k] + [outs[k]]
        new_ops.append(concat)
        block.insert_ops_before(new_ops, entry)
        exit_.results[0].replace_all_uses_with(concat.results[0])
        for i in region.tail:
            self._sum_partials(g.ops[i], partials[i], entry)

    def _a2a_chunk(self, like: Operation, value: SSAValue, axis: int, k: int) -> Operation:
        """A copy of all-to-all `like` moving chunk `k`: the capacity dim `axis` of its
        result (entry: its concat axis; exit: its split axis) is divided by n."""
        out_type = _chunk_type(like.results[0].type, axis, self.n)
        op = AllToAllOp([value], [out_type], dict(like.properties))
        op.attributes.update(_annotations(like))
        op.attributes[PART_ATTR] = IntegerAttr(k, i64)
        if like.results[0].name_hint:
            op.results[0].name_hint = f"{like.results[0].name_hint}_part{k}"
        return op

    def _record(self, v: SSAValue, chunks: list[SSAValue], axis: int, region: Region) -> None:
        self.chunks[v] = chunks
        self.axis_of[v] = axis
        self.layout_of[v] = region

    def _record_outputs(self, o: Operation, region: Region, out_axes: tuple) -> None:
        for res, ax in zip(o.results, out_axes, strict=True):
            self.axis_of[res] = ax
            self.layout_of[res] = region

    def _chunk(self, v: SSAValue, k: int) -> SSAValue:
        return self.chunks[v][k]

    def _clone(self, o: Operation, in_axes: tuple, k: int) -> Operation:
        """Chunk `k` of op `o`: split operands replaced by their chunk k."""
        inputs = [
            v if ax is None else self._chunk(v, k)
            for v, ax in zip(o.operands, in_axes, strict=True)
        ]
        kernel = kernel_of(o)
        assert kernel is not None
        attrs: dict[str, Attribute] = _annotations(o)
        attrs[PART_ATTR] = IntegerAttr(k, i64)
        clone = build_op(kernel.name, inputs, kernel_params(o), attrs)
        for res, old in zip(clone.results, o.results, strict=True):
            self.chunks.setdefault(old, []).append(res)
            if old.name_hint:
                res.name_hint = f"{old.name_hint}_part{k}"
        return clone

    def _sum_partials(self, o: Operation, parts: list[list[SSAValue]], before: Operation) -> None:
        """Replace each result of tail op `o` by the sum of its per-chunk partial results."""
        block = before.parent_block()
        assert block is not None
        for j, res in enumerate(o.results):
            total = parts[0][j]
            for p in parts[1:]:
                add = build_op("add", [total, p[j]], None, _role(o))
                block.insert_op_before(add, before)
                total = add.results[0]
            res.replace_all_uses_with(total)
            self.chunks.pop(res, None)

    def _merge(self, v: SSAValue, doomed: set[Operation]) -> None:
        """Reassemble chunked value `v` for its uses outside the rewritten ops.

        Rows along the chunk axis are ordered (rank g, capacity slot) in every block value,
        so chunk k holds slots [k·C/n, (k+1)·C/n) of each rank: reshape each chunk to split
        the axis into (G, C/n), concatenate along the slot dim, reshape back.
        """
        region, axis, chunks = self.layout_of[v], self.axis_of[v], self.chunks[v]
        shape = _shape(v)
        assert shape is not None
        assert shape[axis] == region.group * region.capacity
        slots = region.capacity // self.n
        owner = v.owner
        assert isinstance(owner, Operation)
        anchor = chunks[-1].owner
        assert isinstance(anchor, Operation)
        split_shape = (*shape[:axis], region.group, slots, *shape[axis + 1 :])
        role = _role(owner)
        ops = [build_op("reshape", [c], {"shape": split_shape}, role) for c in chunks]
        ops.append(build_op("concat", [o.results[0] for o in ops], {"axis": axis + 1}, role))
        ops.append(build_op("reshape", [ops[-1].results[0]], {"shape": shape}, role))
        block = anchor.parent_block()
        assert block is not None
        block.insert_ops_after(ops, anchor)
        merged = ops[-1].results[0]
        v.replace_uses_with_if(merged, lambda use: use.operation not in doomed)
