"""FLOPs and bytes of one ATen node, from its meta values.

FLOPs come from `torch.utils.flop_counter`'s registry (what `FlopCounterMode` counts: the
matmul-type ops; every other op counts 0), bytes are the node's input plus output tensor
bytes from `meta['val']`, and 0 for views (`view`, `t`, `transpose`, `detach`, ...: no kernel).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Node
from torch.utils.flop_counter import flop_registry

from lancet_mlir.importers.torch.values import flat_values, size_bound, tensor_nbytes

_VIEW_LIKE = frozenset(
    {"detach", "alias", "lift_fresh", "_unsafe_view", "view", "reshape", "expand", "squeeze",
     "unsqueeze", "t", "transpose", "permute", "split", "split_with_sizes", "unbind", "select",
     "slice", "chunk", "narrow", "as_strided", "view_as", "expand_as", "sym_size",
     "sym_numel", "sym_stride", "_local_scalar_dense"}
)  # fmt: skip


def _packet(target: Any) -> Any:
    return getattr(target, "overloadpacket", None)


def is_view(node: Node) -> bool:
    """True for ops that launch no kernel: views and aliases (and size queries)."""
    target = node.target
    if getattr(target, "is_view", False):
        return True
    packet = _packet(target)
    return packet is not None and packet.__name__ in _VIEW_LIKE


def is_host_read(node: Node) -> bool:
    """True for `aten._local_scalar_dense` (what `.item()` traces to): the host reads a GPU
    value, so it waits for the GPU work producing it (a host sync)."""
    packet = _packet(node.target)
    return packet is not None and packet.__name__ == "_local_scalar_dense"


def _meta(arg: Any) -> Any:
    if isinstance(arg, Node):
        return arg.meta.get("val")
    if isinstance(arg, (list, tuple)):
        return type(arg)(_meta(a) for a in arg)
    return arg


def node_flops(node: Node) -> float:
    """FLOPs of an ATen node as `FlopCounterMode` counts them (0 for unregistered ops)."""
    packet = _packet(node.target)
    count = flop_registry.get(packet) if packet is not None else None
    if count is None:
        return 0.0
    args = _meta(node.args)
    kwargs = {k: _meta(v) for k, v in node.kwargs.items()}
    flops = count(*args, **kwargs, out_val=node.meta.get("val"))
    if isinstance(flops, torch.SymInt):  # data-dependent sizes: at their upper bound
        return float(size_bound(flops, node.name)[0])
    return float(flops)


def node_bytes(node: Node) -> float:
    """Bytes an ATen node reads and writes (0 for views)."""
    if is_view(node):
        return 0.0
    total = 0
    for n in node.all_input_nodes:
        total += sum(tensor_nbytes(v) for _, v in flat_values(n.meta.get("val")))
    total += sum(tensor_nbytes(v) for _, v in flat_values(node.meta.get("val")))
    return float(total)


def is_tensor(val: Any) -> bool:
    """True for a (fake) tensor."""
    return isinstance(val, torch.Tensor)
