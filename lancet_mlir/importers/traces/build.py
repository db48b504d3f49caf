"""Build the IR of imported steps: one `func.func @rank<R>` per rank, one op per GPU activity.

Ops appear in launch order (the host's order). Each carries its measured duration
(`lancet.time_us`), its CUDA stream (`lancet.trace_stream`), launch time and measured start
(`lancet.launch_us`, `lancet.trace_start_us`, µs from the window's origin), its step, and for
kernels the launching ATen op and its input shapes when the trace has them. NCCL kernels of the
four collective kinds become `comm` ops on an i8 payload of the collective's bytes (behind a
`trace.payload` that joins their dependencies: a virtual node, on no stream and with no launch,
so the collective waits for nothing else); other NCCL kernels stay `trace.kernel` with
`lancet.trace_comm`. Dependencies are SSA edges: the previous op of the stream, event waits,
data dependencies, and host syncs: a `trace.host_sync` of the awaited ops at the sync's place
in launch order (where the host call returns), whose token feeds the next op of every stream.
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


def _rank_func(st: StepTrace, world: int, data_only: bool = False) -> FuncOp:
    g = st.graph
    ops, info = g.ops, st.info
    order = sorted(range(len(ops)), key=lambda j: (info[j].launch_ts, ops[j].ts, j))
    # host syncs: a `trace.host_sync` on the awaited ops where the host returns from the
    # call, before the first op launched from then on; its token feeds the next op of every
    # stream (the ops launched after it: the simulator holds the host there)
    sync_points = sorted((c.ts + c.dur, c.waits) for c in g.calls if c.waits)
    syncs_before: dict[int, list[int]] = {}  # op -> the syncs placed just before it
    fed: dict[int, list[int]] = {}  # op -> the syncs whose token it takes
    trailing: list[int] = []  # syncs after the last launch
    if sync_points:
        by_stream: dict[int, list[int]] = {}
        for j in order:
            by_stream.setdefault(ops[j].stream, []).append(j)
        launch_times = [info[j].launch_ts for j in order]
        for k, (t, _) in enumerate(sync_points):
            pos = bisect.bisect_left(launch_times, t)
            (syncs_before.setdefault(order[pos], []) if pos < len(order) else trailing).append(k)
            for js in by_stream.values():
                nxt = next((j for j in js if info[j].launch_ts >= t), None)
                if nxt is not None:
                    fed.setdefault(nxt, []).append(k)
    block = Block()
    value: dict[int, SSAValue] = {}
    sync_value: dict[int, SSAValue] = {}
    last: dict[int, int] = {}
    inv_stream = {k: s for s, k in st.stream_index.items()}
    token = TokenType()

    def add_syncs(ks: list[int]) -> None:
        for k in ks:
            awaited = [value[w] for w in sync_points[k][1] if w in value]
            if not awaited:
                continue  # it awaits nothing this window launched before it
            sync = HostSyncOp.create(
                operands=awaited, result_types=[token], attributes={attrs.TIME_US: _f(0.0)}
            )
            block.add_op(sync)
            sync_value[k] = sync.results[0]

    for j in order:
        add_syncs(syncs_before.get(j, []))
        o, inf = ops[j], info[j]
        deps: list[int] = []
        prev = last.get(o.stream)
        if prev is not None and not data_only:
            deps.append(prev)
        for d in o.deps:
            if d in value and d not in deps:
                deps.append(d)
        last[o.stream] = j
        operands = [value[d] for d in deps if d in value]
        operands += [sync_value[k] for k in fed.get(j, []) if k in sync_value]
        props: dict[str, Attribute] = {
            attrs.TIME_US: _f(o.dur),
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
            props["lancet.trace_comm"] = StringAttr(inf.comm_kind or "unknown")
            props["lancet.trace_bytes"] = IntegerAttr(inf.comm_bytes, i64)
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
            "lancet.measured_period_us": _f(st.measured_period_us),
            "lancet.launch_lag_us": _f(g.lag_us),
            "lancet.trace_device": StringAttr(st.device),
            "lancet.data_dependencies": IntegerAttr(st.data_deps, i64),
        }
    )
    return func


def build_module(steps: list[StepTrace], data_only: bool = False) -> ModuleOp:
    """The module of one or several ranks' steps (ranks in rank order). `data_only`: no stream
    order edges, only event waits, host syncs and data dependencies (what a pass may reorder)."""
    world = max([st.world_size for st in steps] + [len(steps)])
    funcs = [_rank_func(st, world, data_only) for st in sorted(steps, key=lambda s: s.rank)]
    module = ModuleOp(funcs)
    module.attributes[attrs.WORLD_SIZE] = IntegerAttr(world, i64)
    module.attributes["lancet.trace_ranks"] = ArrayAttr([IntegerAttr(s.rank, i64) for s in steps])
    return module
