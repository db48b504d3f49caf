"""Token parts of a whole MoE layer, forward and backward, exact (switch gate).

Capacity-axis regions (`region.py`) split an MoE layer's expert tensors along the capacity
slots and so stop at the gate and the combine: which slot a token takes depends on every
earlier token. Token parts instead cut the layer's S tokens into n consecutive parts
(`base.part_sizes`) and thread the gate's per-expert slot counter from part to part:

* forward, part k: `moe_gate_window(logits_k, offsets_k)` routes the part's tokens exactly
  as `moe_gate` would (a token's absolute slot is offsets_k[e] plus its rank among the
  part's tokens of expert e; kept iff below the capacity C) but writes the slots relative
  to the part's window, so its kept rows of expert e are the leading `counts_k[e]` rows of
  an [E, C, M] window. The unchanged dispatch contraction fills the window; a
  `comm.all_to_allv` with counts [G, E/G] moves only those rows (a reshape / transpose pair
  around it gives the all-to-all's layouts); the expert FFN runs on the window; the return
  `comm.all_to_allv` uses the received counts; the unchanged combine gives the part's
  tokens. offsets_{k+1} = offsets_k + counts_k (starting from zeros).
* backward, part k: the combine's gradients (`moe_combine_dx`, `moe_combine_dw`) of the
  part's tokens, `moe_gate_window_dx`, the same two exchanges with the same counts, the
  expert FFN's backward on the window (weight gradients are per-part partial sums, exact
  because every padding row of a gradient window is zero: the exchanges zero-pad and the
  gradient ops are linear in the gradient), and the dispatch gradient of the part's tokens.

Windows are full-shape static tensors; an op on windows only (the exchanges, the layout
ops around them, the expert FFN and its backward) carries `lancet.fill = s_k / S`, the
share of the rows part k holds, so the cost model charges every part its share of the
unpartitioned op (the parts' compute together costs what the layer's does; each exchange
part pays the comm table's fixed cost). The dispatch / combine contractions and their
gradients read the part's own [s_k, E, C] routing, which the cost
model already sizes by the part, beside a window: they carry no fill, so their window
side is charged in full per part (conservative: the routing tensor dominates them). Borders: logits, the
dispatch input and the combine's output gradient are split along their token axis (or
taken as parts from an earlier region), the combine's output, the input gradient and the
logits' gradient are concatenated, partial sums added. Every window value must be read
only inside the layer (else the layer is refused with a reason: a window has no
unpartitioned equivalent to rebuild).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from xdsl.dialects.builtin import FloatAttr, f64
from xdsl.ir import Attribute, Operation, SSAValue

from lancet_mlir import attrs
from lancet_mlir.dialects.comm import AllToAllOp, AllToAllVOp
from lancet_mlir.dialects.comp import (
    CompOp,
    MoeCombineDwOp,
    MoeCombineDxOp,
    MoeCombineOp,
    MoeDispatchDxOp,
    MoeDispatchOp,
    MoeGateDxOp,
    MoeGateOp,
)
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.axes import Slot, op_options
from lancet_mlir.partition.base import (
    PartitionError,
    node_name,
    part_attr,
    part_sizes,
    shape_of,
    value_ref,
)
from lancet_mlir.partition.expert_span import a2a_axes
from lancet_mlir.partition.origin import mark_derived, mark_moved
from lancet_mlir.partition.phased import EPILOGUE, PRELUDE, part_phase
from lancet_mlir.partition.region import (
    Available,
    PartitionedRegion,
    split_params,
)
from lancet_mlir.partition.rewriter import carried_annotations, role_of
from lancet_mlir.partition.rules import (
    PARTIAL,
    build_kernel_op,
    clone_kernel_op,
    kernel_param,
    partial_sum,
    rebuild_concat,
)


@dataclass
class TokenLayer:
    """The ops of one MoE layer that token parts rewrite (graph nodes, program order)."""

    gate: int
    dispatch: int
    fwd_entry: int
    fwd_exit: int
    combine: int
    fwd_chain: list[int]
    bwd: BackwardLayer | None
    tokens: int
    """S: rows of the logits."""
    slots: dict[SSAValue, Slot] = field(default_factory=dict)
    """Chunking (or PARTIAL) of every expert-side value, as the capacity solver names it."""

    @property
    def fwd_nodes(self) -> list[int]:
        """Every forward node of the layer."""
        return sorted(
            [self.gate, self.dispatch, self.fwd_entry, self.fwd_exit, self.combine,
             *self.fwd_chain]
        )  # fmt: skip

    @property
    def bwd_nodes(self) -> list[int]:
        """Every backward node of the layer ([] without a backward pass)."""
        return [] if self.bwd is None else self.bwd.nodes


@dataclass
class BackwardLayer:
    """The backward ops of one MoE layer."""

    combine_dx: int
    combine_dw: int
    gate_dx: int
    entry: int
    exit: int
    dispatch_dx: int
    chain: list[int]

    @property
    def nodes(self) -> list[int]:
        """Every backward node of the layer."""
        return sorted(
            [self.combine_dx, self.combine_dw, self.gate_dx, self.entry, self.exit,
             self.dispatch_dx, *self.chain]
        )  # fmt: skip


# ---- finding the layers --------------------------------------------------------------------


def token_gates(graph: DataflowGraph) -> list[int]:
    """The `moe_gate` nodes of the block, in program order."""
    return [i for i, o in enumerate(graph.ops) if isinstance(o, MoeGateOp)]


def _readers(graph: DataflowGraph, v: SSAValue) -> list[tuple[int, int]]:
    """(node, operand index) of every use of `v` by an op of the block's top level."""
    out = []
    for use in v.uses:
        node = graph.index.get(use.operation)
        if node is None and use.operation is graph.terminator:
            raise PartitionError(
                f"token parts: the block returns {_value_name(v)}, a value of the MoE layer "
                "that token parts do not rebuild",
                use.operation,
            )
        if node is None:
            raise PartitionError(
                f"{_value_name(v)} is read inside a nested region: not partitioned by tokens",
                use.operation,
            )
        out.append((node, use.index))
    return sorted(out)


