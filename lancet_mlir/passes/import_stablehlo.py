"""import-stablehlo: JAX/XLA StableHLO (generic form) -> `comm` collectives + costed compute.

Input: a module as JAX/XLA print it in generic form, parsed with unregistered ops allowed
(`lancet-opt --allow-unregistered-dialect`); `stablehlo.*` and `mhlo.*` spellings both work.

* `all_reduce`, `all_gather`, `reduce_scatter` and `all_to_all` become `comm.allreduce`,
  `comm.allgather`, `comm.reduce_scatter` and `comm.all_to_all`, at the same position, with
  the group from `replica_groups` (the `groups` property; none when the groups are empty,
  i.e. all ranks), the reduction from the reduction region (add -> sum, maximum -> max,
  minimum -> min, multiply -> prod; `or`/`and` on booleans -> max/min) and the dimensions
  (`all_gather_dim`, `scatter_dimension`, `split_dimension`/`concat_dimension`). Collectives
  with several operands, or tuple-typed operands/results (`*.tuple` producers,
  `get_tuple_element` users), become one variadic comm op.
* An async pair -- `*.async_start` holding the collective in its region (or naming it with
  `called_computation`, MHLO's form), optional `*.async_update`s, then `*.async_done` --
  becomes ONE comm op at the start's position: the collective launches at the start and its
  results are what the done returned. Async wrappers of anything else stay compute.
* MHLO's array all-to-all (N operands, no `split_dimension`: operand i goes to rank i) has
  no comm spelling; it becomes `comp.concat` (axis 0) + `comm.all_to_all` (split 0 concat 0)
  + `comp.split`, exactly equivalent. Both glue ops carry `lancet.time_us = 0.0` and
  `lancet.import_glue`, and the split sits just before the first user of the results, so
  the compute stream does not wait for the exchange any earlier than XLA's order does.
* Every other op stays as it is (compute), in input order, so XLA's own schedule can be
  simulated as given. Every StableHLO/MHLO compute op (also inside fusion, while and
  reduction bodies) gets `lancet.flops` / `lancet.bytes` (f64) for the roofline cost model:
  FLOPs are exact for `dot_general`, `dot` and `convolution`, one per result element for
  other arithmetic, and summed over the body of `mhlo.fusion`; bytes are what the op reads
  and writes (free ops -- constants, bitcasts, reshapes, tuples, sharding markers -- get 0).
  Calls and control flow carry the sum of their bodies (a while loop: one iteration).
* The module gets `lancet.world_size` (the option, else `mhlo.num_partitions` x
  `mhlo.num_replicas`, else the ranks the replica groups span) unless it already has one.

Options: `world-size=N` (overrides the module's `lancet.world_size`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from math import log2, prod

from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    TupleType,
    UnitAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass

from lancet_mlir.dialects.comm import (
    WORLD_SIZE_ATTR,
    AllGatherOp,
    AllReduceOp,
    AllToAllOp,
    CollectiveOp,
    GroupsAttr,
    ReduceScatterOp,
    ReductionAttr,
    ReductionKind,
    tensor_bytes,
)
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.passes.options import CheckedOptions, check_int
from lancet_mlir.support.errors import UserError

FLOPS_ATTR = "lancet.flops"
BYTES_ATTR = "lancet.bytes"
ORIGIN_ATTR = "lancet.hlo_op"
GLUE_ATTR = "lancet.import_glue"
ASYNC_ATTR = "lancet.hlo_async"

_HLO_DIALECTS = ("stablehlo", "mhlo")
_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
_REDUCTIONS = {
    "add": ReductionKind.SUM,
    "maximum": ReductionKind.MAX,
    "minimum": ReductionKind.MIN,
    "multiply": ReductionKind.PROD,
    "or": ReductionKind.MAX,  # boolean or == max over {0, 1}
    "and": ReductionKind.MIN,  # boolean and == min over {0, 1}
}
# Ops that neither compute nor move memory once XLA has laid out the buffers.
_FREE_OPS = frozenset(
    {
        "constant",
        "bitcast",
        "reshape",
        "tuple",
        "get_tuple_element",
        "optimization_barrier",
        "partition_id",
        "replica_id",
        "after_all",
        "create_token",
        "async_done",
        "async_update",
        "return",
    }
)
_FREE_CUSTOM_CALLS = frozenset(
    {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "annotate_device_placement"}
)
# Ops that only move data: bytes read + written, no FLOPs.
_MOVE_OPS = frozenset(
    {
        "broadcast_in_dim",
        "broadcast",
        "transpose",
        "slice",
        "dynamic_slice",
        "dynamic_update_slice",
        "concatenate",
        "pad",
        "gather",
        "copy",
        "iota",
        "convert",
        "reverse",
        "bitcast_convert",
        "custom_call",
    }
)
# Ops whose region is a scalar computation applied once per input element.
_SCALAR_BODY_OPS = frozenset({"reduce", "reduce_window", "sort", "scatter", "select_and_scatter", "map"})
# Ops whose regions are executed as graphs of their own (cost = cost of the body).
_CONTROL_OPS = frozenset({"while", "if", "case", "async_start"})
_WRAPPERS = frozenset({"sdy.manual_computation", "sdy.named_computation"})


# ---- small helpers --------------------------------------------------------------------------
def hlo_kind(op: Operation) -> str | None:
    """`all_reduce` for `stablehlo.all_reduce` / `mhlo.all_reduce`; None for other dialects."""
    dialect, _, name = op_display_name(op).partition(".")
    return name if dialect in _HLO_DIALECTS else None


def _where(op: Operation) -> str:
    return op_display_name(op)


def _get(op: Operation, name: str) -> Attribute | None:
    """An op's property or (older printers) attribute called `name`."""
    attr = op.properties.get(name)
    return attr if attr is not None else op.attributes.get(name)


