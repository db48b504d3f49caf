"""Destination-passing concatenation: the parts written into one buffer.

A `comp.concat` with `in_place = true` is the destination-passing form of a concatenation
(as MLIR's bufferization makes of a `tensor.empty` and one in-place `tensor.insert_slice`
per part): the result's buffer is allocated first and the op that writes each part's bytes
(its *writer*) writes them directly into that part's slice, so the concat itself runs no
kernel and copies nothing. On a GPU that holds exactly where each slice is a contiguous row
block of the result, i.e. every dimension before `axis` is 1 (on a 2-D `[rows, cols]`
result: axis 0): cuBLAS takes any output pointer, elementwise and copy kernels (PyTorch
`out=`, a transpose's `.contiguous()`) and NCCL receive buffers too. A slice with strides
(an axis after a dimension > 1) stays a copy here: a GEMM's `ldc` covers one stride but not
a part whose rows are a block of several groups, and a collective needs contiguous buffers.

`in_place_concat(op)` is the one place that decides (`mark_in_place` records it, the cost
model costs an in-place concat 0 and the runtime executes it by writing into slices): the
property is honoured only while the structure still allows it, so an IR edit that breaks it
(a part that became a block argument or a view, a writer claimed twice) turns the concat
back into a copy instead of a wrong cost. The structure:

* each input is written by an op of the block: its producer, seen through `comp.reshape`
  views (a reshape of a contiguous slice is the same bytes); not a block argument, not a
  view op (`comp.split`, `comp.reshape` at the end of the chain), not another concat;
  a compute kernel or a single-result collective;
* the inputs are distinct values with distinct writers, and no writer's value (nor a view
  of it on the way) is an input of another in-place concat: a buffer has one place;
* contiguous slices (above).

A `comp.split` whose slices are contiguous row blocks of its input (every dimension before
its axis is 1, as for the concat above) is a view on a GPU: each result is a pointer into the
input's buffer (PyTorch `split`/`chunk`/`narrow`, cuBLAS and NCCL take it as it is), no kernel
runs and nothing is copied. `view_split(op)` decides; the cost model costs such a split 0 and
the runtime returns the slices without copying them. Nothing writes into a view: an in-place
concat's writers and an in-place accumulation's total are never split results (below), and
the value a split reads is never overwritten later (an in-place accumulation overwrites only
a total that it alone reads).

A chain of partial sums (the per-part weight gradients of a partitioned op, added up) is the
same idea for `comp.add`: `add(total, part) {in_place = true}` says the part's GEMM added its
product into the running sum's buffer (cuBLAS's beta = 1: C = A·B + C, the read of C inside
the GEMM's compute-bound time) instead of writing its own buffer for an add kernel to read,
so the add runs no kernel. `accumulation_ok` decides: equal types (no broadcast), the part
the single result of a GEMM-family kernel (`GEMM_KERNELS`) of the block and read only by this
add, the total read only by this add (its buffer is overwritten) and either such a GEMM
result too (the chain's first part) or an in-place accumulation itself. Bias and layer-norm
gradients (`reduce_sum`, `layer_norm_dw`) have no such epilogue: their sums stay adds.
"""

from __future__ import annotations

from math import prod

from xdsl.dialects.builtin import BoolAttr, IntegerAttr, TensorType
from xdsl.ir import Operation, SSAValue

from lancet_mlir.dialects.comm import CollectiveOp
from lancet_mlir.dialects.comp import AddOp, ConcatOp, ReshapeOp, SplitOp, kernel_of

__all__ = [
    "GEMM_KERNELS",
    "is_gemm_kernel",
    "accumulates_in_place",
    "accumulation_ok",
    "concat_axis",
    "in_place_concat",
    "mark_accumulate",
    "mark_in_place",
    "placement_ok",
    "slice_offsets",
    "view_split",
    "writer_claimed",
    "writer_of",
]