def _value_name(v: SSAValue) -> str:
    return f"'{v.name_hint}'" if v.name_hint else "a value"


_Op = TypeVar("_Op", bound=CompOp)


def _only_reader(
    graph: DataflowGraph, v: SSAValue, cls: type[_Op], operand: Callable[[_Op], SSAValue]
) -> int | None:
    """The node of the one reader of `v` that is an op of class `cls` reading it as its
    `operand` (None when there is none); any second such reader is an error."""
    found = sorted({n for n, _ in _readers(graph, v) if _reads_as(graph.ops[n], cls, operand, v)})
    if len(found) > 1:
        raise PartitionError(
            f"{_value_name(v)} has {len(found)} {cls.KERNEL.name} readers", graph.ops[found[1]]
        )
    return found[0] if found else None


def _reads_as(
    op: Operation, cls: type[_Op], operand: Callable[[_Op], SSAValue], v: SSAValue
) -> bool:
    return isinstance(op, cls) and operand(op) is v


def _a2a(graph: DataflowGraph, node: int | None, axes: tuple[int, int], what: str) -> int:
    if node is None or a2a_axes(graph.ops[node]) != axes:
        raise PartitionError(
            f"token parts: {what} is not a single all-to-all {axes}",
            None if node is None else graph.ops[node],
        )
    op = graph.ops[node]
    shape = shape_of(op.operands[0])
    if shape is None or len(shape) != 3:
        raise PartitionError(f"token parts: {what} must move a rank-3 tensor", op)
    return node


def _between(graph: DataflowGraph, lo: int, hi: int) -> list[int]:
    """Nodes on a path from `lo` to `hi` (both excluded)."""
    down: set[int] = set()
    queue = deque(graph.succs[lo])
    while queue:
        i = queue.popleft()
        if i in down or i > hi:
            continue
        down.add(i)
        queue.extend(graph.succs[i])
    up: set[int] = set()
    queue = deque(graph.preds[hi])
    while queue:
        i = queue.popleft()
        if i in up or i < lo:
            continue
        up.add(i)
        queue.extend(graph.preds[i])
    return sorted((down & up) - {lo, hi})