def _int(op: Operation, name: str) -> int | None:
    attr = _get(op, name)
    if attr is None:
        return None
    if not isinstance(attr, IntegerAttr):
        raise UserError(f"{_where(op)}: '{name}' must be an integer, got {attr}")
    return attr.value.data


def _attr_text(attr: Attribute) -> str:
    """The parameter text of an (usually unregistered) attribute such as `#stablehlo.dot<...>`."""
    value = getattr(attr, "value", None)
    if isinstance(value, StringAttr):
        return value.data
    return str(attr)


def _dims(text: str, key: str) -> list[int]:
    match = re.search(rf"\b{key}\s*=\s*\[([-0-9,\s]*)\]", text)
    if match is None:
        return []
    return [int(x) for x in match.group(1).replace(" ", "").split(",") if x]


def _shape(value_type: Attribute) -> list[int] | None:
    if not isinstance(value_type, TensorType):
        return None
    shape = list(value_type.get_shape())
    return None if any(d < 0 for d in shape) else shape


def _leaf_types(ty: Attribute) -> list[Attribute]:
    """Tensor types of a (possibly nested) tuple type, in order."""
    if isinstance(ty, TupleType):
        return [leaf for t in ty.types.data for leaf in _leaf_types(t)]
    return [ty]


def _elements(ty: Attribute) -> int:
    return sum(prod(s) for t in _leaf_types(ty) if (s := _shape(t)) is not None)


def _io_bytes(op: Operation) -> float:
    types = [v.type for v in op.operands] + [r.type for r in op.results]
    return float(sum(tensor_bytes(leaf) for t in types for leaf in _leaf_types(t)))


# ---- tuples ---------------------------------------------------------------------------------
def _leaves(value: SSAValue, where: str) -> list[SSAValue]:
    """The tensors behind `value`: itself, or the operands of the `*.tuple` op that built it."""
    if not isinstance(value.type, TupleType):
        return [value]
    owner = value.owner
    if isinstance(owner, Operation) and hlo_kind(owner) == "tuple":
        return [leaf for v in owner.operands for leaf in _leaves(v, where)]
    raise UserError(f"{where}: tuple operand is not built by a tuple op")


