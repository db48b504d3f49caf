"""Rebuild an FX graph in the order of its optimized IR (package doc)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import Graph, GraphModule, Node
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue

from lancet_mlir import attrs
from lancet_mlir.dialects.comm import CollectiveOp
from lancet_mlir.importers.torch import (
    FUNC_NAME,
    FX_NODE,
    is_collective,
    is_wait,
    result_indices,
)
from lancet_mlir.importers.torch.collectives import functional_name
from lancet_mlir.support.errors import UserError


class ExportError(UserError):
    """The optimized IR cannot be mapped back onto the FX graph."""


_C10D = torch.ops._c10d_functional
_COALESCED = {
    "all_reduce": _C10D.all_reduce_coalesced.default,
    "all_gather_into_tensor": _C10D.all_gather_into_tensor_coalesced.default,
    "reduce_scatter_tensor": _C10D.reduce_scatter_tensor_coalesced.default,
}


@dataclass(frozen=True)
class Fused:
    """A fused collective: the FX collectives it merges, in operand order."""

    members: tuple[Node, ...]
    group_size: int


Item = Node | Fused
"""One scheduled step: an FX node, or a fused collective."""


def step_block(module: ModuleOp) -> Block:
    """The body of the module's `@train_step`."""
    for op in module.body.block.ops:
        if isinstance(op, func.FuncOp) and op.sym_name.data == FUNC_NAME:
            return op.body.block
    raise ExportError(f"the module has no func.func @{FUNC_NAME} (import it with import_graph)")


def _fx_name(op: Operation) -> str | None:
    attr = op.attributes.get(FX_NODE)
    return attr.data if isinstance(attr, StringAttr) else None


def _data_key(node: Node) -> tuple[str, int] | None:
    """(producer name, result index) of a collective's data input (None: a coalesced
    collective's list of inputs; it is exported as its own node, never as a member)."""
    arg = node.args[0]
    if not isinstance(arg, Node):
        return None
    if arg.target is operator.getitem:
        source, index = arg.args
        assert isinstance(source, Node)
        return source.name, int(index)  # type: ignore[arg-type]
    return arg.name, 0


def _value_key(
    value: SSAValue, placeholders: Sequence[Node], by_name: dict[str, Node]
) -> tuple[str, int] | None:
    if isinstance(value, BlockArgument):
        return placeholders[value.index].name, 0
    if not isinstance(value, OpResult):
        return None
    name = _fx_name(value.op)
    if name is None or name not in by_name:
        return None
    return name, result_indices(by_name[name])[value.index]


def scheduled_nodes(gm: GraphModule, block: Block) -> list[Item]:
    """The FX nodes (and fused collectives) in the block's order."""
    by_name = {n.name: n for n in gm.graph.nodes}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    waiting: dict[tuple[str, str, int], list[Node]] = {}
    for node in gm.graph.nodes:
        key = _data_key(node) if is_collective(node) else None
        if key is not None:
            kind = functional_name(node) or ""
            waiting.setdefault((kind, *key), []).append(node)
    items: list[Item] = []
    for op in block.ops:
        if isinstance(op, func.ReturnOp) or attrs.IMPORT_GLUE in op.attributes:
            continue
        name = _fx_name(op)
        if name is not None:
            if name not in by_name:
                raise ExportError(f"{op.name}: FX node '{name}' is not in the graph")
            items.append(by_name[name])
            continue
        if isinstance(op, CollectiveOp):
            items.append(
                Fused(tuple(_members(op, placeholders, by_name, waiting)), op.group_size() or 1)
            )
            continue
        raise ExportError(f"{op.name}: no FX node stands for this op (unsupported rewrite)")
    return items


def _members(
    op: CollectiveOp,
    placeholders: Sequence[Node],
    by_name: dict[str, Node],
    waiting: dict[tuple[str, str, int], list[Node]],
) -> list[Node]:
    members = []
    for value in op.inputs:
        key = _value_key(value, placeholders, by_name)
        found = [
            candidates
            for (kind, *rest), candidates in waiting.items()
            if key is not None and tuple(rest) == key and candidates
        ]
        if not found:
            raise ExportError(f"{op.name}: a fused operand matches no FX collective")
        members.append(found[0].pop(0))
    return members


