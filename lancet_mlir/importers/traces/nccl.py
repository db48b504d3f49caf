"""What an NCCL kernel of a trace does: collective kind, payload bytes and process group.

Newer Kineto traces carry `Collective name`, `In msg nelems`, `dtype` and the group's ranks in
the kernel's args; older ones name every NCCL kernel after its implementation
(`ncclKernel_SendRecv_...` even for all-to-all) and the type and size come from the enclosing
`nccl:*` annotation's `Input Dims` / `Input type` (reference/trace-notes.md).
"""

from __future__ import annotations

import json
import re
from math import prod
from typing import Any

KINDS = {
    "all_reduce": "allreduce",
    "allreduce": "allreduce",
    "allreduce_coalesced": "allreduce",
    "all_gather": "allgather",
    "allgather": "allgather",
    "_allgather_base": "allgather",
    "all_gather_into_tensor": "allgather",
    "allgather_into_tensor_coalesced": "allgather",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reducescatter": "reduce_scatter",
    "all_to_all": "all_to_all",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "send": "sendrecv",
    "recv": "sendrecv",
    "sendrecv": "sendrecv",
    "barrier": "barrier",
}
"""Names seen in traces (lower case, no `nccl:`) -> collective kind."""

COMM_DIALECT_KINDS = ("allreduce", "allgather", "reduce_scatter", "all_to_all")
"""Kinds that become `comm` ops; the others stay kernels marked as communication."""

_NAME_KIND = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "f32": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "float16": 2,
    "c10::half": 2,
    "bfloat16": 2,
    "c10::bfloat16": 2,
    "long int": 8,
    "int64": 8,
    "long": 8,
    "int": 4,
    "int32": 4,
    "int8": 1,
    "uint8": 1,
    "unsigned char": 1,
    "signed char": 1,
    "char": 1,
    "bool": 1,
    "int8_t": 1,
    "short int": 2,
    "int16": 2,
}


def is_nccl(name: str) -> bool:
    """Whether a kernel name is an NCCL kernel."""
    return "nccl" in name.lower()


def canonical(name: str) -> str | None:
    """The kind of a collective name (`nccl:all_to_all`, `allreduce`, `_allgather_base`)."""
    key = name.lower().removeprefix("nccl:").strip()
    return KINDS.get(key)


def kind_from_kernel(name: str) -> str | None:
    """The kind named by an NCCL kernel (`ncclKernel_AllReduce_RING_LL_Sum_float` -> allreduce);
    None for SendRecv and unknown names (their kind must come from elsewhere)."""
    m = _NAME_KIND.search(name)
    if not m:
        return None
    word = m.group(1).lower()
    kind = {
        "allreduce": "allreduce",
        "allgather": "allgather",
        "reducescatter": "reduce_scatter",
        "broadcast": "broadcast",
        "reduce": "reduce",
        "alltoall": "all_to_all",
    }.get(word)
    return kind


def dtype_bytes(name: Any) -> int:
    """Bytes of one element of a trace dtype name (4 if unknown)."""
    return DTYPE_BYTES.get(str(name).strip().lower(), 4)


def dims_bytes(dims: Any, types: Any) -> int:
    """Bytes of the tensors of an `Input Dims` / `Input type` pair (non-tensors skipped)."""
    if not isinstance(dims, list):
        return 0
    total = 0
    for k, d in enumerate(dims):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            t = types[k] if isinstance(types, list) and k < len(types) else "float"
            total += prod(d) * dtype_bytes(t)
    return total


def group_ranks(args: dict[str, Any]) -> tuple[int, ...] | None:
    """The process group's ranks from a kernel's args (`Process Group Ranks`), if given."""
    value = args.get("Process Group Ranks")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if isinstance(value, list) and value and all(isinstance(x, int) for x in value):
        return tuple(value)
    return None