def _rewire(old_values: Sequence[SSAValue], leaves: Sequence[SSAValue], where: str) -> None:
    """Make every use of `old_values` use `leaves` instead; tuple values are taken apart at
    their `get_tuple_element` users (which are erased)."""
    pos = 0
    for old in old_values:
        count = len(_leaf_types(old.type))
        _rewire_one(old, list(leaves[pos : pos + count]), where)
        pos += count
    if pos != len(leaves):
        raise UserError(f"{where}: {len(leaves)} results cannot replace {pos} tensors")


def _rewire_one(old: SSAValue, leaves: list[SSAValue], where: str) -> None:
    if not isinstance(old.type, TupleType):
        old.replace_all_uses_with(leaves[0])
        return
    sizes = [len(_leaf_types(t)) for t in old.type.types.data]
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    for use in list(old.uses):
        user = use.operation
        index = _int(user, "index") if hlo_kind(user) == "get_tuple_element" else None
        if index is None or not 0 <= index < len(sizes):
            raise UserError(f"{where}: tuple result used by '{_where(user)}'")
        _rewire_one(user.results[0], leaves[starts[index] : starts[index] + sizes[index]], where)
        user.detach()
        user.erase()


# ---- collectives ----------------------------------------------------------------------------
def _groups(op: Operation) -> GroupsAttr | None:
    """`replica_groups` as a comm groups attribute (None when empty: all ranks)."""
    attr = _get(op, "replica_groups")
    if attr is None:
        return None
    if not isinstance(attr, DenseIntOrFPElementsAttr):
        raise UserError(f"{_where(op)}: unsupported replica_groups {attr}")
    shape = list(attr.get_shape() or ())
    values = [int(v) for v in attr.get_values()]
    if not values:
        return None
    width = shape[-1] if len(shape) == 2 else len(values)
    rows = [values[i : i + width] for i in range(0, len(values), width)]
    groups = [[r for r in row if r >= 0] for row in rows]  # XLA pads uneven groups with -1
    if len({len(g) for g in groups}) != 1:
        raise UserError(f"{_where(op)}: replica groups of different sizes are not supported")
    try:
        return GroupsAttr(groups)
    except Exception as exc:  # noqa: BLE001 - the attribute verifier names the problem
        raise UserError(f"{_where(op)}: bad replica_groups: {exc}") from exc


def _reduction(op: Operation) -> ReductionAttr:
    """The reduction of an all_reduce / reduce_scatter, read from its reduction region."""
    block = op.regions[0].blocks.first if op.regions else None
    terminator = block.last_op if block is not None else None
    if terminator is None or not terminator.operands:
        raise UserError(f"{_where(op)}: missing reduction region")
    owner = terminator.operands[0].owner
    name = hlo_kind(owner) if isinstance(owner, Operation) else None
    kind = _REDUCTIONS.get(name or "")
    if kind is None:
        what = _where(owner) if isinstance(owner, Operation) else "a block argument"
        raise UserError(f"{_where(op)}: unsupported reduction '{what}'")
    return ReductionAttr(kind)


@dataclass
class _Lowered:
    """The ops replacing one HLO collective and the tensors replacing its results."""

    before: list[Operation]
    comm: CollectiveOp
    split: Operation | None
    results: list[SSAValue]


def _lower(op: Operation, operands: list[SSAValue], result_types: list[Attribute]) -> _Lowered:
    """Build (not insert) the comm op for HLO collective `op` on tensors `operands`."""
    where = _where(op)
    for v in operands:
        if not isinstance(v.type, TensorType):
            raise UserError(f"{where}: operand of type {v.type} is not a tensor")
    kind = hlo_kind(op)
    groups = _groups(op)
    props: dict[str, Attribute | None] = {"groups": groups}
    if kind in ("all_reduce", "reduce_scatter"):
        props["reduction"] = _reduction(op)
    if kind == "all_reduce":
        comm: CollectiveOp = AllReduceOp(operands, result_types, props)
    elif kind == "all_gather":
        props["axis"] = IntegerAttr(_int(op, "all_gather_dim") or 0, i64)
        comm = AllGatherOp(operands, result_types, props)
    elif kind == "reduce_scatter":
        props["axis"] = IntegerAttr(_int(op, "scatter_dimension") or 0, i64)
        comm = ReduceScatterOp(operands, result_types, props)
    elif _get(op, "split_dimension") is None:
        return _lower_array_all_to_all(op, operands, groups)
    else:
        split, concat = _int(op, "split_dimension") or 0, _int(op, "concat_dimension") or 0
        count = _int(op, "split_count")
        if groups is not None and count is not None and count != len(groups.rank_lists[0]):
            raise UserError(f"{where}: split_count {count} differs from the group size")
        props["split_axis"] = IntegerAttr(split, i64)
        props["concat_axis"] = IntegerAttr(concat, i64)
        comm = AllToAllOp(operands, result_types, props)
    comm.attributes[ORIGIN_ATTR] = StringAttr(op_display_name(op))
    return _Lowered([], comm, None, list(comm.results))


