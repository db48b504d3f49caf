"""ATen ops that match a `comp` kernel: mm, bmm, softmax (and its gradient), tanh-GELU,
and the views that only relabel elements: `view` / `_unsafe_view` / `reshape` become
`comp.reshape`, `transpose` / `permute` / `t` become `comp.transpose` (with the node's shape
or permutation, so the partition library follows a split axis through them; they keep the
import's 0 FLOPs and 0 bytes, so their cost is unchanged).

A match keeps the kernel's semantics exactly (e.g. only `gelu(approximate='tanh')` is
`comp.gelu`; the erf form stays an `aten.op`), and its result type must be the node's:
anything else becomes the generic op.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.fx import Node
from xdsl.ir import Attribute, Operation, SSAValue

from lancet_mlir.dialects import comp
from lancet_mlir.dialects.kernels import KernelError


def _dim(node: Node, index: int) -> int:
    return int(node.args[index])  # type: ignore[arg-type]


_RESHAPES = frozenset({"view", "_unsafe_view", "reshape"})


def _out_shape(node: Node) -> tuple[int, ...] | None:
    val = node.meta.get("val")
    shape = getattr(val, "shape", None)
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None  # a symbolic size: no static reshape
    return tuple(int(d) for d in shape)


def _view_match(node: Node, name: str) -> tuple[str, dict[str, Any], list[int]] | None:
    """`comp.reshape` / `comp.transpose` of a view node (None: not one, or not static)."""
    src = node.args[0] if node.args else None
    rank = len(getattr(getattr(src, "meta", {}).get("val"), "shape", ()))
    if name in _RESHAPES:
        shape = _out_shape(node)
        return None if shape is None else ("reshape", {"shape": shape}, [0])
    perm = list(range(rank))
    if name == "transpose" and node.target is torch.ops.aten.transpose.int:
        a, b = (int(d) % rank for d in node.args[1:3])  # type: ignore[arg-type]
        perm[a], perm[b] = perm[b], perm[a]
    elif name == "permute":
        perm = [int(d) % rank for d in node.args[1]]  # type: ignore[union-attr]
    elif name == "t" and rank == 2:
        perm = [1, 0]
    else:
        return None
    return "transpose", {"perm": tuple(perm)}, [0]


def _match(node: Node) -> tuple[str, dict[str, Any], list[int]] | None:
    """(kernel, params, which node args are its inputs) of a matching ATen call."""
    packet = getattr(node.target, "overloadpacket", None)
    name = getattr(packet, "__name__", "")
    if name in _RESHAPES or name in ("transpose", "permute", "t"):
        return _view_match(node, name)
    if name == "mm":
        return "matmul", {}, [0, 1]
    if name == "bmm":
        return "batch_matmul", {}, [0, 1]
    if name == "_softmax" and node.args[2] is False:
        return "softmax", {"axis": _dim(node, 1)}, [0]
    if name == "_softmax_backward_data":
        return "softmax_dx", {"axis": _dim(node, 2)}, [0, 1]
    if name == "gelu" and node.kwargs.get("approximate", "none") == "tanh":
        return "gelu", {}, [0]
    return None


def kernel_op(
    node: Node,
    value_of: Mapping[Node, Mapping[int, SSAValue]],
    result_types: Sequence[Attribute],
    annotations: Mapping[str, Attribute],
) -> Operation | None:
    """The `comp` op of `node` when it matches a kernel, else None."""
    match = _match(node)
    if match is None:
        return None
    kernel, params, positions = match
    inputs: list[SSAValue] = []
    for i in positions:
        arg = node.args[i]
        produced = value_of.get(arg) if isinstance(arg, Node) else None
        if produced is None or list(produced) != [0]:
            return None
        inputs.append(produced[0])
    try:
        op = comp.build_op(kernel, inputs, params, dict(annotations))
    except KernelError:
        return None
    if [r.type for r in op.results] != list(result_types):
        return None
    return op
