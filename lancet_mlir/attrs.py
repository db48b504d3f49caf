"""The names of lancet-mlir's `lancet.*` attributes, in one place.

Top layer (with `support/`): every other layer may import it. docs/passes.md lists what each
attribute means, who writes it and who reads it.
"""

from __future__ import annotations

# ---- module attributes that configure costing (docs/passes.md "Cost configuration") --------
WORLD_SIZE = "lancet.world_size"
"""i64 on a module: number of ranks of a collective without explicit groups."""
DEVICE = "lancet.device"
"""String: the GPU every rank has (`h100`, `v100`, ...; devices.py)."""
CLUSTER = "lancet.cluster"
"""String: a named cluster preset (`p3dn`, `dgx-h100`, ...; clusters.py)."""
PROFILE = "lancet.profile"
"""String or array of strings: measured op-timing files (ProfileDB JSON / Lancet .profile)."""
COMM_TABLE = "lancet.comm_table"
"""String or array of strings: measured collective-time tables (CSV, nccl-tests, XLA)."""
GPUS_PER_NODE = "lancet.gpus_per_node"
"""Integer: GPUs per NVLink domain, overriding the cluster's / device's."""
NETWORK_GBPS = "lancet.network_gbps"
"""Number: inter-node network Gb/s per GPU, overriding the cluster's / device's."""
COMM_STREAMS = "lancet.comm_streams"
"""Integer: communication streams of the simulator (default 1)."""
OVERLAP_SLOWDOWN = "lancet.overlap_slowdown"
"""Number >= 1: compute slowdown while a collective runs (default 1.0)."""
LAUNCH_OVERHEAD_US = "lancet.launch_overhead_us"
"""Number >= 0: host time per op launch; an op cannot start before it is launched (default 0)."""

# ---- op annotations -----------------------------------------------------------------------------
TIME_US = "lancet.time_us"
"""Number >= 0 on any op: its time in µs, overriding every cost model."""
FILL = "lancet.fill"
"""Number in (0, 1] on any op: the op processes only this expected share of the rows of its
padded tensors (a token part's window); costs are scaled by it (compute time x f, a
collective costed at payload bytes x f). `lancet.time_us` is not scaled."""
ORIGIN = "lancet.origin"
"""String on an op a pass derived from another (a part, a chunk): the original op's key
(cost/keys.py). A measured cost source costs the op by its own key if it has it, else by this
key x `lancet.share` x fill (cost/sources.py)."""
SHARE = "lancet.share"
"""Number in (0, 1] beside `lancet.origin`: the share of the original op's work this op does
(a part of s of the S tokens: s / S; absent: 1)."""
ORIGIN_BYTES = "lancet.origin_bytes"
"""Number > 0 beside `lancet.origin` on an op that only moves data, added by a pass (a
split, concatenation, reshape or partial sum of a partitioned region): the bytes the origin's
measured time moves. A measured source costs the op at the origin's time per byte: the
origin key's time x the op's own bytes / this x fill (cost/sources.py, docs/design.md)."""
FLOPS = "lancet.flops"
"""f64 on a compute op: FLOPs for the roofline model (import-stablehlo, you)."""
BYTES = "lancet.bytes"
"""f64 on a compute op: bytes moved, for the roofline model."""
ROLE = "lancet.role"
"""String on an op: `fwd`, `dx`, `dw` or `update` (lancet-model)."""
PART = "lancet.part"
"""i64 on an op: the chunk index of a partitioned copy (tutel-pipeline)."""
START_US = "lancet.start_us"
"""f64 on an op: simulated start, µs from the start of its block (simulate)."""
END_US = "lancet.end_us"
"""f64 on an op: simulated end (simulate)."""
STREAM = "lancet.stream"
"""i64 on an op: 0 compute, 1..k communication, k + 1.. the copy engines, -1 a host sync
(no GPU stream) (simulate)."""
TRACE_KIND = "lancet.trace_kind"
"""String on an imported trace op: `kernel`, `memcpy`, `memset` or `comm` (lancet-trace)."""
TRACE_COMM = "lancet.trace_comm"
"""String on an imported NCCL kernel that is no `comm` op: its collective kind (`broadcast`,
`sendrecv`, `reduce`, `barrier`, `unknown`). The dataflow layer treats it as a collective of an
opaque kind (graph/dataflow.py `collective_kind`): on a communication stream, never fused."""
TRACE_BYTES = "lancet.trace_bytes"
"""i64 on such a kernel: the bytes the trace says it moves (0 if it does not say)."""
COPY_KINDS: tuple[str, ...] = ("memcpy", "memset")
"""`lancet.trace_kind` values that run on a copy engine (sim/engine.py "Copy engines")."""
EFFECTS = "lancet.effects"
"""Array of strings on an op: the named resources it reads (`"read:<name>"`) and writes
(`"write:<name>"`), e.g. a mutated tensor's storage or the RNG state (the PyTorch import).
Every pass keeps the op's program order relative to the other ops that name the resource:
a write after the last write and every read since, a read after the last write
(graph/dataflow.py). Resources are independent of each other and of the memory that
`MemoryEffect` traits describe."""
HOST_SYNC = "lancet.host_sync"
"""Unit attribute on an op: the host waits for it to end before launching more (a PyTorch
`.item()`; sim/engine.py "Host syncs"). `trace.host_sync` ops are host syncs without it."""
MAKESPAN_US = "lancet.makespan_us"
"""f64 on a func.func: simulated time of its body (simulate)."""
EXPOSED_COMM_US = "lancet.exposed_comm_us"
"""f64 on a func.func: simulated communication not hidden by compute (simulate)."""
HLO_OP = "lancet.hlo_op"
"""String on an imported op: the HLO op it came from (import-stablehlo)."""
HLO_ASYNC = "lancet.hlo_async"
"""Unit on an imported collective that was an async start/done pair (import-stablehlo)."""
IMPORT_GLUE = "lancet.import_glue"
"""Unit on reshape/split glue the StableHLO importer inserted."""

TIMING: tuple[str, ...] = (TIME_US, START_US, END_US, STREAM)
"""Per-op timing annotations: they describe one op, so copies and fused ops drop them."""

# ---- function-argument attributes (lancet-model writes them, lancet-run reads them) --------------
NAME = "lancet.name"
"""String on an argument: the parameter's name."""
INIT_SCALE = "lancet.init_scale"
"""f64 on a float argument: inputs are N(0, 1) x scale + offset."""
INIT_OFFSET = "lancet.init_offset"
"""f64 on a float argument (see INIT_SCALE)."""
MAX_INT = "lancet.max_int"
"""i64 on an integer argument: inputs are uniform in [0, max_int)."""
REPLICATED = "lancet.replicated"
"""Unit on an argument: every rank draws the same values."""

COST_CONFIG_ATTRS: tuple[str, ...] = (
    WORLD_SIZE,
    DEVICE,
    CLUSTER,
    PROFILE,
    COMM_TABLE,
    GPUS_PER_NODE,
    NETWORK_GBPS,
    COMM_STREAMS,
    OVERLAP_SLOWDOWN,
)
"""Every module attribute the costing passes read."""