def find_layer(graph: DataflowGraph, gate: int) -> TokenLayer:
    """The forward (and, when present, backward) ops of the MoE layer of `gate`; raises
    PartitionError with a one-line reason when the layer cannot be split by tokens, about
    the op that stops it (the gate when no other op does)."""
    try:
        return _find_layer(graph, gate)
    except PartitionError as exc:
        if exc.op is None:
            exc.op = graph.ops[gate]
        raise


def _find_layer(graph: DataflowGraph, gate: int) -> TokenLayer:
    g = graph.ops[gate]
    if kernel_param(g, "gate") != "switch":
        raise PartitionError(
            f"token parts need the switch gate ('{node_name(graph, gate)}' is "
            f"{kernel_param(g, 'gate')}): top2 places second choices after every token's "
            f"first choice, so a part's slots depend on later tokens",
            g,
        )
    combine_v, dispatch_v = g.results
    logits = g.operands[0]
    disp = _only_reader(graph, dispatch_v, MoeDispatchOp, lambda o: o.dispatch)
    comb = _only_reader(graph, combine_v, MoeCombineOp, lambda o: o.combine)
    if disp is None or comb is None:
        raise PartitionError("token parts: the gate feeds no dispatch / combine pair")
    entry = _a2a(
        graph, _sole_reader(graph, graph.ops[disp].results[0]), (0, 1), "the dispatch's exchange"
    )
    returned = graph.ops[comb].operands[0]
    exit_ref = value_ref(graph, returned)
    exit_ = _a2a(graph, None if exit_ref is None else exit_ref[0], (1, 0), "the combine's exchange")
    layer = TokenLayer(
        gate, disp, entry, exit_, comb, _between(graph, entry, exit_), None,
        (shape_of(logits) or (0,))[0],
    )  # fmt: skip
    layer.bwd = _find_backward(graph, layer, logits)
    _classify(graph, layer)
    return layer


def _sole_reader(graph: DataflowGraph, v: SSAValue) -> int | None:
    readers = _readers(graph, v)
    return readers[0][0] if len(readers) == 1 else None


def _find_backward(
    graph: DataflowGraph, layer: TokenLayer, logits: SSAValue
) -> BackwardLayer | None:
    g = graph.ops[layer.gate]
    combine_v, dispatch_v = g.results
    cdx = _only_reader(graph, combine_v, MoeCombineDxOp, lambda o: o.combine)
    ddx = _only_reader(graph, dispatch_v, MoeDispatchDxOp, lambda o: o.dispatch)
    returned = graph.ops[layer.combine].operands[0]
    cdw = _only_reader(graph, returned, MoeCombineDwOp, lambda o: o.expert_out)
    if cdx is None and ddx is None and cdw is None:
        return None  # a forward-only module
    if cdx is None or ddx is None or cdw is None:
        raise PartitionError("token parts: the layer's backward is incomplete")
    dy = graph.ops[cdx].operands[0]
    if graph.ops[cdw].operands[0] is not dy:
        raise PartitionError("token parts: the combine's two gradients read different inputs")
    gdx = _only_reader(graph, graph.ops[cdw].results[0], MoeGateDxOp, lambda o: o.dcombine)
    if gdx is None or graph.ops[gdx].operands[1] is not logits:
        raise PartitionError("token parts: the gate's gradient is not found")
    entry = _a2a(
        graph, _sole_reader(graph, graph.ops[cdx].results[0]), (0, 1), "the backward exchange"
    )
    exit_ref = value_ref(graph, graph.ops[ddx].operands[0])
    exit_ = _a2a(graph, None if exit_ref is None else exit_ref[0], (1, 0), "the backward return")
    return BackwardLayer(cdx, cdw, gdx, entry, exit_, ddx, _between(graph, entry, exit_))