def _lower_array_all_to_all(
    op: Operation, operands: list[SSAValue], groups: GroupsAttr | None
) -> _Lowered:
    """MHLO's array all-to-all (operand i -> rank i) as concat + all_to_all + split."""
    from lancet_mlir.dialects.comp import build_op

    where = _where(op)
    size = len(groups.rank_lists[0]) if groups is not None else None
    if size is not None and len(operands) != size:
        raise UserError(f"{where}: {len(operands)} operands for a group of {size} ranks")
    if len({str(v.type) for v in operands}) != 1:
        raise UserError(f"{where}: array all-to-all operands must have one type")
    glue = {"lancet.time_us": 0.0, GLUE_ATTR: UnitAttr()}
    try:
        concat = build_op("concat", operands, {"axis": 0}, attrs=glue)
        joined = concat.results[0]
        comm = AllToAllOp([joined], [joined.type], {"groups": groups})
        split = build_op("split", [comm.results[0]], {"axis": 0, "num": len(operands)}, glue)
    except Exception as exc:  # noqa: BLE001 - unsupported element types etc.
        raise UserError(f"{where}: cannot express the array all-to-all: {exc}") from exc
    comm.attributes[ORIGIN_ATTR] = StringAttr(op_display_name(op))
    return _Lowered([concat], comm, split, list(split.results))


def _insert(lowered: _Lowered, anchor: Operation) -> None:
    """Insert the lowered ops before `anchor` (the split goes in later, see `_place_split`)."""
    block = anchor.parent_block()
    assert block is not None
    for new in (*lowered.before, lowered.comm):
        block.insert_op_before(new, anchor)


def _place_split(lowered: _Lowered) -> None:
    """Insert the split glue just before the first op of the block that uses its results."""
    split = lowered.split
    if split is None:
        return
    block = lowered.comm.parent_block()
    assert block is not None
    users = {_ancestor_in(block, use.operation) for r in lowered.results for use in r.uses}
    current = lowered.comm.next_op
    while current is not None and current not in users:
        current = current.next_op
    if current is None:
        block.insert_op_after(split, lowered.comm)
    else:
        block.insert_op_before(split, current)


def _ancestor_in(block: Block, op: Operation) -> Operation | None:
    current: Operation | None = op
    while current is not None and current.parent_block() is not block:
        current = current.parent_op()
    return current


def _verify_comm(comm: CollectiveOp, where: str) -> None:
    try:
        comm.verify()
    except Exception as exc:  # noqa: BLE001 - report the HLO op, not a comm traceback
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{where}: cannot import: {message}") from exc


# ---- async pairs ----------------------------------------------------------------------------
@dataclass
class _AsyncBody:
    """The collective wrapped by an async_start and how its values map to the outside."""

    collective: Operation
    operands: list[SSAValue]
    result_order: list[int]
    callee: str | None


