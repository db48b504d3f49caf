"""One profiled step of one rank as a replayable graph: ops, host calls and dependencies.

From a `RawTrace` this picks the step (`ProfilerStep#N`; by default the last one that has a
previous step, so that its period is measured), keeps the GPU activities launched in that step
and the one before it (the earlier one only warms the replay up: its tail may overlap step N),
and infers the dependencies (reference/trace-notes.md):

* stream FIFO order (implicit in `RankGraph`);
* event waits: `cudaStreamWaitEvent` names no stream or event. Its target is the next op the
  same thread launches; its source the last op launched before it on another stream, trying
  the most recent first and keeping the first candidate the measured times satisfy (source
  end <= target start). A `cuda_sync` "Wait Event" record, when the trace has one, names both;
* host syncs (`cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cudaEventSynchronize`) and
  synchronous copies block the host until the GPU work they wait for ends, again kept only
  where the measured times agree.

The measured period is the last GPU end of step N minus that of step N-1; a trace with one
step falls back to the step's window (its start to its last GPU end; `period_basis`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from lancet_mlir.importers.traces import nccl
from lancet_mlir.importers.traces.kineto import Activity, Call, RawTrace, Span, _fmt
from lancet_mlir.sim.replay import GpuOp, HostCall, RankGraph
from lancet_mlir.support.errors import UserError

SYNC_CALLS = {
    "cudaStreamSynchronize": "stream",
    "cuStreamSynchronize": "stream",
    "cudaDeviceSynchronize": "device",
    "cuCtxSynchronize": "device",
    "cudaEventSynchronize": "event",
    "cuEventSynchronize": "event",
}
WAIT_CALLS = ("cudaStreamWaitEvent", "cuStreamWaitEvent")
LAUNCH_PREFIXES = (
    "cudaLaunch",
    "cuLaunch",
    "cudaMemcpy",
    "cuMemcpy",
    "cudaMemset",
    "cuMemset",
    "cudaGraphLaunch",
    "cuGraphLaunch",
)


@dataclass
class OpInfo:
    """What the IR and the report need about one GPU op besides its replay data."""

    name: str
    kind: str
    """`kernel`, `memcpy`, `memset` or `comm`."""
    step: int
    launch_ts: float
    cpu_op: Span | None = None
    comm_kind: str | None = None
    comm_bytes: int = 0
    group: tuple[int, ...] | None = None
    copy_bytes: int | None = None
    """A memcpy / memset's own byte count (its Kineto args' `bytes`), None if not recorded."""


@dataclass
class StepTrace:
    """One rank's replay window (steps N-1 and N) with everything the report needs."""

    source: str
    rank: int
    world_size: int
    device: str
    schema: str
    step: int
    step_ts: float
    graph: RankGraph
    info: list[OpInfo]
    target: list[int]
    """Ops of step N (indices into graph.ops)."""
    prev_last: int
    """The op of step N-1 that ends last (-1 if there is no previous step)."""
    measured_period_us: float
    period_basis: str
    waits_kept: int = 0
    waits_rejected: int = 0
    syncs_kept: int = 0
    data_deps: int = 0
    et_match: float | None = None
    """`et.match_share` of the execution trace given with `--et` (None: none was given)."""
    origin: float = 0.0
    """Absolute trace time of the window's origin (graph times are relative to it)."""
    thread_index: dict[int, int] = field(default_factory=dict)
    stream_index: dict[int, int] = field(default_factory=dict)
    """Trace thread id / CUDA stream id -> index in the graph."""
    notes: list[str] = field(default_factory=list)
    unknown_copies: dict[str, int] = field(default_factory=dict)
    """Copy activities whose name says no direction: name -> count (`_unknown_copies`)."""
    flags: list[str] = field(default_factory=list)
    """What the import found questionable about the trace (`name: explanation`): the replay
    report lists them with its own flags."""


def _tolerance(acts: list[Activity]) -> float:
    """Time comparisons allow for the trace's resolution: 1 µs for integer-µs traces."""
    integral = all(float(a.ts).is_integer() and float(a.dur).is_integer() for a in acts[:200])
    return 1.0 if integral else 0.05


