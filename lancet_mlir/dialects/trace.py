"""The `trace` dialect: GPU activities of an imported profiler trace (importers/traces).

```mlir
%t = trace.kernel %a, %b {name = "volta_sgemm_128x64_nn", lancet.time_us = 8.0 : f64, ...} : (!trace.token, !trace.token) -> !trace.token
%p = trace.payload %t : (!trace.token) -> tensor<24576xi8>
%s = trace.host_sync %t {lancet.time_us = 0.0 : f64} : (!trace.token) -> !trace.token
```

Every op is compute as far as the cost model goes (its `lancet.time_us` is the measured
duration); `trace.payload` turns dependency tokens (all of a collective's dependencies) into the
tensor a `comm` collective takes: it is bookkeeping, not GPU work, so it costs nothing and, like
a host sync, takes no stream and no launch (a virtual node, sim/engine.py "Virtual nodes"). `trace.host_sync` is a host synchronisation (`cudaStreamSynchronize`,
`cudaDeviceSynchronize`, an event sync, a synchronous copy): the host waits until its operands
(the awaited GPU ops) have ended; it takes no GPU stream and costs nothing, and the ops the host
launches after it take its token (sim/engine.py "Host syncs"). The SSA edges are the step's
dependencies: stream order, event waits, host syncs and, with an execution trace, tensor data
dependencies.

`is_host_sync`, `is_virtual`, `copy_queue` and `opaque_comm_kind` are the typed readers the
dataflow layer uses: a host sync is a `trace.host_sync` or any op marked `lancet.host_sync` (the
PyTorch importer's `.item()`); a virtual node is a `trace.payload`; a copy's queue (host to
device, device to host, or the rest) comes from its Kineto name; an NCCL kernel with no `comm`
op (`lancet.trace_comm`: broadcast, send/recv, ...) is a collective of an opaque kind, which
runs on a communication stream with its measured time and is never fused.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerAttr, StringAttr, TensorType
from xdsl.ir import Dialect, Operation, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    result_def,
    var_operand_def,
)

from lancet_mlir import attrs
from lancet_mlir.dialects.vocab import CopyQueue


@irdl_attr_definition
class TokenType(ParametrizedAttribute, TypeAttribute):
    """`!trace.token`: "this op has finished"; carries no data."""

    name = "trace.token"


@irdl_op_definition
class KernelOp(IRDLOperation):
    """One GPU activity (kernel, memcpy, memset): waits for its operands, yields a token."""

    name = "trace.kernel"
    deps = var_operand_def(AnyAttr())
    done = result_def(TokenType)
    assembly_format = "($deps^)? attr-dict `:` functional-type($deps, $done)"


@irdl_op_definition
class PayloadOp(IRDLOperation):
    """The tensor a collective sends, available once its dependencies are done: no cost, no
    stream, no launch (`is_virtual`)."""

    name = "trace.payload"
    deps = var_operand_def(AnyAttr())
    data = result_def(TensorType)
    assembly_format = "($deps^)? attr-dict `:` functional-type($deps, $data)"


@irdl_op_definition
class HostSyncOp(IRDLOperation):
    """A host synchronisation: the host thread waits until every operand's op has ended.

    It runs on no GPU stream and costs nothing; with a launch overhead the simulator stops
    the host's launches there until the awaited ops end (sim/engine.py "Host syncs")."""

    name = "trace.host_sync"
    deps = var_operand_def(AnyAttr())
    done = result_def(TokenType)
    assembly_format = "($deps^)? attr-dict `:` functional-type($deps, $done)"


def is_host_sync(op: Operation) -> bool:
    """True for a `trace.host_sync` and for an op marked `lancet.host_sync` (a PyTorch
    `.item()`: the host reads a GPU value, so it waits for its producers)."""
    return isinstance(op, HostSyncOp) or attrs.HOST_SYNC in op.attributes


def is_virtual(op: Operation) -> bool:
    """True for the bookkeeping ops of an imported trace that are no GPU work (a
    `trace.payload`): they happen when their operands' ops end, on no stream and with no
    launch, and do not hold the host back (a host sync does: `is_host_sync`)."""
    return isinstance(op, PayloadOp)


COPY_NAME_PREFIXES: tuple[tuple[str, CopyQueue], ...] = (
    ("Memcpy HtoD", CopyQueue.HTOD),
    ("Memcpy DtoH", CopyQueue.DTOH),
    ("Memcpy HtoA", CopyQueue.HTOD),
    ("Memcpy AtoH", CopyQueue.DTOH),
)
"""Kineto activity names of the copies with an engine of their own direction (e.g. "Memcpy
HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)"; CUPTI's HtoA / AtoH copy between
the host and a CUDA array on the device); every other copy (DtoD, PtoP, HtoH, "Memset
(Device)", an unnamed one) goes to the queue of the rest."""
OTHER_COPY_NAME_PREFIXES = (
    "Memcpy DtoD",
    "Memcpy PtoP",
    "Memcpy HtoH",
    "Memcpy AtoA",
    "Memcpy AtoD",
    "Memcpy DtoA",
    "Memset",
)
"""The names of the copies known to belong to the queue of the rest (on the device, between
GPUs, host to host, any memset): with `COPY_NAME_PREFIXES` the directions CUPTI names. A copy
named otherwise also goes there, but its direction is a guess (`copy_direction_known`)."""


OPAQUE_COMM_PREFIX = "trace:"
"""The collective kind (graph/dataflow.py `collective_kind`) of an NCCL kernel that is no `comm`
op is this prefix and its `lancet.trace_comm` (`trace:broadcast`): no kind of the collective
registry, so nothing fuses, tables or re-costs it; it keeps its measured time."""


def opaque_comm_kind(op: Operation) -> str | None:
    """`trace:<kind>` for an imported NCCL kernel the `comm` dialect has no op for (a
    `trace.kernel` with `lancet.trace_comm`: broadcast, send/recv, ...), None for any other op.
    It is communication: the replay ran it on its NCCL stream beside the kernels."""
    if not isinstance(op, KernelOp):
        return None
    kind = op.attributes.get(attrs.TRACE_COMM)
    return OPAQUE_COMM_PREFIX + kind.data if isinstance(kind, StringAttr) else None


def opaque_comm_bytes(op: Operation) -> int:
    """The bytes an opaque NCCL kernel moves (`lancet.trace_bytes`), 0 if not stated."""
    nbytes = op.attributes.get(attrs.TRACE_BYTES)
    return nbytes.value.data if isinstance(nbytes, IntegerAttr) else 0


def copy_direction_known(name: str) -> bool:
    """Whether a copy activity's Kineto name says its direction (which copy queue it takes):
    one of `COPY_NAME_PREFIXES` or `OTHER_COPY_NAME_PREFIXES`."""
    return name.startswith(tuple(p for p, _ in COPY_NAME_PREFIXES)) or name.startswith(
        OTHER_COPY_NAME_PREFIXES
    )


def copy_queue(op: Operation) -> CopyQueue:
    """The copy-engine queue of a copy op (the caller knows it is one: `graph.dataflow.is_copy`),
    from its Kineto `name`: `HTOD`, `DTOH`, else `OTHER`."""
    name = op.attributes.get("name")
    if isinstance(name, StringAttr):
        for prefix, queue in COPY_NAME_PREFIXES:
            if name.data.startswith(prefix):
                return queue
    return CopyQueue.OTHER


Trace = Dialect("trace", [KernelOp, PayloadOp, HostSyncOp], [TokenType])
