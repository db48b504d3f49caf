"""Shared vocabulary of the partition library: value references, errors, annotations."""

from __future__ import annotations

from functools import cache

from xdsl.dialects.builtin import IntegerAttr, TensorType, i64
from xdsl.ir import Operation, OpResult, SSAValue

from lancet_mlir.graph.dataflow import DataflowGraph, op_display_name

ValueRef = tuple[int, int]
"""An op result named by (graph node, result index): stable while the IR is rewritten."""


class PartitionError(ValueError):
    """A planned partition cannot be applied; the message is one user-facing line.

    `op`: the op of the input that stops it, when one does (the pass that reports the error
    keeps it: `support.errors.pass_failure`, and a tool places the line at the op)."""

    def __init__(self, message: str, op: Operation | None = None) -> None:
        super().__init__(message)
        self.op = op


@cache
def part_attr(k: int) -> IntegerAttr:
    """The `lancet.part` value of part `k`, one object per k: attributes are immutable, so
    the parts share it (a new one per copy was about 3 % of building a token candidate, and
    a shared object numbers by identity: `support.numbering`)."""
    return IntegerAttr(k, i64)


def part_sizes(rows: int, n: int) -> list[int]:
    """The rows of each of `n` parts of a dimension (or block) of `rows` rows, in order: the
    first `rows mod n` parts get one row more than the others (1 <= n <= rows), so part k
    holds rows [sum(sizes[:k]), sum(sizes[:k + 1]))."""
    assert 1 <= n <= rows, f"cannot cut {rows} rows into {n} non-empty parts"
    base, extra = divmod(rows, n)
    return [base + 1] * extra + [base] * (n - extra)


def value_ref(graph: DataflowGraph, v: SSAValue) -> ValueRef | None:
    """(node, result index) of `v` when it is a result of a node of `graph`, else None
    (block arguments, values defined outside the block)."""
    if not isinstance(v, OpResult):
        return None
    node = graph.index.get(v.op)
    return None if node is None else (node, v.index)


def value_of(graph: DataflowGraph, ref: ValueRef) -> SSAValue:
    """The SSA value named by `ref`."""
    return graph.ops[ref[0]].results[ref[1]]


def shape_of(v: SSAValue) -> tuple[int, ...] | None:
    """Static shape of a tensor value, else None."""
    t = v.type
    return tuple(t.get_shape()) if isinstance(t, TensorType) else None


def node_name(graph: DataflowGraph, node: int) -> str:
    """A readable name for messages: the first result's name hint, else the op name."""
    op: Operation = graph.ops[node]
    if op.results and op.results[0].name_hint:
        return op.results[0].name_hint
    return op_display_name(op)