def _async_body(start: Operation, funcs: dict[str, Operation]) -> _AsyncBody | None:
    """The single collective an async_start wraps, or None when it wraps anything else."""
    callee_attr = _get(start, "called_computation")
    callee = None
    if start.regions and start.regions[0].blocks.first is not None:
        block = start.regions[0].blocks.first
    elif isinstance(callee_attr, SymbolRefAttr):
        callee = callee_attr.root_reference.data
        func = funcs.get(callee)
        if func is None:
            raise UserError(f"{_where(start)}: called computation @{callee} not found")
        block = func.regions[0].blocks.first
    else:
        return None
    if block is None:
        return None
    ops = list(block.ops)
    collectives = [o for o in ops if hlo_kind(o) in _COLLECTIVES]
    others = [o for o in ops[:-1] if o not in collectives and hlo_kind(o) != "tuple"]
    if len(collectives) != 1 or others:
        return None
    collective = collectives[0]
    outer = list(start.operands)
    operands: list[SSAValue] = []
    for v in collective.operands:
        if isinstance(v, BlockArgument) and v.block is block:
            v = outer[v.index]
        elif isinstance(v.owner, Operation) and v.owner.parent_block() is block:
            return None  # computed inside the wrapper: not a plain collective
        operands.extend(_leaves(v, _where(start)))
    flat_results = list(collective.results)
    order: list[int] = []
    for v in ops[-1].operands:
        for leaf in _inner_leaves(v, block, _where(start)):
            if leaf not in flat_results:
                raise UserError(f"{_where(start)}: wrapped region returns a non-collective value")
            order.append(flat_results.index(leaf))
    return _AsyncBody(collective, operands, order, callee)


def _inner_leaves(value: SSAValue, block: Block, where: str) -> list[SSAValue]:
    owner = value.owner
    if isinstance(owner, Operation) and owner.parent_block() is block and hlo_kind(owner) == "tuple":
        return [leaf for v in owner.operands for leaf in _inner_leaves(v, block, where)]
    return [value]


def _async_chain(start: Operation) -> tuple[list[Operation], Operation]:
    """(async_update ops, async_done op) following the start's token."""
    where = _where(start)
    if len(start.results) != 1:
        raise UserError(f"{where}: expected one async token result")
    updates: list[Operation] = []
    token = start.results[0]
    while True:
        users = [use.operation for use in token.uses]
        if len(users) != 1:
            raise UserError(f"{where}: async token must have exactly one user, has {len(users)}")
        user = users[0]
        kind = hlo_kind(user)
        if kind == "async_done":
            return updates, user
        if kind != "async_update":
            raise UserError(f"{where}: async token used by '{_where(user)}'")
        updates.append(user)
        token = user.results[0]


def _convert_async(start: Operation, funcs: dict[str, Operation]) -> str | None:
    """Replace an async pair wrapping a collective by one comm op at the start's position.

    Returns the called computation's name (if any) when converted, '' for the region form,
    None when the pair wraps something other than one collective (left as compute).
    """
    body = _async_body(start, funcs)
    if body is None:
        return None
    updates, done = _async_chain(start)
    if done.parent_block() is not start.parent_block():
        raise UserError(f"{_where(start)}: async_done is in a different block")
    inner_types = [leaf for r in body.collective.results for leaf in _leaf_types(r.type)]
    lowered = _lower(body.collective, body.operands, inner_types)
    _insert(lowered, start)
    results = [lowered.results[i] for i in body.result_order]
    _rewire(list(done.results), results, _where(done))
    lowered.comm.attributes[ASYNC_ATTR] = UnitAttr()
    for op in (done, *reversed(updates), start):
        op.detach()
        op.erase()
    _place_split(lowered)
    _verify_comm(lowered.comm, _where(body.collective))
    return body.callee or ""


def _convert_plain(op: Operation) -> None:
    """Replace one (synchronous) HLO collective by its comm op, in place."""
    where = _where(op)
    operands = [leaf for v in op.operands for leaf in _leaves(v, where)]
    types = [leaf for r in op.results for leaf in _leaf_types(r.type)]
    lowered = _lower(op, operands, types)
    _insert(lowered, op)
    _rewire(list(op.results), lowered.results, where)
    op.detach()
    op.erase()
    _place_split(lowered)
    _verify_comm(lowered.comm, where)