def _classify(graph: DataflowGraph, layer: TokenLayer) -> None:
    """Give every window value its chunking (as the capacity-axis solver names it: the
    expert side's rows are axis 1 in G blocks) or PARTIAL, via the registry's rules; add
    the backward's other readers of windows (the expert weight gradients) to its chain;
    refuse the layer when a window is read outside it."""
    g = graph.ops
    slots = layer.slots
    entry = g[layer.fwd_entry]
    group = (shape_of(entry.results[0]) or (0, 0))[1] // (shape_of(entry.operands[0]) or (1, 1))[1]
    slots[entry.results[0]] = (1, group)
    for i in layer.fwd_chain:
        _classify_op(graph, i, slots, group)
    _check_exchange(graph, layer.fwd_exit, slots, group)
    if layer.bwd is not None:
        b = layer.bwd
        slots[g[b.entry].results[0]] = (1, group)
        chain: set[int] = set()
        heap = [n for v in list(slots) for n, _ in _readers(graph, v)]
        heapq.heapify(heap)
        fixed = set(layer.fwd_nodes) | {b.combine_dx, b.combine_dw, b.gate_dx, b.entry, b.exit,
                                        b.dispatch_dx}  # fmt: skip
        while heap:
            i = heapq.heappop(heap)
            if i in chain or i in fixed or i <= b.entry or graph.is_comm[i]:
                continue
            chain.add(i)
            _classify_op(graph, i, slots, group)
            for r in g[i].results:
                if slots[r] != PARTIAL:
                    for n, _ in _readers(graph, r):
                        heapq.heappush(heap, n)
        b.chain = sorted(chain)
        _check_exchange(graph, b.exit, slots, group)
    inside = set(layer.fwd_nodes) | set(layer.bwd_nodes)
    windows = [v for v, s in slots.items() if s != PARTIAL] + list(g[layer.gate].results)
    windows += [r for i in (layer.dispatch, layer.fwd_exit) for r in g[i].results]
    if layer.bwd is not None:
        windows += [r for i in (layer.bwd.combine_dx, layer.bwd.combine_dw, layer.bwd.exit)
                    for r in g[i].results]  # fmt: skip
    for v in windows:
        for node, _ in _readers(graph, v):
            if node not in inside:
                raise PartitionError(
                    f"token parts: '{node_name(graph, node)}' reads the window value "
                    f"{_value_name(v)} outside the MoE layer",
                    g[node],
                )


def _classify_op(graph: DataflowGraph, node: int, slots: dict[SSAValue, Slot], group: int) -> None:
    o = graph.ops[node]
    want: list[Slot] = []
    for v in o.operands:
        s = slots.get(v)
        if s == PARTIAL:
            raise PartitionError(f"token parts: '{node_name(graph, node)}' reads a partial sum", o)
        want.append(s)
    for cin, cout in op_options(o, (1, group)):
        if list(cin) == want:
            for r, s in zip(o.results, cout, strict=True):
                slots[r] = s
            return
    raise PartitionError(
        f"token parts: the registry has no row-wise rule for '{node_name(graph, node)}'", o
    )


def _check_exchange(
    graph: DataflowGraph, node: int, slots: dict[SSAValue, Slot], group: int
) -> None:
    if slots.get(graph.ops[node].operands[0]) != (1, group):
        raise PartitionError(
            f"token parts: '{node_name(graph, node)}' does not move the expert-side rows",
            graph.ops[node],
        )


# ---- building the parts --------------------------------------------------------------------


@dataclass
class TokenRegions:
    """The detached new ops of one layer's forward and backward token parts."""

    forward: PartitionedRegion
    backward: PartitionedRegion | None
    parts: dict[SSAValue, list[SSAValue]] = field(default_factory=dict)
    """Token parts of the layer's border values (inputs split, outputs computed)."""


