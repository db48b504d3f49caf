"""How one HLO collective becomes `comm` IR: groups, reduction, dimensions, tuple plumbing.

`lower` builds (without inserting) the comm op of a collective; `rewire` redirects the uses
of the HLO results (tuple values are taken apart at their `get_tuple_element` users). All
IR changes go through the `PatternRewriter` of the calling pattern, so the walker's worklist
stays consistent. Problems raise `UserError` naming the HLO op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    TupleType,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import InsertPoint

from lancet_mlir import attrs
from lancet_mlir.cost.hlo_costs import hlo_attr, hlo_int, hlo_kind, leaf_types
from lancet_mlir.dialects.collectives import kind_aliases
from lancet_mlir.dialects.comm import (
    AllGatherOp,
    AllReduceOp,
    AllToAllOp,
    CollectiveOp,
    GroupsAttr,
    ReduceScatterOp,
    ReductionAttr,
    ReductionKind,
)
from lancet_mlir.dialects.vocab import CollectiveKind
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.support.errors import UserError

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
"""HLO collective kinds (`hlo_kind`) the importer converts."""

UNSUPPORTED_COLLECTIVES = ("collective_permute", "collective_broadcast", "send", "recv")
"""HLO communication ops with no `comm` spelling: importing them as compute would hide
communication from the scheduler, so the importer rejects them."""

_REDUCTIONS = {
    "add": ReductionKind.SUM,
    "maximum": ReductionKind.MAX,
    "minimum": ReductionKind.MIN,
    "multiply": ReductionKind.PROD,
    "or": ReductionKind.MAX,  # boolean or == max over {0, 1}
    "and": ReductionKind.MIN,  # boolean and == min over {0, 1}
}


# ---- tuples ---------------------------------------------------------------------------------
def leaves(value: SSAValue, where: str) -> list[SSAValue]:
    """The tensors behind `value`: itself, or the operands of the `*.tuple` op that built it."""
    if not isinstance(value.type, TupleType):
        return [value]
    owner = value.owner
    if isinstance(owner, Operation) and hlo_kind(owner) == "tuple":
        return [leaf for v in owner.operands for leaf in leaves(v, where)]
    raise UserError(f"{where}: tuple operand is not built by a tuple op")


def rewire(
    rewriter: PatternRewriter, old_values: Sequence[SSAValue], new: Sequence[SSAValue], where: str
) -> None:
    """Make every use of `old_values` use the tensors `new` instead; tuple values are taken
    apart at their `get_tuple_element` users (which are erased)."""
    pos = 0
    for old in old_values:
        count = len(leaf_types(old.type))
        _rewire_one(rewriter, old, list(new[pos : pos + count]), where)
        pos += count
    if pos != len(new):
        raise UserError(f"{where}: {len(new)} results cannot replace {pos} tensors")


def _rewire_one(rewriter: PatternRewriter, old: SSAValue, new: list[SSAValue], where: str) -> None:
    if not isinstance(old.type, TupleType):
        rewriter.replace_all_uses_with(old, new[0])
        return
    sizes = [len(leaf_types(t)) for t in old.type.types.data]
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    for use in list(old.uses):
        user = use.operation
        index = hlo_int(user, "index") if hlo_kind(user) == "get_tuple_element" else None
        if index is None or not 0 <= index < len(sizes):
            raise UserError(f"{where}: tuple result used by '{op_display_name(user)}'")
        part = new[starts[index] : starts[index] + sizes[index]]
        _rewire_one(rewriter, user.results[0], part, where)
        rewriter.erase(user)


# ---- collectives ----------------------------------------------------------------------------
def replica_groups(op: Operation) -> GroupsAttr | None:
    """`replica_groups` as a comm groups attribute (None when empty: all ranks). The
    attribute is required (StableHLO and MHLO both declare it): a missing one is an error,
    not silently "all ranks"."""
    where = op_display_name(op)
    attr = hlo_attr(op, "replica_groups")
    if attr is None:
        raise UserError(f"{where}: missing replica_groups", op=op)
    if not isinstance(attr, DenseIntOrFPElementsAttr):
        raise UserError(f"{where}: unsupported replica_groups {attr}", op=op)
    shape = list(attr.get_shape() or ())
    values = [int(v) for v in attr.get_values()]
    if not values:
        return None
    width = shape[-1] if len(shape) == 2 else len(values)
    rows = [values[i : i + width] for i in range(0, len(values), width)]
    groups = [[r for r in row if r >= 0] for row in rows]  # XLA pads uneven groups with -1
    if len({len(g) for g in groups}) != 1:
        raise UserError(f"{where}: replica groups of different sizes are not supported", op=op)
    try:
        return GroupsAttr(groups)
    except Exception as exc:  # noqa: BLE001 - the attribute verifier names the problem
        raise UserError(f"{where}: bad replica_groups: {exc}", op=op) from exc


def _reduction(op: Operation) -> ReductionAttr:
    """The reduction of an all_reduce / reduce_scatter, read from its reduction region."""
    where = op_display_name(op)
    block = op.regions[0].blocks.first if op.regions else None
    terminator = block.last_op if block is not None else None
    if terminator is None or not terminator.operands:
        raise UserError(f"{where}: missing reduction region", op=op)
    owner = terminator.operands[0].owner
    name = hlo_kind(owner) if isinstance(owner, Operation) else None
    kind = _REDUCTIONS.get(name or "")
    if kind is None:
        what = op_display_name(owner) if isinstance(owner, Operation) else "a block argument"
        raise UserError(f"{where}: unsupported reduction '{what}'", op=op)
    assert isinstance(owner, Operation)
    assert block is not None
    # the region must be that one op on its two arguments (`add(mul(a, b), a)` is no sum)
    body = [o for o in block.ops if o is not terminator]
    if body != [owner] or sorted(id(v) for v in owner.operands) != sorted(
        id(a) for a in block.args
    ):
        raise UserError(
            f"{where}: unsupported reduction region (it must be one "
            f"{op_display_name(owner)} of its two arguments)",
            op=op,
        )
    if name in ("or", "and") and not _is_boolean(block.args[0].type):
        # max/min only equal or/and over {0, 1}: bitwise or/and of integers has no comm kind
        raise UserError(
            f"{where}: unsupported reduction '{op_display_name(owner)}' on "
            f"{block.args[0].type} (only booleans: i1)",
            op=op,
        )
    return ReductionAttr(kind)


def _is_boolean(t: Attribute) -> bool:
    element = t.element_type if isinstance(t, TensorType) else t
    return isinstance(element, IntegerType) and element.width.data == 1


def _required_int(op: Operation, name: str) -> int:
    """A dimension attribute the HLO op must carry (no silent default of 0)."""
    value = hlo_int(op, name)
    if value is None:
        raise UserError(f"{op_display_name(op)}: missing {name}", op=op)
    return value


@dataclass
class Lowered:
    """The ops replacing one HLO collective and the tensors replacing its results."""

    before: list[Operation]
    comm: CollectiveOp
    split: Operation | None
    results: list[SSAValue]


def lower(op: Operation, operands: list[SSAValue], result_types: list[Attribute]) -> Lowered:
    """Build (not insert) the comm op for HLO collective `op` on tensors `operands`."""
    where = op_display_name(op)
    for v in operands:
        if not isinstance(v.type, TensorType):
            raise UserError(f"{where}: operand of type {v.type} is not a tensor", op=op)
    kind = kind_aliases().get(hlo_kind(op) or "")  # all_reduce -> allreduce, ...
    groups = replica_groups(op)
    props: dict[str, Attribute | None] = {"groups": groups}
    if kind in (CollectiveKind.ALLREDUCE, CollectiveKind.REDUCE_SCATTER):
        props["reduction"] = _reduction(op)
    if kind == CollectiveKind.ALLREDUCE:
        comm: CollectiveOp = AllReduceOp(operands, result_types, props)
    elif kind == CollectiveKind.ALLGATHER:
        props["axis"] = IntegerAttr(_required_int(op, "all_gather_dim"), i64)
        comm = AllGatherOp(operands, result_types, props)
    elif kind == CollectiveKind.REDUCE_SCATTER:
        props["axis"] = IntegerAttr(_required_int(op, "scatter_dimension"), i64)
        comm = ReduceScatterOp(operands, result_types, props)
    elif hlo_attr(op, "split_dimension") is None:
        return _lower_array_all_to_all(op, operands, groups)
    else:
        split = _required_int(op, "split_dimension")
        concat = _required_int(op, "concat_dimension")
        count = hlo_int(op, "split_count")
        if groups is not None and count is not None and count != len(groups.rank_lists[0]):
            raise UserError(f"{where}: split_count {count} differs from the group size", op=op)
        props["split_axis"] = IntegerAttr(split, i64)
        props["concat_axis"] = IntegerAttr(concat, i64)
        comm = AllToAllOp(operands, result_types, props)
    comm.attributes[attrs.HLO_OP] = StringAttr(where)
    return Lowered([], comm, None, list(comm.results))


def _lower_array_all_to_all(
    op: Operation, operands: list[SSAValue], groups: GroupsAttr | None
) -> Lowered:
    """MHLO's array all-to-all (operand i -> rank i) as concat + all_to_all + split."""
    from lancet_mlir.dialects.comp import build_op

    where = op_display_name(op)
    size = len(groups.rank_lists[0]) if groups is not None else None
    if size is not None and len(operands) != size:
        raise UserError(f"{where}: {len(operands)} operands for a group of {size} ranks", op=op)
    if len({str(v.type) for v in operands}) != 1:
        raise UserError(f"{where}: array all-to-all operands must have one type", op=op)
    glue = {attrs.TIME_US: 0.0, attrs.IMPORT_GLUE: UnitAttr()}
    try:
        concat = build_op("concat", operands, {"axis": 0}, attrs=glue)
        joined = concat.results[0]
        comm = AllToAllOp([joined], [joined.type], {"groups": groups})
        split = build_op("split", [comm.results[0]], {"axis": 0, "num": len(operands)}, glue)
    except Exception as exc:  # noqa: BLE001 - unsupported element types etc.
        raise UserError(f"{where}: cannot express the array all-to-all: {exc}", op=op) from exc
    comm.attributes[attrs.HLO_OP] = StringAttr(where)
    return Lowered([concat], comm, split, list(split.results))


