"""Applies planned expert spans to the IR: chunked all-to-alls, per-chunk copies of the
compute, partial sums of weight gradients, reassembly of values still needed whole."""

from __future__ import annotations

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Operation, SSAValue

from lancet_mlir import attrs
from lancet_mlir.dialects.comm import AllToAllOp
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.base import (
    ValueRef,
    part_attr,
    shape_of,
    value_of,
    value_ref,
)
from lancet_mlir.partition.expert_span import ExpertSpan
from lancet_mlir.partition.origin import mark_moved
from lancet_mlir.partition.rules import (
    Axis,
    build_kernel_op,
    clone_kernel_op,
    partial_sum,
    rebuild_concat,
)

# timing annotations describe the whole op; a chunk must not inherit them


def carried_annotations(o: Operation) -> dict[str, Attribute]:
    """The `lancet.*`-style annotations of `o` that a partitioned copy keeps."""
    return {k: v for k, v in o.attributes.items() if "." in k and k not in attrs.TIMING}


def role_of(o: Operation) -> dict[str, Attribute]:
    """`o`'s `lancet.role` annotation as an attribute dict (empty when it has none)."""
    role = o.attributes.get(attrs.ROLE)
    return {} if role is None else {attrs.ROLE: role}


def chunk_type(t: Attribute, axis: int, n: int) -> TensorType:
    """Tensor type `t` with dimension `axis` divided by `n`."""
    assert isinstance(t, TensorType)
    shape = list(t.get_shape())
    shape[axis] //= n
    return TensorType(t.element_type, shape)