class TokenBuilder:
    """Creates the detached ops of one layer split into n token parts (module doc)."""

    def __init__(
        self,
        graph: DataflowGraph,
        layer: TokenLayer,
        n: int,
        available: Available,
    ):
        if not 2 <= n <= layer.tokens:
            raise PartitionError(
                f"token parts: {n} parts for {layer.tokens} tokens", graph.ops[layer.gate]
            )
        self.graph = graph
        self.layer = layer
        self.n = n
        self.available = available
        self.inside = set(layer.fwd_nodes) | set(layer.bwd_nodes)
        self.sizes = part_sizes(layer.tokens, n)
        self.fill = [s / layer.tokens for s in self.sizes]
        self.parts: dict[SSAValue, list[SSAValue]] = {}
        """Parts of every value of the layer (token values and windows)."""
        self.fwd = PartitionedRegion(layer.fwd_nodes, n)
        self.bwd = None if layer.bwd is None else PartitionedRegion(layer.bwd.nodes, n)
        entry = graph.ops[layer.fwd_entry]
        ins, outs = shape_of(entry.operands[0]), shape_of(entry.results[0])
        assert ins is not None
        assert outs is not None
        self.experts, self.capacity, self.hidden = ins
        self.group = outs[1] // ins[1]
        if self.experts % self.group:
            raise PartitionError("token parts: experts do not divide among the ranks", entry)
        self.local = self.experts // self.group
        self.offsets: list[SSAValue] = []
        self.counts: list[SSAValue] = []
        self.received: list[SSAValue] = []

    # ---- helpers -------------------------------------------------------------------------
    def _attrs(self, like: Operation, k: int, fill: bool) -> dict[str, Attribute]:
        out = carried_annotations(like)
        out[attrs.PART] = part_attr(k)
        if fill:
            out[attrs.FILL] = FloatAttr(self.fill[k], f64)
        return out

    def _token_parts(
        self, v: SSAValue, region: PartitionedRegion, like: Operation
    ) -> list[SSAValue]:
        """Parts of `v` along axis 0: computed by this layer, left by an earlier region, or
        split here at the border."""
        if v in self.parts:
            return self.parts[v]
        earlier = self.available.get(v, {}).get(((0, 1), self.n))
        if earlier is None:
            split = build_kernel_op(
                "split", [v], split_params(0, self.layer.tokens, self.n), role_of(like)
            )
            region.add(split, PRELUDE)
            mark_moved([split], [_producer(v), like])
            earlier = list(split.results)
        self.parts[v] = list(earlier)
        return self.parts[v]

    def _add(self, region: PartitionedRegion, op: Operation, k: int) -> Operation:
        region.add(op, part_phase(k))
        return op

    def _name(self, new: SSAValue, old: SSAValue, k: int) -> None:
        if old.name_hint:
            new.name_hint = f"{old.name_hint}_part{k}"

    def _layout(
        self,
        region: PartitionedRegion,
        v: SSAValue,
        shape: Sequence[int],
        k: int,
        like: Operation,
        perm: tuple[int, ...] | None = None,
        sent: SSAValue | None = None,
    ) -> SSAValue:
        """`v` reshaped to `shape` (after a transpose by `perm` when given; no reshape when
        the shape is already right); costed from `v`'s producer, else from that of the
        window `sent` that an exchange brought as `v`."""
        role = self._attrs(like, k, fill=True)
        source = [_producer(v), like, None if sent is None else _producer(sent)]
        if perm is not None:
            turn = build_kernel_op("transpose", [v], {"perm": perm}, role)
            mark_moved([turn], source)
            v = self._add(region, turn, k).results[0]
        if shape_of(v) == tuple(shape):
            return v
        again = build_kernel_op("reshape", [v], {"shape": tuple(shape)}, role)
        mark_moved([again], source)
        return self._add(region, again, k).results[0]

    def _exchange(
        self, region: PartitionedRegion, like: Operation, data: SSAValue, counts: SSAValue, k: int
    ) -> tuple[SSAValue, SSAValue]:
        """One `comm.all_to_allv` of a [G, E/G, C, M] window with counts [G, E/G]."""
        assert isinstance(like, AllToAllOp)
        props = {"groups": like.properties.get("groups")}
        op = AllToAllVOp([data, counts], [data.type, counts.type], props)
        op.attributes.update(self._attrs(like, k, fill=True))
        self._add(region, op, k)
        return op.results[0], op.results[1]

    def _send(
        self, region: PartitionedRegion, node: int, window: SSAValue, counts: SSAValue, k: int
    ) -> tuple[SSAValue, SSAValue]:
        """Replace the all-to-all `node` (split 0, concat 1: [E, C, M] -> [E/G, G·C, M]) for
        part k: move the window's valid rows, return the expert-side window and counts."""
        like = self.graph.ops[node]
        _e, c, m, g, el = self.experts, self.capacity, self.hidden, self.group, self.local
        wide = self._layout(region, window, (g, el, c, m), k, like)
        got, got_counts = self._exchange(region, like, wide, counts, k)
        out = self._layout(region, got, (el, g * c, m), k, like, (1, 0, 2, 3), window)
        self._name(out, like.results[0], k)
        return out, got_counts

    def _return(
        self, region: PartitionedRegion, node: int, window: SSAValue, counts: SSAValue, k: int
    ) -> SSAValue:
        """Replace the all-to-all `node` (split 1, concat 0: [E/G, G·C, M] -> [E, C, M])."""
        like = self.graph.ops[node]
        e, c, m, g, el = self.experts, self.capacity, self.hidden, self.group, self.local
        wide = self._layout(region, window, (el, g, c, m), k, like)
        back = self._layout(region, wide, (g, el, c, m), k, like, perm=(1, 0, 2, 3))
        got, _ = self._exchange(region, like, back, counts, k)
        out = self._layout(region, got, (e, c, m), k, like, sent=window)
        self._name(out, like.results[0], k)
        return out

    def _operand(self, v: SSAValue, k: int) -> SSAValue:
        return self.parts[v][k] if v in self.parts else v

    def _clone(self, region: PartitionedRegion, node: int, k: int, fill: bool = True) -> Operation:
        o = self.graph.ops[node]
        # a part on the part's own token rows (no fill) does the part's share of the work
        copy = clone_kernel_op(
            o,
            [self._operand(v, k) for v in o.operands],
            self._attrs(o, k, fill),
            share=None if fill else self.fill[k],
        )
        self._add(region, copy, k)
        for old, new in zip(o.results, copy.results, strict=True):
            self.parts.setdefault(old, []).append(new)
            self._name(new, old, k)
        return copy

    def _chain(self, region: PartitionedRegion, nodes: Sequence[int], k: int) -> None:
        """Per-part copies of the expert ops (on windows, or partial sums of them)."""
        for i in nodes:
            self._clone(region, i, k)

    # ---- forward ---------------------------------------------------------------------------
    def regions(self) -> TokenRegions:
        """What has been built so far."""
        return TokenRegions(self.fwd, self.bwd, self.parts)

    def forward(self) -> None:
        """Create the forward parts (border inputs from `available`, else split)."""
        L, g, r = self.layer, self.graph, self.fwd
        gate = g.ops[L.gate]
        logits = self._token_parts(gate.operands[0], r, gate)
        self._token_parts(g.ops[L.dispatch].operands[0], r, gate)
        zeros = build_kernel_op(
            "zeros", [], {"shape": (self.experts,), "dtype": "i64"}, role_of(gate)
        )
        mark_moved([zeros], [gate])
        r.add(zeros, PRELUDE)
        offsets = zeros.results[0]
        params = {"gate": "switch", "capacity": self.capacity}
        for k in range(self.n):
            self.offsets.append(offsets)
            win = self._add(
                r,
                build_kernel_op(
                    "moe_gate_window",
                    [logits[k], offsets],
                    params,
                    self._attrs(gate, k, fill=False),
                ),
                k,
            )
            mark_derived(win, gate, self.fill[k])
            for old, new in zip(gate.results, win.results[:2], strict=True):
                self.parts.setdefault(old, []).append(new)
                self._name(new, old, k)
            offsets = win.results[3]
            counts = build_kernel_op(
                "reshape",
                [win.results[2]],
                {"shape": (self.group, self.local)},
                self._attrs(gate, k, fill=False),
            )
            mark_moved([counts], [win])
            wide_counts = self._add(r, counts, k).results[0]
            self.counts.append(wide_counts)
            self._clone(r, L.dispatch, k, fill=False)
            window = self.parts[g.ops[L.dispatch].results[0]][k]
            expert_in, got = self._send(r, L.fwd_entry, window, wide_counts, k)
            self.parts.setdefault(g.ops[L.fwd_entry].results[0], []).append(expert_in)
            self.received.append(got)
            self._chain(r, L.fwd_chain, k)
            exit_op = g.ops[L.fwd_exit]
            returned = self._return(r, L.fwd_exit, self.parts[exit_op.operands[0]][k], got, k)
            self.parts.setdefault(exit_op.results[0], []).append(returned)
            self._clone(r, L.combine, k, fill=False)
        self._merge_tokens(r, [L.combine])

    # ---- backward --------------------------------------------------------------------------
    def backward(self) -> None:
        """Create the backward parts (after `forward`)."""
        L, g = self.layer, self.graph
        b, r = L.bwd, self.bwd
        assert b is not None
        assert r is not None
        cdx = g.ops[b.combine_dx]
        self._token_parts(cdx.operands[0], r, cdx)
        gate = g.ops[L.gate]
        params = {"gate": "switch", "capacity": self.capacity}
        gdx = g.ops[b.gate_dx]
        logits = self.parts[gate.operands[0]]
        for k in range(self.n):
            self._clone(r, b.combine_dx, k, fill=False)
            self._clone(r, b.combine_dw, k, fill=False)
            dcomb = self.parts[g.ops[b.combine_dw].results[0]][k]
            dl = self._add(
                r,
                build_kernel_op(
                    "moe_gate_window_dx",
                    [dcomb, logits[k], self.offsets[k]],
                    params,
                    self._attrs(gdx, k, fill=False),
                ),
                k,
            )
            mark_derived(dl, gdx, self.fill[k])
            self.parts.setdefault(gdx.results[0], []).append(dl.results[0])
            self._name(dl.results[0], gdx.results[0], k)
            d_out, _ = self._send(r, b.entry, self.parts[cdx.results[0]][k], self.counts[k], k)
            self.parts.setdefault(g.ops[b.entry].results[0], []).append(d_out)
            self._chain(r, b.chain, k)
            exit_op = g.ops[b.exit]
            d_disp = self._return(
                r, b.exit, self.parts[exit_op.operands[0]][k], self.received[k], k
            )
            self.parts.setdefault(exit_op.results[0], []).append(d_disp)
            self._clone(r, b.dispatch_dx, k, fill=False)
        self._merge_tokens(r, [b.dispatch_dx, b.gate_dx])
        self._merge_partials(r, b.chain)

    # ---- borders ---------------------------------------------------------------------------
    def _outside(self, v: SSAValue) -> bool:
        """True when an op other than the layer's reads `v`."""
        return any(self.graph.index.get(u.operation) not in self.inside for u in v.uses)

    def _merge_tokens(self, region: PartitionedRegion, nodes: Sequence[int]) -> None:
        for i in nodes:
            o = self.graph.ops[i]
            for j, res in enumerate(o.results):
                if not self._outside(res):
                    continue
                cat = rebuild_concat(self.parts[res], 0, role_of(o))
                index = self.graph.index
                readers = sorted(index[u.operation] for u in res.uses if u.operation in index)
                mark_moved([cat], [o, *(self.graph.ops[r] for r in readers)])
                region.add(cat, EPILOGUE)
                region.merged[(i, j)] = cat.results[0]
                region.epilogue.append(cat)
                region.chunks[(i, j)] = ((0, 1), list(self.parts[res]))

    def _merge_partials(self, region: PartitionedRegion, nodes: Sequence[int]) -> None:
        for i in nodes:
            o = self.graph.ops[i]
            for j, res in enumerate(o.results):
                if self.layer.slots.get(res) != PARTIAL or not self._outside(res):
                    continue
                total = self.parts[res][0]
                for p in self.parts[res][1:]:
                    add = partial_sum(total, p, role_of(o))
                    mark_moved([add], [o])
                    region.add(add, EPILOGUE)
                    region.epilogue.append(add)
                    total = add.results[0]
                region.merged[(i, j)] = total


def _producer(v: SSAValue) -> Operation | None:
    """The op defining `v` (None for a block argument)."""
    return v.owner if isinstance(v.owner, Operation) else None