def insert_lowered(rewriter: PatternRewriter, lowered: Lowered, anchor: Operation) -> None:
    """Insert the lowered ops before `anchor` (the split goes in later: `place_split`)."""
    rewriter.insert([*lowered.before, lowered.comm], InsertPoint.before(anchor))


def place_split(rewriter: PatternRewriter, lowered: Lowered) -> None:
    """Insert the split glue just before the first op of the block that uses its results,
    so the compute stream waits for the exchange no earlier than XLA's order does."""
    split = lowered.split
    if split is None:
        return
    block = lowered.comm.parent_block()
    assert block is not None
    users = {_ancestor_in(block, use.operation) for r in lowered.results for use in r.uses}
    current = lowered.comm.next_op
    while current is not None and current not in users:
        current = current.next_op
    where = InsertPoint.after(lowered.comm) if current is None else InsertPoint.before(current)
    rewriter.insert(split, where)


def _ancestor_in(block: Block, op: Operation) -> Operation | None:
    current: Operation | None = op
    while current is not None and current.parent_block() is not block:
        current = current.parent_op()
    return current


def verify_comm(comm: CollectiveOp, where: str) -> None:
    """Verify a new comm op, reporting a failure against the HLO op it came from."""
    try:
        comm.verify()
    except Exception as exc:  # noqa: BLE001 - report the HLO op, not a comm traceback
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{where}: cannot import: {message}") from exc