def select_step(
    raw: RawTrace, step: int | None
) -> tuple[int, float, float, tuple[int, float, float] | None]:
    """(N, ts, dur, previous step or None) of the step to replay."""
    if not raw.steps:
        raise UserError(f"{raw.source}: no ProfilerStep#N annotation: cannot find a step")
    steps = raw.steps
    if step is None:
        k = len(steps) - 1
    else:
        found = [k for k, s in enumerate(steps) if s[0] == step]
        if not found:
            have = ", ".join(str(s[0]) for s in steps)
            raise UserError(f"{raw.source}: no ProfilerStep#{step} (the trace has {have})")
        k = found[0]
    n, ts, dur = steps[k]
    prev = steps[k - 1] if k > 0 else None
    return n, ts, dur, prev


def _check_launch_order(raw: RawTrace, chosen: list[tuple[Activity, Call | None, int]]) -> None:
    """UserError for a GPU activity that starts before the host call that launched it: the
    trace's clocks disagree (no trace we have does; one replayed would be off by the gap, or
    its dependencies form a cycle)."""
    tol = trace_tolerance(raw)
    for a, call, _ in chosen:
        if call is not None and a.ts < call.ts - tol:
            raise UserError(
                f"{raw.source}: {a.kind} {a.name!r} at ts {_fmt(a.ts)} starts before its launch "
                f"call {call.name!r} at ts {_fmt(call.ts)} (correlation {a.corr}): the trace's "
                "host and GPU clocks disagree"
            )


def _steps_with_gpu_work(raw: RawTrace, by_corr: dict[int, Call]) -> list[int]:
    """The numbers of the steps within which some GPU activity is launched."""
    launches = sorted(
        call.ts if (call := by_corr.get(a.corr)) is not None else a.ts for a in raw.activities
    )
    busy = []
    for n, ts, dur in raw.steps:
        k = bisect.bisect_left(launches, ts)
        if k < len(launches) and launches[k] < ts + dur:
            busy.append(n)
    return busy


def build_step(raw: RawTrace, step: int | None = None) -> StepTrace:
    """The replay window of `raw` for step `step` (default: the last step)."""
    if not raw.activities:
        raise UserError(f"{raw.source}: no GPU activity (kernel, memcpy, memset) in the trace")
    n, ts, dur, prev = select_step(raw, step)
    lo = prev[1] if prev is not None else ts
    hi = ts + dur
    by_corr: dict[int, Call] = {c.corr: c for c in raw.calls if c.corr >= 0}
    chosen: list[tuple[Activity, Call | None, int]] = []
    for a in raw.activities:
        call = by_corr.get(a.corr)
        when = call.ts if call is not None else a.ts
        if lo <= when < hi:
            chosen.append((a, call, n if when >= ts else (prev[0] if prev else n)))
    _check_launch_order(raw, chosen)
    target_acts = [c for c in chosen if c[2] == n]
    if not target_acts:
        busy = _steps_with_gpu_work(raw, by_corr)
        hint = (f" (steps that do: {', '.join(map(str, busy))}; choose one with --step)"
                if busy else "")  # fmt: skip
        raise UserError(f"{raw.source}: ProfilerStep#{n} launches no GPU activity{hint}")
    # host calls of the window: every call on a thread that launched something
    threads = sorted({c.tid for _, c, _ in chosen if c is not None})
    tid_index = {t: k for k, t in enumerate(threads)}
    calls = [c for c in raw.calls if lo <= c.ts < hi and c.tid in tid_index]
    call_index = {id(c): k for k, c in enumerate(calls)}
    host = [
        HostCall(tid_index[c.tid], c.ts - lo, c.dur, launches=c.name.startswith(LAUNCH_PREFIXES))
        for c in calls
    ]
    streams = sorted({a.stream for a, _, _ in chosen})
    stream_index = {s: k for k, s in enumerate(streams)}
    ops: list[GpuOp] = []
    info: list[OpInfo] = []
    for a, call, step_no in chosen:
        is_comm = a.kind == "kernel" and nccl.is_nccl(a.name)
        launch = call_index.get(id(call), -1) if call is not None else -1
        ops.append(
            GpuOp(
                a.name,
                stream_index[a.stream],
                a.ts - lo,
                a.dur,
                launch,
                is_comm=is_comm,
                is_copy=a.kind != "kernel",
            )
        )
        info.append(
            OpInfo(
                a.name,
                "comm" if is_comm else a.kind,
                step_no,
                (call.ts - lo) if call is not None else a.ts - lo,
                copy_bytes=_copy_bytes(a),
            )
        )
    graph = RankGraph(host, ops, 0.0)
    st = StepTrace(
        raw.source,
        raw.rank,
        raw.world_size,
        raw.device,
        raw.schema,
        n,
        ts - lo,
        graph,
        info,
        [j for j, i in enumerate(info) if i.step == n],
        -1,
        0.0,
        "window",
        origin=lo,
        thread_index=tid_index,
        stream_index=stream_index,
    )
    tol = trace_tolerance(raw)
    _link_cpu_ops(raw, chosen, st)
    _nccl_info(raw, chosen, st)
    _event_waits(raw, calls, st, tol)
    _host_syncs(raw, calls, st, tol)
    measure_launch_lags(st, tol)
    _period(st, prev is not None)
    _unknown_copies(st)
    return st


