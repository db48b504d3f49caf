"""DataflowGraph: a plain-Python view of one block's ops and their producer/consumer edges.

Built once in O(V + E) from the IR; every heavy algorithm (schedulers, simulator,
partitioner) works on the integer indices of this view and touches the IR only to apply
its decision.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import ArrayAttr, StringAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.traits import IsTerminator, MemoryEffect, MemoryEffectKind, RecursiveMemoryEffect

from lancet_mlir import attrs
from lancet_mlir.dialects.comm import CollectiveOp, tensor_bytes
from lancet_mlir.dialects.trace import HostSyncOp as TraceHostSyncOp
from lancet_mlir.dialects.trace import KernelOp as TraceKernelOp
from lancet_mlir.dialects.trace import PayloadOp as TracePayloadOp
from lancet_mlir.dialects.trace import copy_queue as trace_copy_queue
from lancet_mlir.dialects.trace import is_host_sync as trace_is_host_sync
from lancet_mlir.dialects.trace import is_virtual as trace_is_virtual
from lancet_mlir.dialects.trace import opaque_comm_bytes, opaque_comm_kind
from lancet_mlir.dialects.vocab import CopyQueue
from lancet_mlir.graph.core import topological_order
from lancet_mlir.graph.reach import ancestor_bits, descendant_bits
from lancet_mlir.support.errors import UserError
from lancet_mlir.support.locations import op_display_name as op_display_name  # re-exported


def is_collective(op: Operation) -> bool:
    """True for ops of the `comm` dialect. The graph's communication nodes (`is_comm`) are
    these and the opaque NCCL kernels of an imported trace (`collective_kind`)."""
    return isinstance(op, CollectiveOp)


def is_copy(op: Operation) -> bool:
    """True for a memcpy / memset (an imported trace op whose `lancet.trace_kind` says so):
    it runs on the GPU's copy engine, not on the compute stream. A collective is never one
    (NCCL runs its own kernels): a `comm` op carrying a copy kind stays a collective, as the
    scheduling passes already treated it (`simulate` failed on it without saying where)."""
    if isinstance(op, CollectiveOp):
        return False
    kind = op.attributes.get(attrs.TRACE_KIND)
    return isinstance(kind, StringAttr) and kind.data in attrs.COPY_KINDS


def copy_queue(op: Operation) -> CopyQueue:
    """The copy-engine queue of `op`: `CopyQueue.NONE` unless `is_copy(op)`, else host to
    device, device to host or the rest, from the op's Kineto name (dialects/trace.py)."""
    return trace_copy_queue(op) if is_copy(op) else CopyQueue.NONE


def is_host_sync(op: Operation) -> bool:
    """True for a host sync (`trace.host_sync`, an op marked `lancet.host_sync`): the host
    waits for its producers to end; it takes no GPU stream. A collective or a copy never is."""
    return not isinstance(op, CollectiveOp) and not is_copy(op) and trace_is_host_sync(op)


def is_virtual(op: Operation) -> bool:
    """True for a virtual node (`trace.payload`, dialects/trace.is_virtual): bookkeeping that
    takes no stream and no launch and does not hold the host (sim/engine.py "Virtual nodes").
    A collective, a copy or a host sync never is."""
    return (
        not isinstance(op, CollectiveOp)
        and not is_copy(op)
        and not trace_is_host_sync(op)
        and trace_is_virtual(op)
    )


def collective_kind(op: Operation) -> str | None:
    """The cost-model kind of a collective (`allreduce`, `all_to_all`, ...); for an imported
    NCCL kernel the `comm` dialect has no op for (broadcast, send/recv: dialects/trace.py
    `opaque_comm_kind`) an opaque `trace:<kind>` no registry entry, fusion or bucketing knows
    (it keeps its measured time on a communication stream, as the trace ran it beside the
    kernels); None for compute."""
    return op.KIND if isinstance(op, CollectiveOp) else opaque_comm_kind(op)


_SPECIAL_CLASSES: dict[type, bool] = {}
"""Op classes `_special_nodes` has seen: whether an op of the class is a collective or an
imported trace op (a kernel, a payload, a host sync) whatever its attributes."""

_SPECIAL_ATTRS = (attrs.TRACE_KIND, attrs.TRACE_COMM, attrs.HOST_SYNC)
"""The annotations that make any other op a copy, an opaque NCCL kernel or a host sync."""


