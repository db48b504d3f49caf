"""`_c10d_functional` collectives of an FX graph -> `comm` ops.

`all_reduce`, `all_gather_into_tensor`, `reduce_scatter_tensor` (and their `_coalesced`
forms: one variadic comm op) and `all_to_all_single` map one to one; `wait_tensor` is folded
into the op (its result is the collective's). An all-to-all with equal splits is
`comm.all_to_all` (split 0, concat 0); with unequal static splits `comm.all_to_allv` between
two zero-cost glue ops that pad the rows into per-rank chunks of the largest split and back
(`lancet.fill` = the real rows / the padded rows, so it is costed at the bytes it sends);
data-dependent splits (unbacked SymInts) take the upper bound the shape environment proves
for each (fill 1: the worst case; `lancet.bound = "upper"` on the op and a note).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch.fx import Node
from xdsl.dialects.builtin import FloatAttr, StringAttr, TensorType, UnitAttr, f64
from xdsl.ir import Attribute, Operation, SSAValue

from lancet_mlir import attrs
from lancet_mlir.dialects import comm
from lancet_mlir.dialects.aten import AtenOp
from lancet_mlir.dialects.vocab import CollectiveKind
from lancet_mlir.importers.torch.values import SCALAR_INT, size_bound
from lancet_mlir.support.errors import UserError

FX_NODE = "lancet.fx_node"
"""String on an imported op: the FX node it stands for (a collective: the collective's)."""
BOUND = "lancet.bound"
"""String `upper` on a collective whose sizes are upper bounds of data-dependent ones."""

_NS = "_c10d_functional"
K = CollectiveKind
KINDS = {
    "all_reduce": K.ALLREDUCE,
    "all_reduce_coalesced": K.ALLREDUCE,
    "all_gather_into_tensor": K.ALLGATHER,
    "all_gather_into_tensor_coalesced": K.ALLGATHER,
    "reduce_scatter_tensor": K.REDUCE_SCATTER,
    "reduce_scatter_tensor_coalesced": K.REDUCE_SCATTER,
    "all_to_all_single": K.ALL_TO_ALL,
}
"""The `_c10d_functional` collectives and the kind each becomes."""
_REDUCTIONS = {"sum": "sum", "avg": "avg", "max": "max", "min": "min", "product": "prod"}


def functional_name(node: Node) -> str | None:
    """`all_reduce`, `wait_tensor`, ... for a `_c10d_functional` call, else None."""
    if node.op != "call_function":
        return None
    packet = getattr(node.target, "overloadpacket", None)
    schema = getattr(node.target, "_schema", None)
    if packet is None or schema is None or not schema.name.startswith(_NS + "::"):
        return None
    return packet.__name__


def is_collective(node: Node) -> bool:
    """True for a collective call (not its wait)."""
    return functional_name(node) in KINDS


def is_wait(node: Node) -> bool:
    """True for `_c10d_functional.wait_tensor`."""
    return functional_name(node) == "wait_tensor"


def _arg(node: Node, index: int, name: str) -> Any:
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[index] if index < len(node.args) else None


@dataclass
class Groups:
    """Resolves process-group names to rank groups for a world of `world` ranks."""

    world: int
    given: Mapping[str, Sequence[Sequence[int]]]
    notes: list[str]

    def property(self, name: str, size: int | None, where: str) -> comm.GroupsAttr | None:
        """The `groups` property of a collective on group `name` (None: all ranks)."""
        if name in self.given:
            groups = [list(g) for g in self.given[name]]
            if len(groups) == 1 and sorted(groups[0]) == list(range(self.world)):
                return None
            return comm.GroupsAttr(groups)
        if size is None:
            size = _c10d_size(name)
        if size is None:
            if name == "0":
                return None
            raise UserError(
                f"{where}: process group '{name}' is unknown: pass group_ranks={{'{name}': ...}}"
            )
        if size == self.world:
            return None
        if size < 1 or self.world % size:
            raise UserError(f"{where}: group size {size} does not divide the world of {self.world}")
        note = f"group '{name}' taken as consecutive blocks of {size} ranks"
        if note not in self.notes:
            self.notes.append(note)
        return comm.GroupsAttr([list(range(s, s + size)) for s in range(0, self.world, size)])


def _c10d_size(name: str) -> int | None:
    try:
        import torch.distributed.distributed_c10d as c10d

        resolve: Any = getattr(c10d, "_resolve_process_group")  # noqa: B009 - private API
        return int(resolve(name).size())
    except Exception:  # no such group in this process (a graph captured elsewhere)
        return None


def _f64(value: float) -> FloatAttr:
    return FloatAttr(float(value), f64)


def build_collective(
    node: Node,
    inputs: Sequence[SSAValue],
    result_types: Sequence[TensorType],
    groups: Groups,
    operands_of: Callable[[Node], list[SSAValue]],
) -> tuple[list[Operation], list[SSAValue]]:
    """The ops standing for collective `node` (in order) and the values of its results."""
    name = functional_name(node)
    assert name is not None
    kind = KINDS[name]
    where = f"FX node '{node.name}' ({name})"
    group_name = str(
        node.args[-1] if "group_name" not in node.kwargs else node.kwargs["group_name"]
    )
    size_arg = None
    if kind in (K.ALLGATHER, K.REDUCE_SCATTER):
        size_arg = int(_arg(node, 2 if kind == K.REDUCE_SCATTER else 1, "group_size"))
    group = groups.property(group_name, size_arg, where)
    props: dict[str, Attribute | None] = {"groups": group}
    if kind in (K.ALLREDUCE, K.REDUCE_SCATTER):
        op = str(_arg(node, 1, "reduce_op")).lower()
        if op not in _REDUCTIONS:
            raise UserError(f"{where}: unsupported reduction '{op}'")
        props["reduction"] = comm.ReductionAttr(comm.ReductionKind(_REDUCTIONS[op]))
    if kind == K.ALL_TO_ALL:
        return _all_to_all(node, inputs[0], result_types[0], props, where, groups, operands_of)
    cls = {
        K.ALLREDUCE: comm.AllReduceOp,
        K.ALLGATHER: comm.AllGatherOp,
        K.REDUCE_SCATTER: comm.ReduceScatterOp,
    }[kind]
    op = cls(list(inputs), list(result_types), props)
    op.attributes[FX_NODE] = StringAttr(node.name)
    return [op], list(op.results)


def _splits(value: Any) -> list[Any] | None:
    if value is None:
        return None
    return [v.meta.get("val") if isinstance(v, Node) else v for v in value]


def _all_to_all(
    node: Node,
    data: SSAValue,
    result_type: TensorType,
    props: dict[str, Attribute | None],
    where: str,
    groups: Groups,
    operands_of: Callable[[Node], list[SSAValue]],
) -> tuple[list[Operation], list[SSAValue]]:
    out_splits = _splits(_arg(node, 1, "output_split_sizes"))
    in_splits = _splits(_arg(node, 2, "input_split_sizes"))
    in_type = data.type
    assert isinstance(in_type, TensorType)
    rows = in_type.get_shape()[0]
    group = props["groups"]
    size = groups.world if group is None else len(group.rank_lists[0])  # type: ignore[union-attr]
    static = all(isinstance(s, int) for s in (in_splits or []) + (out_splits or []))
    even = static and all(
        splits is None or len(set(splits)) == 1 for splits in (in_splits, out_splits)
    )
    if even and rows % size == 0 and result_type == in_type:
        op = comm.AllToAllOp([data], [result_type], props)
        op.attributes[FX_NODE] = StringAttr(node.name)
        return [op], list(op.results)
    ins = [size_bound(s, where)[0] for s in in_splits or [rows // size] * size]
    outs = [size_bound(s, where)[0] for s in out_splits or [rows // size] * size]
    if len(ins) != size or len(outs) != size:
        raise UserError(f"{where}: {len(ins)} split sizes for a group of {size} ranks")
    chunk = max(1, *ins, *outs)
    rest = list(in_type.get_shape()[1:])
    element = in_type.get_element_type()
    chunks = TensorType(element, [size, chunk, *rest])
    counts = TensorType(SCALAR_INT.get_element_type(), [size])
    extra = [v for v in operands_of(node) if v is not data]
    glue = {attrs.TIME_US: _f64(0.0), attrs.IMPORT_GLUE: UnitAttr()}
    pack = AtenOp("lancet.pack_chunks", [data, *extra], [chunks, counts], glue)
    op = comm.AllToAllVOp(list(pack.results), [chunks, counts], props)
    op.attributes[FX_NODE] = StringAttr(node.name)
    if static:
        op.attributes[attrs.FILL] = _f64(sum(ins) / (size * chunk))
    else:
        op.attributes[BOUND] = StringAttr("upper")
        groups.notes.append(
            f"{node.name}: data-dependent split sizes taken at their upper bound {chunk} rows "
            "per rank"
        )
    unpack = AtenOp("lancet.unpack_chunks", list(op.results), [result_type], glue)
    return [pack, op, unpack], list(unpack.results)


__all__ = [
    "BOUND",
    "FX_NODE",
    "KINDS",
    "Groups",
    "build_collective",
    "functional_name",
    "is_collective",
    "is_wait",
]