UNKNOWN_COPY_FLAG = "unknown_copy_direction"
"""The flag (report, and a warning line of `load_steps`) of copies whose name says no
direction."""


def _unknown_copies(st: StepTrace) -> None:
    """Flag the memcpy / memset activities of the window whose Kineto name says no direction
    (`dialects.trace.copy_direction_known`): the simulator puts them on the copy queue of the
    rest (device to device, memset), which is a guess, not the trace's word."""
    from lancet_mlir.dialects.trace import copy_direction_known

    names: dict[str, int] = {}
    for inf in st.info:
        if inf.kind in ("memcpy", "memset") and not copy_direction_known(inf.name):
            names[inf.name] = names.get(inf.name, 0) + 1
    st.unknown_copies = dict(sorted(names.items()))
    if not names:
        return
    shown = sorted(names, key=lambda n: (-names[n], n))[:3]
    more = f" and {len(names) - len(shown)} more" if len(names) > len(shown) else ""
    st.flags.append(
        f"{UNKNOWN_COPY_FLAG}: {sum(names.values())} memcpy/memset activities named with no "
        f"known direction ({', '.join(repr(n) for n in shown)}{more}) go to the shared copy "
        "queue (device to device, memset): their queue is a guess"
    )


def _copy_bytes(a: Activity) -> int | None:
    """The bytes a memcpy / memset activity moves or sets, from its own `bytes` arg (every CUDA
    trace seen records it: the DLRM set, all of HTA's); None for a kernel or when absent."""
    if a.kind == "kernel":
        return None
    nb = a.args.get("bytes")
    if isinstance(nb, bool) or not isinstance(nb, int | float) or not nb >= 0:
        return None
    return int(nb)


DEFAULT_LAG_US = 5.0
"""Launch lag when no op of the trace started on an idle stream (a GPU-bound trace): the
V100-A100 traces seen show 4-8 µs."""


IDLE_US = 2.0
"""A stream counts as idle before an op only if the op started this much after the stream's
previous op ended: back-to-back kernels on a busy stream are ~1 µs apart."""