def concat_axis(op: ConcatOp) -> int:
    """The concat's axis, normalised to [0, rank)."""
    rank = len(op.results[0].type.get_shape()) if isinstance(op.results[0].type, TensorType) else 0
    axis = op.axis.value.data if isinstance(op.axis, IntegerAttr) else 0
    return axis + rank if axis < 0 else axis


def writer_of(v: SSAValue) -> tuple[Operation, list[SSAValue]] | None:
    """The op that writes the bytes of `v` (its producer seen through `comp.reshape` views)
    and the values on the way (`v` first, the writer's result last); None when `v` is a block
    argument or its bytes come from a view op, a concat or an op that is neither a compute
    kernel nor a single-result collective."""
    chain = [v]
    while isinstance(v.owner, ReshapeOp):
        v = v.owner.operands[0]
        chain.append(v)
    owner = v.owner
    if not isinstance(owner, Operation) or isinstance(owner, SplitOp | ConcatOp | ReshapeOp):
        return None
    if isinstance(owner, CollectiveOp):
        return (owner, chain) if len(owner.results) == 1 else None
    return (owner, chain) if kernel_of(owner) is not None else None


def _claimed_elsewhere(chain: list[SSAValue], op: ConcatOp | None) -> bool:
    """True when the writer's result (`chain[-1]`) or any `comp.reshape` view of it, however
    deep, is an input of an in-place concat other than `op`: the writer would have to write
    into two buffers. Views are followed down from the writer, not only along `chain`, so
    two sibling reshapes of one writer feeding two concats are seen (an outside review)."""
    pending = [chain[-1]]
    seen: set[SSAValue] = set()
    while pending:
        value = pending.pop()
        if value in seen:
            continue
        seen.add(value)
        for use in value.uses:
            other = use.operation
            if isinstance(other, ReshapeOp):
                pending.append(other.results[0])
            elif other is not op and isinstance(other, ConcatOp) and _marked(other):
                return True
    return False


def writer_claimed(v: SSAValue) -> tuple[Operation, bool] | None:
    """The writer of `v` (`writer_of`) and whether its result, or a view of it, is already an
    input of an in-place concat; None when `v` has no writer. This is what the in-place
    decision of a concat of `v` (or of views of it) reads beyond the concat's own inputs."""
    found = writer_of(v)
    if found is None:
        return None
    return found[0], _claimed_elsewhere(found[1], None)


def _marked(op: ConcatOp | AddOp) -> bool:
    flag = op.in_place
    return isinstance(flag, IntegerAttr) and bool(flag.value.data)  # BoolAttr is an i1


def _same_block(writer: Operation, block: object) -> bool:
    """True when `writer` is in `block`, or `block` is None (the op being decided is still
    detached: a pass decides before inserting it; the cost model and the runtime ask again
    once it is in a block)."""
    return block is None or writer.parent_block() is block


def placement_ok(op: ConcatOp) -> bool:
    """True when the inputs of `op` can be written into its result's slices (module doc),
    whether or not `op` is marked."""
    ty = op.results[0].type
    if not isinstance(ty, TensorType) or not op.operands:
        return False
    shape = ty.get_shape()
    axis = concat_axis(op)
    if not 0 <= axis < len(shape) or prod(shape[:axis]) != 1:
        return False  # a strided slice: stays a copy
    block = op.parent_block()
    values: set[SSAValue] = set()
    writers: set[Operation] = set()
    for v in op.operands:
        found = writer_of(v)
        if found is None or v in values:
            return False
        writer, chain = found
        if writer in writers or not _same_block(writer, block):
            return False
        if _claimed_elsewhere(chain, op):
            return False
        values.add(v)
        writers.add(writer)
    return True


def in_place_concat(op: Operation) -> bool:
    """True when `op` is a `comp.concat` marked `in_place` whose structure allows it (module
    doc): its parts are written into its buffer and it runs no kernel."""
    return isinstance(op, ConcatOp) and _marked(op) and placement_ok(op)


