"""Build the IR of imported steps: one `func.func @rank<R>` per rank, one op per GPU activity.

Ops appear in launch order (the host's order). Each carries its measured duration
(`lancet.time_us`), its CUDA stream (`lancet.trace_stream`), launch time and measured start
(`lancet.launch_us`, `lancet.trace_start_us`, µs from the window's origin), its step, and for
kernels the launching ATen op and its input shapes when the trace has them. NCCL kernels of the
four collective kinds become `comm` ops on an i8 payload of the collective's bytes (behind a
`trace.payload` that joins their dependencies: a virtual node, on no stream and with no launch,
so the collective waits for nothing else); other NCCL kernels (broadcast, send/recv, ...) stay
`trace.kernel` with `lancet.trace_comm`, which the dataflow layer reads as a collective of an
opaque kind: it runs on a communication stream with its measured time and is never fused.
Dependencies are SSA edges: the previous op of the stream, event waits, data dependencies, and
host syncs.

Host syncs: a `trace.host_sync` of the awaited ops at the sync's place in launch order (where
the host call returns), chained to the previous sync of the same host thread (the thread passes
them in order). A sync blocks only the thread that called it: its token feeds the first op of
each stream that thread launches after it (the stream order keeps its later ones after that),
never an op launched by another thread or by no known call. The simulator has one host
(sim/engine.py "Host syncs"): at launch overhead 0 (the default) a sync is only these edges,
per thread; with an overhead > 0 the one host clock stalls at every sync, so the ops later in
block order wait for it whichever thread launched them (an approximation for several threads).

`data_only` (what `lancet-trace whatif --pipeline` rewrites; a pass may reorder whatever the
edges allow) drops the stream order except where the trace cannot show the dependency: on one
stream, the kernels of one ATen op call (the same `cpu_op` event of `OpInfo.cpu_op`: by External
id in the new Kineto schema, the innermost `cpu_op` with Input Dims around the launch in the old)
keep their order (they share workspace memory: a split-K GEMM and its `splitKreduce`), and an
op without a known ATen op (every Chakra node) keeps the stream's previous op and the next; and
every op a thread launches after a sync takes that sync's token (with the chain, after all its
thread's earlier syncs: one edge per op and per sync).
"""

from __future__ import annotations

import bisect
import json
import math