def _issue_gap(g: RankGraph) -> float:
    """The median gap between back-to-back ops of one stream (the GPU front end's issue time):
    over ops launched before their stream's previous op ended, with a gap under IDLE_US."""
    last: dict[int, tuple[float, int]] = {}
    gaps: list[float] = []
    for j, o in enumerate(g.ops):
        prev = last.get(o.stream)
        last[o.stream] = (o.ts + o.dur, j)
        if prev is None or o.launch < 0 or o.deps:
            continue
        gap = o.ts - prev[0]
        if g.calls[o.launch].ts + g.lag_us < prev[0] and 0.0 <= gap < IDLE_US:
            gaps.append(gap)
    if not gaps:
        return 0.0
    gaps.sort()
    return gaps[len(gaps) // 2]


def measure_launch_lags(st: StepTrace, tol: float) -> None:
    """Measure the window's launch lags (`RankGraph.lag_us`, `stream_lag_us`, each idle-stream
    op's own `lag_us`) and issue gap from its ops' dependencies as they are now: called again
    once an execution trace added data dependencies (`et.add_data_dependencies`), since an op
    whose start only a data dependency explains waited for it, not for its launch."""
    g = st.graph
    for o in g.ops:
        o.lag_us = None
    g.lag_us, g.stream_lag_us = _launch_lag(g, tol)
    g.gap_us = _issue_gap(g)


def trace_tolerance(raw: RawTrace) -> float:
    """The timestamp tolerance of the trace's activities (`_tolerance`)."""
    return _tolerance(raw.activities)


def _launch_lag(g: RankGraph, tol: float) -> tuple[float, dict[int, float]]:
    """The least time from a launch call's start to its op's start, over the ops whose start
    no stream predecessor or dependency explains (their stream was idle: the lag is physical),
    overall and per stream. In a GPU-bound trace the GPU runs far behind the host, and the
    least distance over all ops would be the queue depth, not the lag."""
    last_end: dict[int, float] = {}
    per: dict[int, list[float]] = {}
    for o in g.ops:
        ready = last_end.get(o.stream)
        last_end[o.stream] = o.ts + o.dur
        if ready is None:  # the window's first op of its stream: what it waited for is unseen
            continue
        for d in o.deps:
            ready = max(ready, g.ops[d].ts + g.ops[d].dur)
        if o.launch >= 0 and o.ts > ready + max(tol, IDLE_US):
            lag = max(0.0, o.ts - g.calls[o.launch].ts)
            per.setdefault(o.stream, []).append(lag)
            o.lag_us = lag
    if not per:
        return DEFAULT_LAG_US, {}
    lags = {s: _quantile(v, LAG_QUANTILE) for s, v in per.items()}
    # an op launched onto a busy stream must not wait longer than any op of its stream did
    for o in g.ops:
        if o.launch >= 0 and o.stream in lags:
            lags[o.stream] = min(lags[o.stream], max(0.0, o.ts - g.calls[o.launch].ts))
    return _quantile([x for v in per.values() for x in v], LAG_QUANTILE), lags


LAG_QUANTILE = 0.0
"""Which lag of the idle-stream launches stands for a stream's ops launched onto a busy
stream (0: the least). An op launched onto an idle stream keeps its own measured lag: pageable
copies and NCCL kernels lag more than compute kernels (a DLRM DtoH copy 15 µs, kernels 5)."""


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _period(st: StepTrace, has_prev: bool) -> None:
    ops = st.graph.ops
    last_n = max(ops[j].ts + ops[j].dur for j in st.target)
    earlier = [j for j, i in enumerate(st.info) if i.step != st.step]
    if has_prev and earlier:
        st.prev_last = max(earlier, key=lambda j: (ops[j].ts + ops[j].dur, -j))
        st.measured_period_us = last_n - (ops[st.prev_last].ts + ops[st.prev_last].dur)
        st.period_basis = "period"
    else:
        st.measured_period_us = last_n - st.step_ts
        st.period_basis = "window"
        if has_prev:
            st.notes.append("step N-1 launched no GPU work: the period is step N's window")
    if st.measured_period_us <= 0:
        raise UserError(f"{st.source}: ProfilerStep#{st.step} has no positive period")


def _link_cpu_ops(
    raw: RawTrace, chosen: list[tuple[Activity, Call | None, int]], st: StepTrace
) -> None:
    """Each op's launching ATen op: by External id (new schema) or by time nesting (old)."""
    cpu = [s for s in raw.spans if s.cat == "cpu_op"]
    if st.schema == "new":
        by_ext = {s.ext: s for s in cpu if s.ext >= 0}
        for j, (a, _, _) in enumerate(chosen):
            st.info[j].cpu_op = by_ext.get(a.ext)
        return
    per_tid: dict[int, list[Span]] = {}
    for s in cpu:
        per_tid.setdefault(s.tid, []).append(s)
    starts = {t: [s.ts for s in ss] for t, ss in per_tid.items()}
    for j, (_, call, _) in enumerate(chosen):
        if call is not None:
            st.info[j].cpu_op = _innermost(
                per_tid.get(call.tid, []),
                starts.get(call.tid, []),
                call.ts,
                lambda s: "Input Dims" in s.args,
            )
    return


def _innermost(spans: list[Span], starts: list[float], t: float, want: Any) -> Span | None:
    """The latest-starting span holding time `t` that `want` accepts (spans sorted by start)."""
    k = bisect.bisect_right(starts, t)
    best = None
    for s in reversed(spans[max(0, k - 64) : k]):
        if s.ts <= t <= s.ts + s.dur and want(s):
            best = s
            break
    return best


def _nccl_info(
    raw: RawTrace, chosen: list[tuple[Activity, Call | None, int]], st: StepTrace
) -> None:
    annos = [s for s in raw.spans if s.name.startswith("nccl:")]
    per_tid: dict[int, list[Span]] = {}
    for s in annos:
        per_tid.setdefault(s.tid, []).append(s)
    starts = {t: [s.ts for s in ss] for t, ss in per_tid.items()}
    world = tuple(range(raw.world_size))
    for j, (a, call, _) in enumerate(chosen):
        if st.info[j].kind != "comm":
            continue
        inf = st.info[j]
        kind = None
        nbytes = 0
        cname = a.args.get("Collective name")
        if isinstance(cname, str):
            kind = nccl.canonical(cname)
        nel = a.args.get("In msg nelems")
        if isinstance(nel, int):
            nbytes = nel * nccl.dtype_bytes(a.args.get("dtype", "float"))
        anno = None
        if call is not None:
            anno = _innermost(
                per_tid.get(call.tid, []), starts.get(call.tid, []), call.ts, lambda s: True
            )
        if kind is None:
            named = nccl.kind_from_kernel(a.name)
            from_anno = nccl.canonical(anno.name) if anno is not None else None
            kind = from_anno or named or "sendrecv"
        if nbytes == 0 and anno is not None:
            nbytes = nccl.dims_bytes(anno.args.get("Input Dims"), anno.args.get("Input type"))
        inf.comm_kind = kind
        inf.comm_bytes = nbytes
        inf.group = nccl.group_ranks(a.args) or world


class _LaunchIndex:
    """Per stream, the ops in launch order: `last_before(t)` in O(streams x log n)."""

    def __init__(self, ops: list[GpuOp], info: list[OpInfo]):
        per: dict[int, list[tuple[float, int]]] = {}
        for j, o in enumerate(ops):
            per.setdefault(o.stream, []).append((info[j].launch_ts, j))
        self.streams = {s: sorted(v) for s, v in per.items()}
        self.times = {s: [t for t, _ in v] for s, v in self.streams.items()}

    def last_before(self, t: float) -> dict[int, int]:
        """Per stream, the last op launched before time `t`."""
        out: dict[int, int] = {}
        for s, times in self.times.items():
            k = bisect.bisect_left(times, t)
            if k:
                out[s] = self.streams[s][k - 1][1]
        return out


def _event_waits(raw: RawTrace, calls: list[Call], st: StepTrace, tol: float) -> None:
    ops, info = st.graph.ops, st.info
    base = st.origin
    index = _LaunchIndex(ops, info)
    order = sorted(range(len(ops)), key=lambda j: (info[j].launch_ts, j))
    launch_times = [info[j].launch_ts for j in order]
    by_corr_sync = {s.corr: s for s in raw.syncs}
    rec_calls = {c.corr: c for c in raw.calls}
    stream_of = st.stream_index
    for c in calls:
        if c.name not in WAIT_CALLS:
            continue
        t = c.ts - base
        rec = by_corr_sync.get(c.corr)
        k = bisect.bisect_right(launch_times, t)
        # the target: the next op launched by the same thread (or on the recorded stream)
        target = -1
        for pos in range(k, min(len(order), k + 256)):
            j = order[pos]
            lj = ops[j].launch
            if rec is not None and rec.stream in stream_of:
                if ops[j].stream == stream_of[rec.stream]:
                    target = j
                    break
            elif lj >= 0 and st.graph.calls[lj].thread == st.thread_index.get(c.tid, -1):
                target = j
                break
        if target < 0:
            continue
        last = index.last_before(t)
        if rec is not None and rec.wait_on_stream in stream_of and rec.record_corr in rec_calls:
            rc = rec_calls[rec.record_corr]
            src = index.last_before(rc.ts - base).get(stream_of[rec.wait_on_stream], -1)
            cands = [src] if src >= 0 else []
        else:
            cands = sorted(
                (j for s, j in last.items() if s != ops[target].stream),
                key=lambda j: (-info[j].launch_ts, -j),
            )
        for src in cands:
            if ops[target].ts + tol >= ops[src].ts + ops[src].dur:
                if src not in ops[target].deps:
                    ops[target].deps.append(src)
                st.waits_kept += 1
                break
            st.waits_rejected += 1


def _host_syncs(raw: RawTrace, calls: list[Call], st: StepTrace, tol: float) -> None:
    ops, info, host = st.graph.ops, st.info, st.graph.calls
    by_corr_sync = {s.corr: s for s in raw.syncs}
    rec_calls = {c.corr: c for c in raw.calls}
    stream_of = st.stream_index
    index = _LaunchIndex(ops, info)
    own_waits: dict[int, list[int]] = {}
    launched: dict[int, list[int]] = {}
    for j, o in enumerate(ops):
        if o.launch >= 0:
            launched.setdefault(o.launch, []).append(j)
    for k, c in enumerate(calls):
        h = host[k]
        start, end = h.ts, h.ts + h.dur
        waited: list[int] = []
        kind = SYNC_CALLS.get(c.name)
        if kind is not None:
            last = index.last_before(start)
            rec = by_corr_sync.get(c.corr)
            if rec is not None and kind == "stream" and rec.stream in stream_of:
                j = last.get(stream_of[rec.stream], -1)
                waited = [j] if j >= 0 else []
            elif (
                rec is not None
                and kind == "event"
                and rec.record_corr in rec_calls
                and rec.wait_on_stream in stream_of
            ):
                rc = rec_calls[rec.record_corr]
                j = index.last_before(rc.ts - st.origin).get(stream_of[rec.wait_on_stream], -1)
                waited = [j] if j >= 0 else []
            elif kind == "device":
                waited = [j for j in last.values() if ops[j].ts + ops[j].dur <= end + tol]
            else:
                ok = [j for j in last.values() if ops[j].ts + ops[j].dur <= end + tol]
                waited = [max(ok, key=lambda j: (ops[j].ts + ops[j].dur, j))] if ok else []
        elif h.launches:
            # a synchronous copy: the call returns only after its op ended
            mine = launched.get(k, [])
            waited = [
                j
                for j in mine
                if ops[j].ts + ops[j].dur <= end + tol
                and ops[j].is_copy
                and ops[j].ts + ops[j].dur > start + tol
            ]
        waited = [j for j in waited if ops[j].ts + ops[j].dur > start]
        if not waited:
            continue
        if kind is None:
            own_waits[k] = sorted(set(waited))
            continue
        h.waits = sorted(set(waited))
        h.tail_us = max(0.0, end - max(ops[j].ts + ops[j].dur for j in h.waits))
        st.syncs_kept += 1
    if own_waits:
        _split_blocking_launches(st, own_waits)


def _split_blocking_launches(st: StepTrace, own_waits: dict[int, list[int]]) -> None:
    """A call that launches an op and returns after it ended (a synchronous copy) becomes the
    launch itself (no duration) followed by a wait on the op: an op cannot wait for the end of
    the call that launched it."""
    ops, old = st.graph.ops, st.graph.calls
    new: list[HostCall] = []
    remap = [0] * len(old)
    for k, h in enumerate(old):
        remap[k] = len(new)
        w = own_waits.get(k)
        if w is None:
            new.append(h)
            continue
        new.append(HostCall(h.thread, h.ts, 0.0, launches=True))
        end = h.ts + h.dur
        new.append(
            HostCall(
                h.thread,
                h.ts,
                h.dur,
                waits=w,
                tail_us=max(0.0, end - max(ops[j].ts + ops[j].dur for j in w)),
            )
        )
        st.syncs_kept += 1
    for o in ops:
        if o.launch >= 0:
            o.launch = remap[o.launch]
    st.graph.calls = new