class _Builder:
    """Copies nodes into a new graph, each input before its first user."""

    def __init__(self, gm: GraphModule):
        self.old = gm.graph
        self.graph = Graph()
        self.env: dict[Node, Node] = {}

    def emit(self, node: Node) -> None:
        stack = [node]
        while stack:
            top = stack[-1]
            if top in self.env:
                stack.pop()
                continue
            missing = [i for i in top.all_input_nodes if i not in self.env]
            if missing:
                stack.extend(reversed(missing))
                continue
            stack.pop()
            self.env[top] = self.graph.node_copy(top, lambda n: self.env[n])

    def fused(self, members: Sequence[Node], size: int) -> None:
        for m in members:
            for i in m.all_input_nodes:
                self.emit(i)
        kind = functional_name(members[0]) or ""
        if kind in _COALESCED:
            self._coalesced(kind, members)
        elif kind == "all_to_all_single":
            self._fused_all_to_all(members, size)
        else:
            raise ExportError(f"cannot export a fused {kind}")

    def _coalesced(self, kind: str, members: Sequence[Node]) -> None:
        first = members[0]
        rest: tuple[Any, ...] = tuple(self._arg(a) for a in first.args[1:])
        inputs = [self.env[m.args[0]] for m in members]  # type: ignore[index]
        node = self.graph.call_function(_COALESCED[kind], (inputs, *rest))
        node.meta["val"] = [m.meta.get("val") for m in members]
        for k, m in enumerate(members):
            part = self.graph.call_function(operator.getitem, (node, k))
            part.meta["val"] = m.meta.get("val")
            self.env[m] = part

    def _fused_all_to_all(self, members: Sequence[Node], size: int) -> None:
        for m in members:
            if any(a is not None for a in m.args[1:3]):
                raise ExportError("cannot export a fused all-to-all with split sizes")
        group = members[0].args[3]
        g = self.graph
        aten = torch.ops.aten
        flat = [
            g.call_function(aten.reshape.default, (self.env[m.args[0]], [size, -1]))  # type: ignore[index]
            for m in members
        ]
        widths = [_numel(m) // size for m in members]
        cat = g.call_function(aten.cat.default, (flat, 1))
        line = g.call_function(aten.reshape.default, (cat, [-1]))
        splits = [sum(widths)] * size
        sent = g.call_function(_C10D.all_to_all_single.default, (line, splits, splits, group))
        done = g.call_function(_C10D.wait_tensor.default, (sent,))
        back = g.call_function(aten.reshape.default, (done, [size, -1]))
        parts = g.call_function(aten.split_with_sizes.default, (back, widths, 1))
        for k, m in enumerate(members):
            piece = g.call_function(operator.getitem, (parts, k))
            shape = list(m.meta["val"].shape)
            out = g.call_function(aten.reshape.default, (piece, shape))
            out.meta["val"] = m.meta.get("val")
            self.env[m] = out
            for user in m.users:
                if is_wait(user):
                    self.env[user] = out

    def _arg(self, arg: object) -> object:
        return self.env[arg] if isinstance(arg, Node) else arg


def _numel(node: Node) -> int:
    val = node.meta["val"]
    return int(val.numel())


def export_graph(
    gm: GraphModule,
    module: ModuleOp,
) -> GraphModule:
    """A new GraphModule computing what `gm` does, in the order of `module`'s schedule."""
    items = scheduled_nodes(gm, step_block(module))
    builder = _Builder(gm)
    nodes = list(gm.graph.nodes)
    for node in nodes:
        if node.op == "placeholder":
            builder.emit(node)
    for item in items:
        if isinstance(item, Fused):
            builder.fused(item.members, item.group_size)
        else:
            builder.emit(item)
    for node in nodes:  # what no op stands for and nothing reads (a bare wait), then the output
        if node.op != "output" and not node.users:
            builder.emit(node)
    output = next(n for n in reversed(nodes) if n.op == "output")
    builder.emit(output)
    builder.graph.lint()
    new = GraphModule(gm, builder.graph)
    new.recompile()
    return new