# ---- costs ----------------------------------------------------------------------------------
class _Costs:
    """FLOP/byte estimates of HLO ops; callee costs memoized by symbol name."""

    def __init__(self, funcs: dict[str, Operation]):
        self.funcs = funcs
        self._callee: dict[str, tuple[float, float]] = {}

    def node(self, op: Operation) -> tuple[float, float] | None:
        """(FLOPs, bytes) of `op` as one node of its block's graph; None for ops of other
        dialects (the cost model's own rules apply to them)."""
        name = op_display_name(op)
        kind = hlo_kind(op)
        if name == "func.call" or name in _WRAPPERS or kind in _CONTROL_OPS:
            return self._nested(op)
        if kind is None:
            return None
        if self._is_free(op, kind):
            return 0.0, 0.0
        return self.flops(op), _io_bytes(op)

    def flops(self, op: Operation) -> float:
        """FLOPs of `op` (exact for dot/dot_general/convolution, estimates otherwise)."""
        kind = hlo_kind(op) or ""
        if kind == "dot_general":
            return dot_general_flops(op)
        if kind == "dot":
            return dot_flops(op)
        if kind == "convolution":
            return convolution_flops(op)
        if kind == "fusion":
            return sum(self.flops(inner) for inner in _body_ops(op))
        if kind in _SCALAR_BODY_OPS:
            return self._scalar_body_flops(op, kind)
        if kind in _FREE_OPS or kind in _MOVE_OPS or kind in _CONTROL_OPS:
            return 0.0
        return float(sum(_elements(r.type) for r in op.results))

    def _scalar_body_flops(self, op: Operation, kind: str) -> float:
        """(ops in the scalar body) x (number of times the body is applied)."""
        per_application = sum(1 for inner in _body_ops(op) if hlo_kind(inner) not in _FREE_OPS)
        if kind == "reduce_window":
            window = prod(_array(op, "window_dimensions") or [1])
            applications = float(sum(_elements(r.type) for r in op.results) * window)
        elif kind in ("scatter", "select_and_scatter"):
            applications = float(_elements(op.operands[-1 if kind == "scatter" else 1].type))
        else:
            applications = float(_elements(op.operands[0].type))
        if kind == "sort":
            shape = _shape(op.operands[0].type) or [1]
            axis = _int(op, "dimension") or 0
            applications *= log2(max(shape[axis] if axis < len(shape) else 1, 2))
        return per_application * applications

    def _is_free(self, op: Operation, kind: str) -> bool:
        if kind in _FREE_OPS:
            return True
        if kind == "custom_call":
            target = _get(op, "call_target_name")
            return isinstance(target, StringAttr) and target.data in _FREE_CUSTOM_CALLS
        return False

    def _nested(self, op: Operation) -> tuple[float, float]:
        """Cost of a call / control-flow op: the sum of its body (max over if/case branches)."""
        if op_display_name(op) == "func.call":
            callee = _get(op, "callee")
            name = callee.root_reference.data if isinstance(callee, SymbolRefAttr) else ""
            return self.callee(name)
        per_region = [self._block_sum(b) for r in op.regions for b in r.blocks]
        if not per_region:
            return 0.0, 0.0
        if hlo_kind(op) in ("if", "case"):
            return max(per_region)
        return sum(c[0] for c in per_region), sum(c[1] for c in per_region)

    def callee(self, name: str) -> tuple[float, float]:
        """Cost of calling function `name` (0 if unknown)."""
        if name in self._callee:
            return self._callee[name]
        self._callee[name] = (0.0, 0.0)  # recursion guard
        func = self.funcs.get(name)
        blocks = list(func.regions[0].blocks) if func is not None and func.regions else []
        costs = [self._block_sum(b) for b in blocks]
        self._callee[name] = (sum(c[0] for c in costs), sum(c[1] for c in costs))
        return self._callee[name]

    def _block_sum(self, block: Block) -> tuple[float, float]:
        flops = nbytes = 0.0
        for op in block.ops:
            cost = None if isinstance(op, CollectiveOp) else self.node(op)
            if cost is not None:
                flops += cost[0]
                nbytes += cost[1]
        return flops, nbytes


def _body_ops(op: Operation) -> Iterable[Operation]:
    for region in op.regions:
        for block in region.blocks:
            yield from block.ops


def _array(op: Operation, name: str) -> list[int] | None:
    attr = _get(op, name)
    if attr is None:
        return None
    values = getattr(attr, "get_values", None)
    return [int(v) for v in values()] if values is not None else None


