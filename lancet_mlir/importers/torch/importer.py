"""FX GraphModule of ATen ops -> a `func.func` of `comm`, `comp` and `aten` ops."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from torch.fx import GraphModule, Node
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    UnitAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from lancet_mlir import attrs
from lancet_mlir.dialects.aten import AtenOp
from lancet_mlir.dialects.vocab import Role
from lancet_mlir.importers.torch.collectives import (
    FX_NODE,
    Groups,
    build_collective,
    is_collective,
    is_wait,
)
from lancet_mlir.importers.torch.costs import is_host_read, node_bytes, node_flops
from lancet_mlir.importers.torch.effects import node_effects
from lancet_mlir.importers.torch.kernels import kernel_op
from lancet_mlir.importers.torch.roles import infer_roles
from lancet_mlir.importers.torch.values import flat_values, value_type
from lancet_mlir.support.errors import UserError

FUNC_NAME = "train_step"


@dataclass
class ImportedGraph:
    """The imported module and what the import found out."""

    module: ModuleOp
    roles: dict[str, Role]
    """FX node name -> role."""
    notes: list[str] = field(default_factory=list)
    """Approximations made (upper bounds of data-dependent sizes, assumed groups)."""

    @property
    def body(self) -> Block:
        """The block of the step's function."""
        fn = self.module.body.block.first_op
        assert isinstance(fn, func.FuncOp)
        return fn.body.block


def _where(node: Node) -> str:
    return f"FX node '{node.name}' ({node.target})"


def _results(node: Node) -> list[tuple[int, Attribute]]:
    """(flat index, type) of each value a node produces."""
    if "val" not in node.meta:
        if not node.users and node.op == "call_function":
            return []  # a side effect (`_assert_async`, ...): an op with no result
        raise UserError(f"{_where(node)}: no meta['val'] (capture the graph with make_fx)")
    out = []
    for index, val in flat_values(node.meta["val"]):
        typed = value_type(val, _where(node))
        if typed is not None:
            out.append((index, typed[0]))
    return out


def result_indices(node: Node) -> list[int]:
    """The flat result index (in `meta['val']`) of each MLIR result of `node`'s op."""
    return [index for index, _ in _results(node)]


def import_fx(
    gm: GraphModule,
    *,
    world_size: int,
    group_ranks: Mapping[str, Sequence[Sequence[int]]] | None = None,
) -> ImportedGraph:
    """Import `gm` (module doc of `lancet_mlir.importers.torch`)."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise UserError(f"world_size must be a positive integer, got {world_size!r}")
    if not isinstance(gm, GraphModule):
        raise UserError(
            f"expected a torch.fx.GraphModule (capture the step with make_fx or "
            f"lancet_mlir.torch.capture), got {type(gm).__name__}"
        )
    graph = gm.graph
    groups = Groups(world_size, dict(group_ranks or {}), [])
    roles = infer_roles(graph, lambda n: is_collective(n) or is_wait(n))
    effects = node_effects(graph, is_wait)  # in-place writes and random draws keep their order
    values: dict[Node, dict[int, SSAValue]] = {}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    arg_types = []
    for node in placeholders:
        results = _results(node)
        if len(results) != 1:
            raise UserError(f"placeholder '{node.name}': expected one tensor or number")
        arg_types.append(results[0][1])
    block = Block(arg_types=arg_types)
    for node, arg in zip(placeholders, block.args, strict=True):
        values[node] = {0: arg}
        arg.name_hint = _hint(node.name)

    def operands_of(node: Node) -> list[SSAValue]:
        return [v for n in node.all_input_nodes for _, v in sorted(values.get(n, {}).items())]

    returned: list[SSAValue] = []
    for node in graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            returned = _outputs(node, values)
            continue
        if node.op == "call_function" and node.target is operator.getitem:
            source, index = node.args
            assert isinstance(source, Node)
            picked = values.get(source, {}).get(int(index))  # type: ignore[arg-type]
            values[node] = {} if picked is None else {0: picked}
            continue
        if is_wait(node):
            values[node] = dict(values[node.all_input_nodes[0]])
            continue
        if node.op not in ("call_function", "get_attr"):
            raise UserError(f"{_where(node)}: unsupported FX op '{node.op}' (use make_fx)")
        results = _results(node)
        types = [t for _, t in results]
        role = roles.get(node)
        if is_collective(node):
            ops, outs = build_collective(node, operands_of(node), types, groups, operands_of)  # type: ignore[arg-type]
            if role is not None:
                for op in ops:
                    op.attributes[attrs.ROLE] = StringAttr(role)
        else:
            ops = [_compute_op(node, operands_of(node), types, role, values)]
            outs = list(ops[0].results)
        if node in effects:
            named = ArrayAttr([StringAttr(e) for e in effects[node]])
            for op in ops:
                op.attributes[attrs.EFFECTS] = named
        block.add_ops(ops)
        values[node] = {index: v for (index, _), v in zip(results, outs, strict=True)}
        for v in outs:
            v.name_hint = _hint(node.name)
    block.add_op(func.ReturnOp(*returned))
    fn = func.FuncOp(FUNC_NAME, (arg_types, [v.type for v in returned]), Region(block))
    module = ModuleOp([fn], attributes={attrs.WORLD_SIZE: IntegerAttr(world_size, i64)})
    return ImportedGraph(module, {n.name: r for n, r in roles.items()}, groups.notes)


def _hint(name: str) -> str | None:
    return name if name[:1].isalpha() or name[:1] == "_" else None


def _compute_op(
    node: Node,
    operands: list[SSAValue],
    types: list[Attribute],
    role: str | None,
    values: Mapping[Node, Mapping[int, SSAValue]],
) -> Operation:
    annotations: dict[str, Attribute] = {FX_NODE: StringAttr(node.name)}
    if role is not None:
        annotations[attrs.ROLE] = StringAttr(role)
    if node.op == "get_attr":
        annotations[attrs.FLOPS] = FloatAttr(0.0, f64)
        annotations[attrs.BYTES] = FloatAttr(0.0, f64)
        return AtenOp("get_attr", [], types, annotations)
    annotations[attrs.FLOPS] = FloatAttr(node_flops(node), f64)
    annotations[attrs.BYTES] = FloatAttr(node_bytes(node), f64)
    if is_host_read(node):  # `.item()`: the host waits for it (sim/engine.py "Host syncs")
        annotations[attrs.HOST_SYNC] = UnitAttr()
    matched = kernel_op(node, values, types, annotations)
    if matched is not None:
        return matched
    return AtenOp(str(node.target), operands, types, annotations)


def _outputs(node: Node, values: Mapping[Node, Mapping[int, SSAValue]]) -> list[SSAValue]:
    out: list[SSAValue] = []

    def visit(arg: object) -> None:
        if isinstance(arg, Node):
            out.extend(v for _, v in sorted(values.get(arg, {}).items()))
        elif isinstance(arg, (list, tuple)):
            for a in arg:
                visit(a)
        elif isinstance(arg, dict):
            for a in arg.values():
                visit(a)

    visit(node.args[0])
    return out