class PartitionRewriter:
    """Rewrites expert spans of one block into `n` pipelined chunks.

    Each span becomes: `comp.split` of the dispatched buffer along the capacity axis; per
    chunk k an all-to-all, the span's compute and the returning all-to-all (all tagged
    `lancet.part = k`), launched as a2a(0), then per chunk k: a2a(k+1), compute(k),
    a2a back(k); `comp.concat` of the returned chunks. Tail ops (weight gradients) are
    computed per chunk and summed. Chunked values still used outside the rewritten ops are
    reassembled; the original ops are erased.
    """

    def __init__(self, graph: DataflowGraph, n: int):
        self.graph = graph
        self.n = n
        self.chunks: dict[ValueRef, list[SSAValue]] = {}
        self.axis_of: dict[ValueRef, int] = {}
        self.span_of: dict[ValueRef, ExpertSpan] = {}

    def rewrite(self, spans: list[ExpertSpan]) -> None:
        """Rewrite every span, reassemble chunked values still used elsewhere, erase the
        replaced ops."""
        originals = [i for span in spans for i in span.nodes]
        for span in spans:
            self._rewrite_span(span)
        doomed = {self.graph.ops[i] for i in originals}
        for ref in list(self.chunks):
            v = value_of(self.graph, ref)
            if any(use.operation not in doomed for use in v.uses):
                self._merge(ref, doomed)
        for i in sorted(originals, reverse=True):
            doomed_op = self.graph.ops[i]
            doomed_op.detach()
            doomed_op.erase()

    # ---- one span --------------------------------------------------------------------------
    def _rewrite_span(self, span: ExpertSpan) -> None:
        g, n, r = self.graph, self.n, span.axis
        entry, exit_ = g.ops[span.entry], g.ops[span.exit]
        block = entry.parent_block()
        assert block is not None
        split = build_kernel_op("split", [entry.operands[0]], {"axis": r, "num": n}, role_of(entry))
        source = entry.operands[0].owner
        mark_moved([split], [source if isinstance(source, Operation) else None])
        ins = [self._a2a_chunk(entry, split.results[k], r, k) for k in range(n)]
        self._record((span.entry, 0), [o.results[0] for o in ins], r, span)
        stages: list[list[Operation]] = []
        outs: list[Operation] = []
        partials: dict[int, list[list[SSAValue]]] = {i: [] for i in span.tail}
        for k in range(n):
            stage: list[Operation] = []
            for i in sorted(span.core + span.tail):
                clone = self._clone(i, span.combos[i][0], k)
                stage.append(clone)
                if i in partials:
                    partials[i].append(list(clone.results))
                elif k == n - 1:
                    self._record_outputs(i, span, span.combos[i][1])
            outs.append(self._a2a_chunk(exit_, self._chunk(exit_.operands[0], k), r, k))
            stages.append(stage)
        concat = rebuild_concat([o.results[0] for o in outs], r, role_of(exit_))
        mark_moved([concat], self._readers(exit_.results[0], set()))
        new_ops: list[Operation] = [split, ins[0]]
        for k in range(n):
            new_ops += ([ins[k + 1]] if k + 1 < n else []) + stages[k] + [outs[k]]
        new_ops.append(concat)
        block.insert_ops_before(new_ops, entry)
        exit_.results[0].replace_all_uses_with(concat.results[0])
        for i in span.tail:
            self._sum_partials(i, partials[i], entry)

    def _a2a_chunk(self, like: Operation, value: SSAValue, axis: int, k: int) -> Operation:
        """A copy of all-to-all `like` moving chunk `k`: the capacity dim `axis` of its
        result (entry: its concat axis; exit: its split axis) is divided by n."""
        out_type = chunk_type(like.results[0].type, axis, self.n)
        op = AllToAllOp([value], [out_type], dict(like.properties))
        op.attributes.update(carried_annotations(like))
        op.attributes[attrs.PART] = part_attr(k)
        if like.results[0].name_hint:
            op.results[0].name_hint = f"{like.results[0].name_hint}_part{k}"
        return op

    def _record(self, ref: ValueRef, chunks: list[SSAValue], axis: int, span: ExpertSpan) -> None:
        self.chunks[ref] = chunks
        self.axis_of[ref] = axis
        self.span_of[ref] = span

    def _record_outputs(self, node: int, span: ExpertSpan, out_axes: tuple[Axis, ...]) -> None:
        for j, ax in enumerate(out_axes):
            assert isinstance(ax, int)
            self.axis_of[(node, j)] = ax
            self.span_of[(node, j)] = span

    def _chunk(self, v: SSAValue, k: int) -> SSAValue:
        ref = value_ref(self.graph, v)
        assert ref is not None, "operand is not a result of the block"
        assert ref in self.chunks, "operand was never chunked"
        return self.chunks[ref][k]

    def _clone(self, node: int, in_axes: tuple[Axis, ...], k: int) -> Operation:
        """Chunk `k` of op `node`: split operands replaced by their chunk k."""
        o = self.graph.ops[node]
        inputs = [
            v if ax is None else self._chunk(v, k)
            for v, ax in zip(o.operands, in_axes, strict=True)
        ]
        carried: dict[str, Attribute] = carried_annotations(o)
        carried[attrs.PART] = part_attr(k)
        clone = clone_kernel_op(o, inputs, carried)
        for j, (res, old) in enumerate(zip(clone.results, o.results, strict=True)):
            self.chunks.setdefault((node, j), []).append(res)
            if old.name_hint:
                res.name_hint = f"{old.name_hint}_part{k}"
        return clone

    def _sum_partials(self, node: int, parts: list[list[SSAValue]], before: Operation) -> None:
        """Replace each result of tail op `node` by the sum of its per-chunk partials."""
        o = self.graph.ops[node]
        block = before.parent_block()
        assert block is not None
        for j, res in enumerate(o.results):
            total = parts[0][j]
            for p in parts[1:]:
                add = partial_sum(total, p[j], role_of(o))
                mark_moved([add], [o])
                block.insert_op_before(add, before)
                total = add.results[0]
            res.replace_all_uses_with(total)
            self.chunks.pop((node, j), None)

    def _readers(self, v: SSAValue, doomed: set[Operation]) -> list[Operation]:
        """The readers of `v` outside `doomed`, in program order (`origin.mark_moved`)."""
        index = self.graph.index
        users = {u.operation for u in v.uses} - doomed
        return sorted((u for u in users if u in index), key=lambda u: index[u])

    def _merge(self, ref: ValueRef, doomed: set[Operation]) -> None:
        """Reassemble chunked value `ref` for its uses outside the rewritten ops.

        Rows along the chunk axis are ordered (rank g, capacity slot) in every span value,
        so chunk k holds slots [k·C/n, (k+1)·C/n) of each rank: reshape each chunk to split
        the axis into (G, C/n), concatenate along the slot dim, reshape back.
        """
        span, axis, chunks = self.span_of[ref], self.axis_of[ref], self.chunks[ref]
        v = value_of(self.graph, ref)
        shape = shape_of(v)
        assert shape is not None
        assert shape[axis] == span.group * span.capacity
        slots = span.capacity // self.n
        anchor = chunks[-1].owner
        assert isinstance(anchor, Operation)
        split_shape = (*shape[:axis], span.group, slots, *shape[axis + 1 :])
        role = role_of(self.graph.ops[ref[0]])
        ops = [build_kernel_op("reshape", [c], {"shape": split_shape}, role) for c in chunks]
        ops.append(rebuild_concat([o.results[0] for o in ops], axis + 1, role))
        ops.append(build_kernel_op("reshape", [ops[-1].results[0]], {"shape": shape}, role))
        mark_moved(ops, [self.graph.ops[ref[0]], *self._readers(v, doomed)])
        block = anchor.parent_block()
        assert block is not None
        block.insert_ops_after(ops, anchor)
        merged = ops[-1].results[0]
        v.replace_uses_with_if(merged, lambda use: use.operation not in doomed)