def dot_general_flops(op: Operation) -> float:
    """2 x (result elements) x (product of the lhs contracting dimension sizes)."""
    dims = _get(op, "dot_dimension_numbers")
    lhs = _shape(op.operands[0].type)
    if dims is None or lhs is None or not op.results:
        return 0.0
    contracting = _dims(_attr_text(dims), "lhs_contracting_dimensions")
    return 2.0 * _elements(op.results[0].type) * prod(lhs[d] for d in contracting)


def dot_flops(op: Operation) -> float:
    """`stablehlo.dot` contracts the last lhs dimension: 2 x (result elements) x K."""
    lhs = _shape(op.operands[0].type)
    if not lhs or not op.results:
        return 0.0
    return 2.0 * _elements(op.results[0].type) * lhs[-1]


def convolution_flops(op: Operation) -> float:
    """2 x (result elements) x (kernel elements / output features) multiply-adds."""
    kernel = _shape(op.operands[1].type) if len(op.operands) > 1 else None
    if not kernel or not op.results:
        return 0.0
    out_dim = len(kernel) - 1
    numbers = _get(op, "dimension_numbers")
    if numbers is not None:
        layout = re.search(r"x\s*\[([^\]]*)\]", _attr_text(numbers))
        letters = [s.strip() for s in layout.group(1).split(",")] if layout else []
        if "o" in letters:
            out_dim = letters.index("o")
        elif (k := _int_in(_attr_text(numbers), "kernel_output_feature_dimension")) is not None:
            out_dim = k
    return 2.0 * _elements(op.results[0].type) * prod(kernel) / max(kernel[out_dim], 1)


def _int_in(text: str, key: str) -> int | None:
    match = re.search(rf"\b{key}\s*=\s*(\d+)", text)
    return int(match.group(1)) if match else None


def _annotate(block: Block, costs: _Costs) -> int:
    """Set lancet.flops/lancet.bytes on every HLO compute op of `block` and of every block
    nested in its ops; returns how many ops were annotated.

    Ops nested in fusions and reduction regions are costed as if they ran alone: their
    enclosing op already carries the cost of the whole body, and the numbers only matter to
    passes that schedule such a region on its own (without them the cost model would warn).
    """
    count = 0
    last = block.last_op
    for op in block.ops:
        if isinstance(op, CollectiveOp) or (op is last and _is_terminator(op)):
            continue
        cost = costs.node(op) if "lancet.time_us" not in op.attributes else None
        if cost is not None:
            op.attributes[FLOPS_ATTR] = FloatAttr(cost[0], f64)
            op.attributes[BYTES_ATTR] = FloatAttr(cost[1], f64)
            count += 1
        for region in op.regions:
            for inner in region.blocks:
                count += _annotate(inner, costs)
    return count


def _is_terminator(op: Operation) -> bool:
    name = op_display_name(op)
    return name.endswith(".return") or name == "func.return" or name.endswith(".yield")


# ---- driver ---------------------------------------------------------------------------------
@dataclass
class ImportSummary:
    """What `import_stablehlo` did."""

    collectives: dict[str, int] = field(default_factory=dict)
    """Comm ops created, by comm kind (`allreduce`, ...), in first-seen order."""
    async_pairs: int = 0
    glue_ops: int = 0
    annotated_ops: int = 0
    world_size: int | None = None


def _functions(module: ModuleOp) -> dict[str, Operation]:
    funcs: dict[str, Operation] = {}
    for op in module.body.block.ops:
        sym = op.properties.get("sym_name") or op.attributes.get("sym_name")
        if op_display_name(op) == "func.func" and isinstance(sym, StringAttr):
            funcs[sym.data] = op
    return funcs