def mark_in_place(op: Operation) -> bool:
    """Mark `op` (a `comp.concat`) `in_place` when its structure allows it (module doc);
    returns whether it did. The decision for every concat a pass creates."""
    if not isinstance(op, ConcatOp) or not placement_ok(op):
        return False
    op.properties["in_place"] = BoolAttr.from_bool(True)
    return True


def slice_offsets(op: ConcatOp) -> list[int]:
    """Where each input's rows start along the concat axis (then the end), in rows."""
    axis = concat_axis(op)
    offsets = [0]
    for v in op.operands:
        assert isinstance(v.type, TensorType)
        offsets.append(offsets[-1] + v.type.get_shape()[axis])
    return offsets


def view_split(op: Operation) -> bool:
    """True when `op` is a `comp.split` whose slices are contiguous row blocks of its input
    (every dimension before its axis is 1): a view, no kernel (module doc)."""
    if not isinstance(op, SplitOp) or not op.operands:
        return False
    ty = op.operands[0].type
    if not isinstance(ty, TensorType):
        return False
    shape = ty.get_shape()
    axis = op.axis.value.data if isinstance(op.axis, IntegerAttr) else 0
    axis = axis + len(shape) if axis < 0 else axis
    return 0 <= axis < len(shape) and prod(shape[:axis]) == 1


# ---- partial sums accumulated in place ------------------------------------------------------

GEMM_KERNELS: frozenset[str] = frozenset(
    {"matmul", "matmul_dx", "matmul_dw", "batch_matmul", "batch_matmul_dx", "batch_matmul_dw"}
)
"""The kernels that can add their product into an existing output (a GEMM's beta = 1)."""


def is_gemm_kernel(op: Operation) -> bool:
    """True when `op` is a GEMM-family kernel (`GEMM_KERNELS`: it can add its product into
    an existing output)."""
    kernel = kernel_of(op)
    return kernel is not None and kernel.name in GEMM_KERNELS


def _gemm_part(v: SSAValue, op: Operation) -> bool:
    """True when `v` is the only result of a GEMM-family kernel of `op`'s block and `op` is
    its one reader (its buffer may become the running sum)."""
    owner = v.owner
    if not isinstance(owner, Operation) or len(owner.results) != 1:
        return False
    if not is_gemm_kernel(owner):
        return False
    return _same_block(owner, op.parent_block()) and _sole_reader(v, op)


def _sole_reader(v: SSAValue, op: Operation) -> bool:
    uses = list(v.uses)
    return len(uses) == 1 and uses[0].operation is op


def accumulation_ok(op: Operation) -> bool:
    """True when `op`, a `comp.add` (total, part) of a chain of partial sums, can be the
    part's GEMM adding its product into the running sum's buffer (beta = 1) instead of an add
    kernel (module doc): equal types, the part a GEMM-family result read only here, the
    total read only here and either a GEMM-family result too (the chain's first part) or an
    in-place accumulation itself."""
    if not isinstance(op, AddOp):
        return False
    total, part = op.operands
    if not (total.type == part.type == op.results[0].type):
        return False
    if not _gemm_part(part, op) or not _sole_reader(total, op):
        return False
    if _gemm_part(total, op):
        return True
    prev = total.owner
    return (
        isinstance(prev, AddOp)
        and _same_block(prev, op.parent_block())
        and accumulates_in_place(prev)
    )


def accumulates_in_place(op: Operation) -> bool:
    """True when `op` is a `comp.add` marked `in_place` whose structure allows it
    (`accumulation_ok`): its part's GEMM added into the running sum, no add kernel runs."""
    return isinstance(op, AddOp) and _marked(op) and accumulation_ok(op)


def mark_accumulate(op: Operation) -> bool:
    """Mark `op` (a partial-sum `comp.add`) `in_place` when `accumulation_ok`; returns
    whether it did."""
    if not accumulation_ok(op):
        return False
    op.properties["in_place"] = BoolAttr.from_bool(True)
    return True