def _special_nodes(ops: Sequence[Operation]) -> list[int]:
    """The indices of the ops that may be communication, a copy, a host sync or a virtual
    node (a collective, a trace op, or an op with one of `_SPECIAL_ATTRS`); for every other
    op `collective_kind` is None and `is_copy`, `is_host_sync` and `is_virtual` are False,
    so `DataflowGraph.from_ops` asks them only for these (the isinstance checks on xDSL's
    op classes were a tenth of building a graph)."""
    special = []
    for i, op in enumerate(ops):
        cls = type(op)
        by_class = _SPECIAL_CLASSES.get(cls)
        if by_class is None:
            by_class = _SPECIAL_CLASSES[cls] = issubclass(
                cls, CollectiveOp | TraceKernelOp | TracePayloadOp | TraceHostSyncOp
            )
        if by_class or (op.attributes and any(a in op.attributes for a in _SPECIAL_ATTRS)):
            special.append(i)
    return special


@dataclass
class DataflowGraph:
    """Ops of one block (terminator excluded) and their data dependencies.

    Node `i` is `ops[i]`, in program order. `preds[i]`/`succs[i]` are sorted, duplicate-free
    lists of node indices; uses nested in an op's regions count as uses by that op. Ops that
    declare memory effects (e.g. `memref.store`, `memref.load`, also nested in regions) keep
    their program order where it matters: an edge runs from each write to every later read
    or write and from each read to the next write (no alias analysis: all memory is one
    resource); so do ops that name a resource in `lancet.effects` (a mutated tensor's
    storage, the RNG state: the PyTorch import), each resource on its own. Ops whose effects are unknown (`test.op`, unregistered ops, calls) are taken to
    have none: the IR here is value semantics, and ordering them all would forbid scheduling.
    """

    block: Block | None
    ops: list[Operation]
    terminator: Operation | None
    preds: list[list[int]]
    succs: list[list[int]]
    is_comm: list[bool]
    payload_bytes: list[int]
    index: dict[Operation, int] = field(repr=False)
    comm_kind: list[str | None] = field(default_factory=list)
    """Collective kind of each node (`allreduce`, `all_to_all`, ..., `trace:<kind>` for an
    opaque NCCL kernel: `collective_kind`), None for compute."""
    is_copy: list[bool] = field(default_factory=list)
    """Memcpy / memset nodes (`is_copy`), which run on a copy engine."""
    copy_queue: list[int] = field(default_factory=list)
    """Each node's `CopyQueue` (`copy_queue`; 0 for a node that is no copy)."""
    is_host_sync: list[bool] = field(default_factory=list)
    """Host syncs (`is_host_sync`): zero-cost nodes on no stream that hold the host back."""
    is_virtual: list[bool] = field(default_factory=list)
    """Virtual nodes (`is_virtual`): zero-cost nodes on no stream that take no launch."""

    # ---- construction ------------------------------------------------------------------------
    @classmethod
    def from_block(cls, block: Block) -> DataflowGraph:
        """Build the graph of `block` in one pass over its ops and their (nested) operands."""
        all_ops, terminator = block_ops(block)
        return cls.from_ops(all_ops, block=block, terminator=terminator)

    @classmethod
    def from_ops(
        cls,
        ops: Sequence[Operation],
        block: Block | None = None,
        terminator: Operation | None = None,
        rename: Mapping[SSAValue, SSAValue] | None = None,
    ) -> DataflowGraph:
        """Build the graph of a sequence of sibling ops (edges outside the sequence ignored).

        With `rename`, a use of a value in it counts as a use of its replacement: the graph
        of a planned rewrite (new ops not inserted yet, uses not rerouted yet) is the graph
        the block will have once the plan is applied."""
        ops = list(ops)
        index = {op: i for i, op in enumerate(ops)}
        memory_preds = _memory_order_edges(ops)
        preds: list[list[int]] = []
        for i, op in enumerate(ops):
            producers = _producers(op, i, index, rename)
            producers.update(memory_preds.get(i, ()))
            preds.append(sorted(producers))
        succs: list[list[int]] = [[] for _ in ops]
        for i, ps in enumerate(preds):
            for p in ps:
                succs[p].append(i)  # i grows, so every succs list stays sorted
        kinds: list[str | None] = [None] * len(ops)
        payload = [0] * len(ops)
        copies = [False] * len(ops)
        queues = [0] * len(ops)
        syncs = [False] * len(ops)
        virtual = [False] * len(ops)
        for i in _special_nodes(ops):
            op = ops[i]
            kinds[i] = kind = collective_kind(op)
            if isinstance(op, CollectiveOp):
                payload[i] = op.payload_bytes()
            elif kind is not None:
                payload[i] = opaque_comm_bytes(op)
            copies[i] = copy = is_copy(op)
            queues[i] = int(copy_queue(op)) if copy else 0
            syncs[i] = is_host_sync(op)
            virtual[i] = is_virtual(op)
        is_comm = [k is not None for k in kinds]
        return cls(
            block,
            ops,
            terminator,
            preds,
            succs,
            is_comm,
            payload,
            index,
            comm_kind=kinds,
            is_copy=copies,
            copy_queue=queues,
            is_host_sync=syncs,
            is_virtual=virtual,
        )

    # ---- queries ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ops)

    @property
    def num_edges(self) -> int:
        """Number of distinct producer -> consumer edges."""
        return sum(len(p) for p in self.preds)

    def comm_nodes(self) -> list[int]:
        """Indices of collectives, in program order."""
        return [i for i, c in enumerate(self.is_comm) if c]

    def result_bytes(self, i: int) -> int:
        """Bytes of all results of node `i`."""
        return sum(tensor_bytes(r.type) for r in self.ops[i].results)

    def topo_order(self) -> list[int]:
        """A topological order (Kahn, smallest program index first among ready nodes)."""
        try:
            return topological_order(self.preds, self.succs)
        except ValueError:
            raise ValueError("dataflow graph has a cycle") from None

    def is_topological(self, order: Sequence[int]) -> bool:
        """True if `order` is a permutation of all nodes respecting every edge."""
        if len(order) != len(self.ops) or sorted(order) != list(range(len(self.ops))):
            return False
        position = [0] * len(self.ops)
        for k, i in enumerate(order):
            position[i] = k
        return all(position[p] < position[i] for i, ps in enumerate(self.preds) for p in ps)

    def first_use_before_def(self) -> int | None:
        """Index of the first op (in program order) that uses a value defined later in the
        block, or None when program order is a valid topological order."""
        for i, ps in enumerate(self.preds):
            if ps and ps[-1] > i:
                return i
        return None

    def descendants(self) -> Sequence[int]:
        """Reachability as bitsets: bit j of result[i] is set iff j is reachable from i
        (`graph/reach.py`; O(V * E / wordsize))."""
        return descendant_bits(self.succs, self.topo_order())

    def ancestors(self) -> list[int]:
        """Bit j of result[i] is set iff i is reachable from j (`graph/reach.py`)."""
        return ancestor_bits(self.preds, self.topo_order())

    def bfs_order(self, start: Iterable[int]) -> list[int]:
        """Nodes reachable from `start` along consumer edges, in BFS order."""
        seen = set(start)
        queue = deque(sorted(seen))
        out: list[int] = []
        while queue:
            i = queue.popleft()
            out.append(i)
            for s in self.succs[i]:
                if s not in seen:
                    seen.add(s)
                    queue.append(s)
        return out