from xdsl.dialects.builtin import (
    ArrayAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    TensorType,
    f64,
    i64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from lancet_mlir import attrs
from lancet_mlir.dialects.comm import (
    AllGatherOp,
    AllReduceOp,
    AllToAllOp,
    GroupsAttr,
    ReduceScatterOp,
)
from lancet_mlir.dialects.trace import HostSyncOp, KernelOp, PayloadOp, TokenType
from lancet_mlir.dialects.vocab import CollectiveKind
from lancet_mlir.importers.traces.nccl import COMM_DIALECT_KINDS
from lancet_mlir.importers.traces.step import StepTrace

I8 = IntegerType(8)


def _f(x: float) -> FloatAttr:
    return FloatAttr(round(float(x), 6), f64)


def _comm_op(
    kind: str, nbytes: int, group: tuple[int, ...], world: int, deps: list[SSAValue]
) -> tuple[Operation, Operation]:
    """(payload op, collective op) for `kind` moving `nbytes` over `group`; the payload joins
    the collective's dependencies `deps` (a virtual node: no stream, no launch)."""
    g = max(1, len(group))
    per = max(1, math.ceil(max(nbytes, 1) / g))
    props: dict[str, Attribute | None] = {}
    if group and len(group) != world:
        props["groups"] = GroupsAttr([list(group)])
    if kind == CollectiveKind.ALLREDUCE:
        ty = TensorType(I8, [max(nbytes, 1)])
        payload = PayloadOp.create(operands=deps, result_types=[ty])
        return payload, AllReduceOp([payload.results[0]], [ty], props)
    if kind == CollectiveKind.ALL_TO_ALL:
        ty = TensorType(I8, [g, per])
        payload = PayloadOp.create(operands=deps, result_types=[ty])
        return payload, AllToAllOp([payload.results[0]], [ty], props)
    if kind == CollectiveKind.ALLGATHER:
        ty_in, ty_out = TensorType(I8, [1, per]), TensorType(I8, [g, per])
        payload = PayloadOp.create(operands=deps, result_types=[ty_in])
        return payload, AllGatherOp([payload.results[0]], [ty_out], props)
    ty_in, ty_out = TensorType(I8, [g, per]), TensorType(I8, [1, per])
    payload = PayloadOp.create(operands=deps, result_types=[ty_in])
    return payload, ReduceScatterOp([payload.results[0]], [ty_out], props)


def _stream_deps(
    j: int,
    st: StepTrace,
    last: dict[int, int],
    last_of: dict[tuple[int, int], int],
    data_only: bool,
) -> list[int]:
    """The stream-order predecessors of op `j` (ops visited in launch order; updates `last`
    and `last_of`). The full module: the stream's previous op. `data_only`: the previous op of
    the same launching ATen op on the stream (its kernels share workspace memory the execution
    trace does not show, e.g. a split-K GEMM and its `splitKreduce`), and the stream's previous
    op where either op's launching ATen op is unknown (it may belong to its neighbours')."""
    o = st.graph.ops[j]
    cpu_op = st.info[j].cpu_op
    # the ATen op call (one `cpu_op` event); its id() is a dict key only, never an order
    key = id(cpu_op) if cpu_op is not None else None
    prev = last.get(o.stream)
    last[o.stream] = j
    same = last_of.get((o.stream, key)) if key is not None else None
    if key is not None:
        last_of[(o.stream, key)] = j
    if prev is None:
        return []
    if not data_only:
        return [prev]
    deps: list[int] = []
    if key is None or st.info[prev].cpu_op is None:
        deps.append(prev)
    if same is not None and same not in deps:
        deps.append(same)
    return deps


def _rank_func(
    st: StepTrace, world: int, data_only: bool = False, durations: list[float] | None = None
) -> FuncOp:
    g = st.graph
    ops, info = g.ops, st.info
    order = sorted(range(len(ops)), key=lambda j: (info[j].launch_ts, ops[j].ts, j))
    # host syncs (module doc "Host syncs"): a `trace.host_sync` on the awaited ops where the
    # host returns from the call, before the first op launched from then on
    sync_points = sorted((c.ts + c.dur, c.thread, c.waits) for c in g.calls if c.waits)
    syncs_before: dict[int, list[int]] = {}  # op -> the syncs placed just before it
    trailing: list[int] = []  # syncs after the last launch
    if sync_points:
        launch_times = [info[j].launch_ts for j in order]
        for k, (t, _, _) in enumerate(sync_points):
            pos = bisect.bisect_left(launch_times, t)
            (syncs_before.setdefault(order[pos], []) if pos < len(order) else trailing).append(k)
    block = Block()
    value: dict[int, SSAValue] = {}
    last: dict[int, int] = {}  # stream -> its last op so far
    last_of: dict[tuple[int, int], int] = {}  # (stream, launching ATen op) -> its last op
    cur_sync: dict[int, SSAValue] = {}  # host thread -> the token of its latest sync
    sync_gen: dict[int, int] = {}  # host thread -> how many syncs it has had
    fed_gen: dict[tuple[int, int], int] = {}  # (thread, stream) -> the sync it last fed
    inv_stream = {k: s for s, k in st.stream_index.items()}
    token = TokenType()

    def add_syncs(ks: list[int]) -> None:
        for k in ks:
            _, thread, waits = sync_points[k]
            awaited = [value[w] for w in waits if w in value]
            if not awaited:
                continue  # it awaits nothing this window launched before it
            # chained to the previous sync of its thread: the host passes them in order
            chain = [cur_sync[thread]] if thread in cur_sync else []
            sync = HostSyncOp.create(
                operands=awaited + chain,
                result_types=[token],
                attributes={attrs.TIME_US: _f(0.0)},
            )
            block.add_op(sync)
            cur_sync[thread] = sync.results[0]
            sync_gen[thread] = sync_gen.get(thread, 0) + 1

    for j in order:
        add_syncs(syncs_before.get(j, []))
        o, inf = ops[j], info[j]
        deps = _stream_deps(j, st, last, last_of, data_only)
        for d in o.deps:
            if d in value and d not in deps:
                deps.append(d)
        operands = [value[d] for d in deps if d in value]
        thread = g.calls[o.launch].thread if o.launch >= 0 else None
        if thread is not None and thread in cur_sync:
            # all: every op its thread launches after the sync; else the first per stream
            # (the stream order keeps the rest after it)
            gen = sync_gen[thread]
            if data_only or fed_gen.get((thread, o.stream)) != gen:
                operands.append(cur_sync[thread])
                fed_gen[(thread, o.stream)] = gen
        props: dict[str, Attribute] = {
            attrs.TIME_US: _f(o.dur if durations is None else durations[j]),
            "lancet.trace_stream": IntegerAttr(inv_stream.get(o.stream, o.stream), i64),
            "lancet.launch_us": _f(inf.launch_ts),
            "lancet.trace_start_us": _f(o.ts),
            "lancet.trace_step": IntegerAttr(inf.step, i64),
        }
        if inf.kind == "comm" and inf.comm_kind in COMM_DIALECT_KINDS:
            payload, coll = _comm_op(
                inf.comm_kind, inf.comm_bytes, inf.group or (), world, operands
            )
            payload.attributes[attrs.TIME_US] = _f(0.0)
            coll.attributes.update(props)
            coll.attributes["name"] = StringAttr(o.name)
            block.add_op(payload)
            block.add_op(coll)
            value[j] = coll.results[0]
            continue
        props["name"] = StringAttr(o.name)
        props["lancet.trace_kind"] = StringAttr(inf.kind)
        if inf.kind == "comm":
            # an opaque collective (graph/dataflow.py `collective_kind`): simulated on a
            # communication stream with its measured time, as the replay runs it on its own
            props[attrs.TRACE_COMM] = StringAttr(inf.comm_kind or "unknown")
            props[attrs.TRACE_BYTES] = IntegerAttr(inf.comm_bytes, i64)
        if inf.cpu_op is not None:
            props["lancet.aten"] = StringAttr(inf.cpu_op.name)
            dims = inf.cpu_op.args.get("Input Dims")
            if dims is not None:
                props["lancet.input_dims"] = StringAttr(json.dumps(dims, separators=(",", ":")))
            types = inf.cpu_op.args.get("Input type")
            if types is not None:
                props["lancet.input_types"] = StringAttr(json.dumps(types, separators=(",", ":")))
        op = KernelOp.create(operands=operands, result_types=[token], attributes=props)
        block.add_op(op)
        value[j] = op.results[0]
    add_syncs(trailing)
    block.add_op(ReturnOp())
    func = FuncOp(f"rank{st.rank}", ((), ()), Region(block))
    func.attributes.update(
        {
            "lancet.trace_source": StringAttr(st.source.rsplit("/", 1)[-1]),
            "lancet.trace_step": IntegerAttr(st.step, i64),
            "lancet.launch_lag_us": _f(g.lag_us),
            "lancet.trace_device": StringAttr(st.device),
            "lancet.data_dependencies": IntegerAttr(st.data_deps, i64),
        }
    )
    if st.period_basis != "none":
        # a Chakra trace has durations but no start times: nothing was measured, and a 0
        # here would read as a measured period of 0 µs
        func.attributes["lancet.measured_period_us"] = _f(st.measured_period_us)
    return func


def build_module(
    steps: list[StepTrace],
    data_only: bool = False,
    durations: list[list[float]] | None = None,
) -> ModuleOp:
    """The module of one or several ranks' steps (ranks in rank order). `data_only`: the
    dependencies a pass may not break, without the rest of the stream order (module doc).
    `durations[i][j]` replaces op j's measured `lancet.time_us` in `steps[i]` (a what-if's)."""
    world = max([st.world_size for st in steps] + [len(steps)])
    durs: list[list[float] | None] = (
        list(durations) if durations is not None else [None] * len(steps)
    )
    if len(durs) != len(steps):
        raise ValueError(f"{len(durs)} duration lists for {len(steps)} steps")
    ranked = sorted(zip(steps, durs, strict=True), key=lambda p: p[0].rank)
    funcs = [_rank_func(st, world, data_only, d) for st, d in ranked]
    module = ModuleOp(funcs)
    module.attributes[attrs.WORLD_SIZE] = IntegerAttr(world, i64)
    module.attributes["lancet.trace_ranks"] = ArrayAttr([IntegerAttr(s.rank, i64) for s in steps])
    return module
