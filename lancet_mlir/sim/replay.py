"""Host-paced replay of GPU work: host threads, GPU streams (compute, NCCL, copy engines) and
rendezvous collectives, evaluated from durations and dependencies only.

This is the simulator of imported profiler traces (`importers/traces`), on plain data. A step
is a max-plus system, so one pass over a topological order evaluates it exactly:

* **host calls** (`HostCall`, one per CUDA runtime call of a launching thread) run in measured
  order. A call starts no earlier than the end of the previous call of its own thread plus the
  measured CPU gap, and no earlier than the previous call of the whole host: its end plus the
  measured gap if the two did not overlap, else its start plus the measured offset. A call that blocks (a host
  sync, a synchronous copy) ends no earlier than the GPU ops it waits for plus its measured
  return latency. Without blocking, host times are the measured ones.
* **GPU ops** (`GpuOp`) start no earlier than their launch call's start plus the launch lag,
  the end of the previous op of their stream (FIFO), and the end of every dependency (event
  waits, data dependencies). They last their duration.
* **collectives** (`GpuOp.coll >= 0`) that share a rendezvous id across ranks end together,
  at the last instance's start plus the rendezvous' wire time (`Rendezvous.wire_us`). An
  instance without a rendezvous simply lasts its duration.

`launch_overhead_us` replaces the duration of every launching host call (the CUDA-graphs
what-if: 0 = launches are free). `host=False` drops the host altogether (the GPU-only lower
bound). Everything is O(V + E).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class HostCall:
    """One host (CPU) call of one rank: measured start/duration on its thread."""

    thread: int
    ts: float
    dur: float
    launches: bool = False
    waits: list[int] = field(default_factory=list)
    """GPU ops (indices into the rank's ops) the call blocks on."""
    tail_us: float = 0.0
    """Measured time from the end of the awaited GPU work to the call's return."""


@dataclass
class GpuOp:
    """One GPU activity of one rank."""

    name: str
    stream: int
    ts: float
    dur: float
    launch: int = -1
    """Index of the launching host call (-1: unknown, no host constraint)."""
    deps: list[int] = field(default_factory=list)
    """Other ops of the same rank this op waits for (event waits, data dependencies)."""
    coll: int = -1
    """Rendezvous id (index into the replay's rendezvous list) or -1."""
    is_comm: bool = False
    is_copy: bool = False
    lag_us: float | None = None
    """Its own launch lag (measured where its stream was idle at launch), else the graph's."""


@dataclass
class RankGraph:
    """One rank's host calls and GPU ops, each list sorted by measured start."""

    calls: list[HostCall]
    ops: list[GpuOp]
    lag_us: float = 0.0
    """The launch lag: the least time from a launch call's start to its op's start."""
    gap_us: float = 0.0
    """The issue gap: least time between back-to-back ops of one stream."""
    stream_lag_us: dict[int, float] = field(default_factory=dict)
    """Per stream, its own launch lag where measured (NCCL streams lag more than compute)."""


@dataclass
class Rendezvous:
    """One collective across ranks: instances `(rank, op)` and the wire time."""

    members: list[tuple[int, int]]
    wire_us: float


@dataclass
class ReplayResult:
    """Predicted times: per rank, per op start/end; per rank, per call start/end."""

    start: list[list[float]]
    end: list[list[float]]
    call_start: list[list[float]]
    call_end: list[list[float]]


def replay(
    ranks: list[RankGraph],
    rendezvous: list[Rendezvous] | None = None,
    *,
    host: bool = True,
    durations: list[list[float]] | None = None,
    launch_overhead_us: float | None = None,
    wire_scale: float = 1.0,
) -> ReplayResult:
    """Evaluate the step; `durations` replaces the ops' durations (per rank, per op).

    Raises ValueError naming the first stuck op if the dependencies have a cycle.
    """
    rdv = rendezvous or []
    # node numbering: per rank, calls then ops; a collective in a rendezvous gets a second
    # node, its end, after all ranks' nodes
    base: list[int] = []
    total = 0
    for g in ranks:
        base.append(total)
        total += len(g.calls) + len(g.ops)
    end_node: dict[tuple[int, int], int] = {}
    for k, r in enumerate(rdv):
        for member in r.members:
            end_node[member] = total + k
    n_nodes = total + len(rdv)
    succs: list[list[int]] = [[] for _ in range(n_nodes)]
    indeg = [0] * n_nodes

    def edge(a: int, b: int) -> None:
        succs[a].append(b)
        indeg[b] += 1

    for r, g in enumerate(ranks):
        b0 = base[r]
        nc = len(g.calls)
        last_thread: dict[int, int] = {}
        for i, c in enumerate(g.calls):
            if i > 0:
                edge(b0 + i - 1, b0 + i)
            prev = last_thread.get(c.thread)
            if prev is not None and prev != i - 1:
                edge(b0 + prev, b0 + i)
            last_thread[c.thread] = i
            for w in c.waits:
                edge(_op_done(b0 + nc + w, (r, w), end_node), b0 + i)
        last_stream: dict[int, int] = {}
        for j, o in enumerate(g.ops):
            node = b0 + nc + j
            if host and o.launch >= 0:
                edge(b0 + o.launch, node)
            prev = last_stream.get(o.stream)
            if prev is not None:
                edge(_op_done(b0 + nc + prev, (r, prev), end_node), node)
            last_stream[o.stream] = j
            for d in o.deps:
                edge(_op_done(b0 + nc + d, (r, d), end_node), node)
            if (r, j) in end_node:
                edge(node, end_node[(r, j)])

    start = [[0.0] * len(g.ops) for g in ranks]
    end = [[0.0] * len(g.ops) for g in ranks]
    cstart = [[0.0] * len(g.calls) for g in ranks]
    cend = [[0.0] * len(g.calls) for g in ranks]
    owner: list[tuple[int, int]] = []
    for r, g in enumerate(ranks):
        owner.extend((r, i) for i in range(len(g.calls) + len(g.ops)))
    thread_prev = [_prev_same(g.calls, lambda c: c.thread) for g in ranks]
    stream_prev = [_prev_same(g.ops, lambda o: o.stream) for g in ranks]
    lags = [g.stream_lag_us for g in ranks]
    queue = deque(i for i in range(n_nodes) if indeg[i] == 0)
    done = 0
    while queue:
        node = queue.popleft()
        done += 1
        if node >= total:
            r_ = rdv[node - total]
            t = max(start[rk][j] for rk, j in r_.members) + r_.wire_us * wire_scale
            for rk, j in r_.members:
                end[rk][j] = t
        else:
            r, i = owner[node]
            g = ranks[r]
            nc = len(g.calls)
            if i < nc:
                c = g.calls[i]
                t = c.ts
                if i > 0:
                    p = g.calls[i - 1]
                    if c.ts >= p.ts + p.dur:  # after the previous call ended: the measured gap
                        t = cend[r][i - 1] + (c.ts - (p.ts + p.dur))
                    else:  # another thread's call still running: the measured offset
                        t = cstart[r][i - 1] + (c.ts - p.ts)
                    k = thread_prev[r][i]
                    if k >= 0:
                        q = g.calls[k]
                        t = max(t, cend[r][k] + (c.ts - (q.ts + q.dur)))
                cstart[r][i] = t
                if c.waits:
                    waited = max(end[r][w] for w in c.waits)
                    cend[r][i] = max(t, waited) + c.tail_us
                else:
                    d = c.dur
                    if launch_overhead_us is not None and c.launches:
                        d = launch_overhead_us
                    cend[r][i] = t + d
            else:
                j = i - nc
                o = g.ops[j]
                t = 0.0
                if host and o.launch >= 0:
                    lag = o.lag_us if o.lag_us is not None else lags[r].get(o.stream, g.lag_us)
                    t = cstart[r][o.launch] + lag
                p = stream_prev[r][j]
                if p >= 0 and end[r][p] + g.gap_us > t:
                    t = end[r][p] + g.gap_us
                for d_ in o.deps:
                    if end[r][d_] > t:
                        t = end[r][d_]
                start[r][j] = t
                if (r, j) not in end_node:
                    end[r][j] = t + (o.dur if durations is None else durations[r][j])
        for s in succs[node]:
            indeg[s] -= 1
            if indeg[s] == 0:
                queue.append(s)
    if done != n_nodes:
        stuck = next(i for i in range(n_nodes) if indeg[i] > 0)
        if stuck >= total:
            raise ValueError(
                f"collective rendezvous {stuck - total} never completes: the ranks "
                "issue their collectives in different orders (a cycle)"
            )
        r, i = owner[stuck]
        nc = len(ranks[r].calls)
        what = f"host call {i}" if i < nc else f"GPU op {i - nc} ({ranks[r].ops[i - nc].name})"
        raise ValueError(f"rank {r}: {what} never runs: the dependencies have a cycle")
    return ReplayResult(start, end, cstart, cend)


def _op_done(node: int, key: tuple[int, int], end_node: dict[tuple[int, int], int]) -> int:
    """The node whose evaluation fixes the op's end (a rendezvous' end node for collectives)."""
    return end_node.get(key, node)


def _prev_same(items: list, key) -> list[int]:  # noqa: ANN001 - tiny helper
    """Per item, the index of the previous item with the same key (-1 for the first)."""
    last: dict[int, int] = {}
    prev = [-1] * len(items)
    for j, x in enumerate(items):
        k = key(x)
        prev[j] = last.get(k, -1)
        last[k] = j
    return prev