def block_ops(block: Block) -> tuple[list[Operation], Operation | None]:
    """The ops of `block` a graph holds (all but a trailing terminator) and that terminator
    (None when the last op is not one)."""
    all_ops = list(block.ops)
    terminator = None
    if all_ops and all_ops[-1].has_trait(IsTerminator):
        terminator = all_ops.pop()
    return all_ops, terminator


def _producers(
    op: Operation,
    i: int,
    index: dict[Operation, int],
    rename: Mapping[SSAValue, SSAValue] | None,
) -> set[int]:
    """Indices of the ops of `index` whose results node `i` (`op`) uses, itself excluded."""
    if rename or op.regions:
        found = (index.get(owner) for owner in _operand_owners(op, index, rename))
        return {p for p in found if p is not None and p != i}
    # the common case, an op without regions and no renaming: its own operands only (a
    # block argument's owner is a Block, never a key of `index`)
    producers: set[int] = set()
    for operand in op.operands:
        p = index.get(operand.owner)  # type: ignore[arg-type]
        if p is not None and p != i:
            producers.add(p)
    return producers


def first_forward_use(ops: Sequence[Operation]) -> tuple[int, int] | None:
    """(i, j) for the first op `ops[i]` (in sequence order) that uses a value of a later op,
    `ops[j]` the latest such (uses nested in its regions count, as in `DataflowGraph`); None
    when the sequence order is a valid topological order. What
    `DataflowGraph.from_ops(ops).first_use_before_def()` finds, without building the graph
    (memory-order edges always point backwards, so they never make a forward use)."""
    index = {op: i for i, op in enumerate(ops)}
    find = index.get
    for i, op in enumerate(ops):
        if op.regions:
            late = max(_producers(op, i, index, None), default=-1)
        else:  # `_producers`' common case, only the latest kept (this runs on every check)
            late = -1
            for operand in op.operands:
                p = find(operand.owner)  # type: ignore[arg-type]
                if p is not None and p > late and p != i:
                    late = p
        if late > i:
            return i, late
    return None