def _world_size(module: ModuleOp, collectives: Sequence[Operation], override: int | None) -> int | None:
    if override is not None:
        return override
    existing = module.attributes.get(WORLD_SIZE_ATTR)
    if isinstance(existing, IntegerAttr):
        return existing.value.data
    parts = module.attributes.get("mhlo.num_partitions")
    replicas = module.attributes.get("mhlo.num_replicas")
    if isinstance(parts, IntegerAttr) or isinstance(replicas, IntegerAttr):
        p = parts.value.data if isinstance(parts, IntegerAttr) else 1
        r = replicas.value.data if isinstance(replicas, IntegerAttr) else 1
        return p * r
    # groups [[0, 1], [2, 3]] are groups of 2 in a world of 4: the world spans every rank named
    spans = [
        max(r for group in g.rank_lists for r in group) + 1
        for op in collectives
        if (g := _groups(op)) is not None
    ]
    return max(spans) if spans else None


def _referenced_symbols(module: ModuleOp) -> set[str]:
    names: set[str] = set()
    stack: list[Attribute] = []
    for op in module.walk():
        stack.extend(op.properties.values())
        stack.extend(op.attributes.values())
    while stack:
        attr = stack.pop()
        if isinstance(attr, SymbolRefAttr):
            names.add(attr.root_reference.data)
        elif isinstance(attr, ArrayAttr):
            stack.extend(attr.data)
        elif isinstance(attr, DictionaryAttr):
            stack.extend(attr.data.values())
    return names


def import_stablehlo(module: ModuleOp, world_size: int | None = None) -> ImportSummary:
    """Rewrite `module` in place (see the module docstring); returns a summary."""
    summary = ImportSummary()
    funcs = _functions(module)
    ops = list(module.walk())
    starts = [op for op in ops if hlo_kind(op) == "async_start"]
    collectives = [op for op in ops if hlo_kind(op) in _COLLECTIVES]
    summary.world_size = _world_size(module, collectives, world_size)
    if summary.world_size is not None:
        module.attributes[WORLD_SIZE_ATTR] = IntegerAttr(summary.world_size, i64)

    callees: list[str] = []
    for start in starts:
        converted = _convert_async(start, funcs)
        if converted is None:
            continue
        summary.async_pairs += 1
        if converted:
            callees.append(converted)
    if callees:
        referenced = _referenced_symbols(module)
        for name in dict.fromkeys(callees):
            if name not in referenced and name in funcs:
                dead = funcs.pop(name)
                dead.detach()
                dead.erase()

    for op in [op for op in module.walk() if hlo_kind(op) in _COLLECTIVES]:
        _convert_plain(op)

    for op in module.walk():
        if isinstance(op, CollectiveOp):
            summary.collectives[op.KIND] = summary.collectives.get(op.KIND, 0) + 1
        elif GLUE_ATTR in op.attributes:
            summary.glue_ops += 1
    costs = _Costs(_functions(module))
    for func in _functions(module).values():
        for region in func.regions:
            for block in region.blocks:
                summary.annotated_ops += _annotate(block, costs)
    return summary


def graph_block(module: ModuleOp) -> Block:
    """The block holding the training step: the most collectives, then the most ops.

    For JAX output this is the body of `sdy.manual_computation` (shard_map), of the
    shard_map body function (GSPMD) or of `main` (XLA-compiled modules).
    """
    best: tuple[int, int] = (-1, -1)
    chosen: Block | None = None
    for op in module.walk():
        for region in op.regions:
            for block in region.blocks:
                n_ops = n_comm = 0
                for inner in block.ops:
                    n_ops += 1
                    n_comm += isinstance(inner, CollectiveOp)
                if (n_comm, n_ops) > best:
                    best, chosen = (n_comm, n_ops), block
    if chosen is None:
        raise UserError("module has no block")
    return chosen


@dataclass(frozen=True)
class ImportStablehloPass(CheckedOptions, ModulePass):
    """Turn JAX/XLA StableHLO collectives into `comm` ops and annotate compute costs.

    See the module docstring for the mapping. Run it first in a pipeline, e.g.
    `lancet-opt --allow-unregistered-dialect -p import-stablehlo,data-parallel-schedule`.

    Options:
      world-size=N: the module's `lancet.world_size` (default: mhlo.num_partitions x
        mhlo.num_replicas, else the ranks the replica groups span: highest rank + 1).
    """

    name = "import-stablehlo"
    world_size: int | None = None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.world_size is not None:
            check_int(self.name, "world-size", self.world_size, 1)
        import_stablehlo(op, self.world_size)