def _operand_owners(
    op: Operation,
    index: dict[Operation, int],
    rename: Mapping[SSAValue, SSAValue] | None = None,
) -> Iterable[Operation]:
    """Owners of every operand of `op` (after `rename`), including operands of ops nested in
    its regions, mapped to the top-level op of the graph that contains them."""
    for operand in op.operands:
        if rename:
            operand = rename.get(operand, operand)
        owner = operand.owner
        if isinstance(owner, Operation):
            yield owner
    if not op.regions:
        return
    for inner in op.walk():
        if inner is op:
            continue
        for operand in inner.operands:
            if rename:
                operand = rename.get(operand, operand)
            owner = operand.owner
            if isinstance(owner, Operation) and owner in index:
                yield owner
            elif isinstance(owner, Block):
                parent = owner.parent_op()
                if parent is not None and parent in index:
                    yield parent


def memory_access(op: Operation) -> tuple[bool, bool]:
    """(reads, writes) memory according to the effects `op` and its nested ops declare.

    Freeing counts as a write; allocating counts as neither (a fresh buffer is reached only
    through the allocating op's result, a data edge). Unknown effects count as none.
    """
    if not op.regions and not _declares_effects(type(op)):
        return False, False  # most ops: no regions and no effect trait on their class
    reads = writes = False
    for inner in op.walk():
        for trait in inner.get_traits_of_type(MemoryEffect):
            if isinstance(trait, RecursiveMemoryEffect):
                continue  # the nested ops are visited by the walk themselves
            effects = trait.get_effects(inner)
            for effect in effects or ():
                reads |= effect.kind == MemoryEffectKind.READ
                writes |= effect.kind in (MemoryEffectKind.WRITE, MemoryEffectKind.FREE)
    return reads, writes


_DECLARES_EFFECTS: dict[type[Operation], bool] = {}
"""Per op class: whether it has a `MemoryEffect` trait (traits belong to the class)."""


def _declares_effects(cls: type[Operation]) -> bool:
    known = _DECLARES_EFFECTS.get(cls)
    if known is None:
        known = _DECLARES_EFFECTS[cls] = bool(cls.get_traits_of_type(MemoryEffect))
    return known


MEMORY = ""
"""The resource of the effects that `MemoryEffect` traits declare (all memory is one)."""


def named_effects(op: Operation) -> dict[str, bool]:
    """The resources `op` and its nested ops name in `lancet.effects` (attrs.EFFECTS), each
    with whether it is written (a read and a write of one resource: a write). A malformed
    entry raises a UserError about its op."""
    found: dict[str, bool] = {}
    ops = op.walk() if op.regions else (op,)
    for inner in ops:
        value = inner.attributes.get(attrs.EFFECTS)
        if value is None:
            continue
        entries = value.data if isinstance(value, ArrayAttr) else None
        if entries is None or not all(isinstance(e, StringAttr) for e in entries):
            raise UserError(
                f"{op_display_name(inner)}: {attrs.EFFECTS}: expected an array of strings, "
                f"got {value}",
                op=inner,
            )
        for entry in entries:
            kind, _, name = entry.data.partition(":")  # type: ignore[attr-defined]
            if kind not in ("read", "write") or not name:
                raise UserError(
                    f'{op_display_name(inner)}: {attrs.EFFECTS}: expected "read:<name>" or '
                    f'"write:<name>", got {entry}',
                    op=inner,
                )
            found[name] = found.get(name, False) or kind == "write"
    return found


def _accesses(op: Operation) -> dict[str, bool]:
    """Every resource `op` touches with whether it writes it: the named ones, and MEMORY
    for the effects its traits declare."""
    found = named_effects(op) if op.regions or attrs.EFFECTS in op.attributes else {}
    if op.regions or _declares_effects(type(op)):
        reads, writes = memory_access(op)
        if reads or writes:
            found[MEMORY] = writes
    return found


def _memory_order_edges(ops: Sequence[Operation]) -> dict[int, list[int]]:
    """Ordering edges (consumer -> producers) between ops with memory effects, in O(V + E),
    per resource (MEMORY and those of `lancet.effects`).

    A write depends on the last write and on every read since it; a read on the last write.
    """
    edges: dict[int, list[int]] = {}
    last_write: dict[str, int] = {}
    reads_since: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        if not (op.regions or op.attributes or _declares_effects(type(op))):
            continue  # most ops: nothing to look at
        accesses = _accesses(op)
        if not accesses:
            continue
        before: set[int] = set()
        for resource, writes in accesses.items():
            last = last_write.get(resource)
            if last is not None:
                before.add(last)
            if writes:
                before.update(reads_since.pop(resource, ()))
                last_write[resource] = i
            else:
                reads_since.setdefault(resource, []).append(i)
        edges[i] = sorted(before)
    return edges
