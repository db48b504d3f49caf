"""The simulation engine: fixed-order evaluation and list scheduling of one block on a
compute stream and k communication streams.

Everything here works on plain Python data: a graph given as `preds`/`succs` (lists of node
indices), `is_comm` flags, and one duration (µs) per node. `DataflowGraph` has that shape;
the plain `graph.core.Problem` too. No IR is touched in any loop.

Streams: stream 0 is the compute stream; collectives run on the communication streams
1..k. Each stream executes one op at a time.

**Fixed-order evaluation** (DESIGN.md "Semantics of order", lancet-algorithms.md §5.2). Ops
launch in block order. A compute op goes to stream 0. A collective goes to the communication
stream that frees earliest (the smallest end time of the last collective assigned to it),
ties to the lowest stream id; collectives are assigned in block order, so with k = 1 this is
simply "the comm stream". An op starts at `max(its stream is free, all producers ended)`.
With `overlap_slowdown == 1.0` this is one O(V + E) pass over the order.

**Overlap slowdown f >= 1.** A compute op progresses at rate 1/f while at least one
collective runs (on any comm stream) and at rate 1 otherwise; collectives are never slowed.
The compute op's end is integrated piecewise between events (op starts and ends): a compute
op of duration d that runs alone for a µs and alongside a collective for b µs finishes when
`a + b / f = d`. This needs an event-driven simulation (O((V + E) log V)). With f = 1.0 it
gives exactly the plain formula: times are only added, never rescaled. Multi-stream
assignment in the event simulation follows the same rule (a collective is assigned, in block
order, to a comm stream as soon as one has nothing queued; among those, the one that freed
earliest, then the lowest id), which equals the formula except possibly when collectives of
duration 0 tie with a stream's release time.

**List scheduling** (Lancet's `ScheduleGenerator`, lancet-algorithms.md §5.1), made
deterministic: one ready queue for the compute stream and one for the comm streams, each
max-priority first, ties by readiness time, then node index. Events (op ends) are processed
in (time, launch sequence) order; all events of one instant are processed before the idle
streams fetch new work, so ops made ready at time t compete for a stream freed at t. A
collective takes the idle comm stream that freed earliest (ties: lowest id). Ops in the
`delayed` set (default: Lancet's weight-update-first ops, i.e. consumers of an allreduce
result) wait in a held queue until nothing else runs or is ready; then all held ops are
released at once (phase 2) and no further op is delayed.

**Launch overhead L >= 0** (`launch_overhead_us`, default 0 = none). A host thread launches
the ops one after another, each launch taking L µs, and an op cannot start before its launch
ended: the k-th op launched (from 1) starts no earlier than k x L. For a fixed-order evaluation
the host launches in the given order; for list scheduling in the order the scheduler starts
them. With L = 0 every formula above is unchanged (times are identical). In the event
simulation an op whose launch has not ended waits at the head of its queue; the launch's end
is an event of its own.

**Host syncs** (`host_syncs`, one flag per node: `trace.host_sync`, a PyTorch `.item()`). A
host sync is a zero-cost node (its duration is ignored) on no stream (`Timeline.stream` =
`HOST_STREAM`, in no chain) and no launch: the host waits there until its producers (the awaited
GPU ops) end. The host's clock is `h = base + m x L`, m ops launched since the host was last
released at `base` (without syncs base stays 0 and m is the launch count: the formula above,
bit for bit). When the host
reaches a sync whose producers end at `t`, the sync happens at `r = max(h, t)`; if `r > h` the
host restarts there (`base = r`, m = 0), so the next op launched starts no earlier than r + L,
the one after r + 2L, ...: the GPU drains while the host refills the queue. With L = 0 the host
has no clock and a sync is just its edges (it happens when its producers end; times unchanged).
Fixed-order evaluation: the host reaches the syncs in the given order, each only after the
previous one (the plain formula in one pass; the event simulation gives the ops after a sync
the host has not passed no launch time yet, and passes the syncs in order as their producers
end). List scheduling: the host takes a sync as soon as its producers end (it needs no
stream), and every op the scheduler starts after that was launched after it. A sync that
happens at the instant its producers end releases its consumers in the same instant's batch.
There is one host: a trace's syncs block only their own thread (the import feeds a sync's
token only to that thread's ops), but with L > 0 this one clock stalls every later launch.

**Virtual nodes** (`virtual`, one flag per node: the `trace.payload` in front of an imported
collective, `graph.dataflow.is_virtual`). Bookkeeping that is no GPU work: a zero-cost node (its
duration is ignored) on no stream (`HOST_STREAM`, in no chain) and no launch, that happens
when its producers end and never holds the host back: a host sync at L = 0, on every path and
for every L (the same per-node flags, `_no_stream`: `SYNC` nodes also hold the host). So an
imported collective waits only for its own dependencies, not for the compute launched before
it, and with L > 0 its payload costs no launch.

**Copy engines** (`copies`, one `CopyQueue` per node: 0 / False no copy, 1 / True the queue of
the rest (device to device, peer to peer, memset), 2 host to device, 3 device to host). GPUs
copy memory on dedicated copy engines, one per direction, not on the SMs, so a copy runs
alongside a kernel and a host-to-device copy alongside a device-to-host one. Each queue that
some node uses gets a stream of its own, in queue order from `Timeline.copy_stream` = k + 1
(`Timeline.copy_queues` names them); its copies run there in their (launch) order, one at a
time, and compute ops no longer wait for them except through their dependencies. Copies are
not slowed by communication and do not slow compute. Without copies (every model our importers
and generators build except imported traces) no such stream exists and every time is the same
as without the feature.

**Launch order** (`Timeline.order`): all ops sorted by start time; at equal start compute
before communication; then by launch sequence (the order in which the simulator launched
them; for a fixed-order evaluation, the block order). A zero-duration collective and its
compute consumer can start at the same instant: then the producer still comes first (the
order is always a topological order of the data and stream-order edges).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from typing import Protocol

from lancet_mlir.dialects.vocab import CollectiveKind, CopyQueue
from lancet_mlir.graph.core import Graph
from lancet_mlir.sim.model import COMPUTE_STREAM, HOST_STREAM, Timeline


# ---- input checks ----------------------------------------------------------------------------
def _check_stream_less(
    graph: Graph,
    copies: Sequence[int] | None,
    flags: Sequence[bool] | None,
    what: str,
    kind: str,
) -> None:
    """Flags of stream-less nodes (host syncs, virtual nodes): one per node, none on a
    collective or a copy."""
    if flags is None:
        return
    n = len(graph.preds)
    if len(flags) != n:
        raise ValueError(f"{len(flags)} {what} for a graph of {n} ops")
    for i, f in enumerate(flags):
        if f and (graph.is_comm[i] or (copies is not None and copies[i])):
            raise ValueError(f"node {i}: {kind} cannot be a collective or a copy")


def _check_inputs(
    graph: Graph,
    durations: Sequence[float],
    num_comm_streams: int,
    overlap_slowdown: float,
    launch_overhead_us: float = 0.0,
    copies: Sequence[int] | None = None,
    host_syncs: Sequence[bool] | None = None,
    virtual: Sequence[bool] | None = None,
) -> int:
    n = len(graph.preds)
    if len(durations) != n:
        raise ValueError(f"{len(durations)} durations for a graph of {n} ops")
    if copies is not None:
        if len(copies) != n:
            raise ValueError(f"{len(copies)} copy flags for a graph of {n} ops")
        for i, c in enumerate(copies):
            if int(c) not in _QUEUES:
                raise ValueError(f"copy queue of node {i} must be a CopyQueue (0..3), got {c}")
        if any(c and m for c, m in zip(copies, graph.is_comm, strict=True)):
            raise ValueError("a collective cannot be a copy")
    _check_stream_less(graph, copies, host_syncs, "host-sync flags", "a host sync")
    _check_stream_less(graph, copies, virtual, "virtual-node flags", "a virtual node")
    for i, d in enumerate(durations):
        if not (d >= 0.0 and math.isfinite(d)):
            raise ValueError(f"duration of node {i} must be finite and >= 0, got {d}")
    if num_comm_streams < 1:
        raise ValueError(f"num_comm_streams must be >= 1, got {num_comm_streams}")
    if not (overlap_slowdown >= 1.0 and math.isfinite(overlap_slowdown)):
        raise ValueError(f"overlap_slowdown must be finite and >= 1.0, got {overlap_slowdown}")
    if not (launch_overhead_us >= 0.0 and math.isfinite(launch_overhead_us)):
        raise ValueError(f"launch_overhead_us must be finite and >= 0, got {launch_overhead_us}")
    return n


_QUEUES = frozenset(int(q) for q in CopyQueue)


def _check_order(order: Sequence[int], n: int) -> list[int]:
    order = list(order)
    seen = [False] * n
    for i in order:
        if not 0 <= i < n or seen[i]:
            raise ValueError("order must be a permutation of the graph's nodes")
        seen[i] = True
    if len(order) != n:
        raise ValueError("order must be a permutation of the graph's nodes")
    return order


def _copy_streams(copies: Sequence[int] | None, k: int) -> tuple[list[int] | None, tuple[int, ...]]:
    """(each node's copy stream, -1 for a node that is no copy; the `CopyQueue` of the copy
    streams k + 1, k + 2, ...): one stream per queue some node uses, in queue order.
    (None, ()) when no node is a copy (no copy stream)."""
    if copies is None or not any(copies):
        return None, ()
    queues = tuple(sorted({int(c) for c in copies if c}))
    stream_of = {q: k + 1 + r for r, q in enumerate(queues)}
    return [stream_of[int(c)] if c else -1 for c in copies], queues


ON_STREAM, SYNC, VIRTUAL = 0, 1, 2
"""What `_no_stream` says of a node: an op on a stream, a host sync (True in a list of
host-sync flags), a virtual node."""


def _no_stream(
    host_syncs: Sequence[bool] | None, virtual: Sequence[bool] | None
) -> list[int] | None:
    """Per node `ON_STREAM`, `VIRTUAL` or `SYNC` (a host sync wins over a virtual flag), or
    None when every node runs on a stream (then every path is the one without them)."""
    syncs = host_syncs if host_syncs is not None and any(host_syncs) else None
    virt = virtual if virtual is not None and any(virtual) else None
    if syncs is None and virt is None:
        return None
    n = len(syncs if syncs is not None else virt)  # type: ignore[arg-type]
    return [
        SYNC if syncs is not None and syncs[i] else VIRTUAL if virt is not None and virt[i] else 0
        for i in range(n)
    ]


# ---- fixed-order evaluation ------------------------------------------------------------------
def evaluate_fixed_order(
    graph: Graph,
    durations: Sequence[float],
    *,
    num_comm_streams: int = 1,
    overlap_slowdown: float = 1.0,
    order: Sequence[int] | None = None,
    launch_overhead_us: float = 0.0,
    copies: Sequence[int] | None = None,
    host_syncs: Sequence[bool] | None = None,
    virtual: Sequence[bool] | None = None,
) -> Timeline:
    """Simulate ops launched in `order` (default: node order = block order); `copies` gives
    the copy-engine queue of each node (memcpy / memset; a bool list means one queue),
    `host_syncs` flags the host syncs and `virtual` the virtual nodes (module doc).

    See the module docstring for the exact semantics. Raises ValueError if the order uses a
    value before its producer ran (not a topological order).
    """
    n = _check_inputs(graph, durations, num_comm_streams, overlap_slowdown, launch_overhead_us,
                      copies, host_syncs, virtual)  # fmt: skip
    seq = list(range(n)) if order is None else _check_order(order, n)
    nostream = _no_stream(host_syncs, virtual)
    if overlap_slowdown == 1.0:
        return _fixed_order_plain(graph, durations, seq, num_comm_streams, launch_overhead_us,
                                  copies, nostream)  # fmt: skip
    return _fixed_order_events(graph, durations, seq, num_comm_streams, overlap_slowdown,
                               launch_overhead_us, copies, nostream)  # fmt: skip


def _fixed_order_plain(
    graph: Graph,
    durations: Sequence[float],
    order: list[int],
    k: int,
    overhead: float = 0.0,
    copies: Sequence[int] | None = None,
    nostream: list[int] | None = None,
) -> Timeline:
    """The O(V + E) formula: start = max(stream free, producers' end, launch end);
    `nostream` as `_no_stream` gives it."""
    n = len(order)
    preds, is_comm = graph.preds, graph.is_comm
    copy, queues = _copy_streams(copies, k)
    start = [0.0] * n
    end = [0.0] * n
    stream = [0] * n
    launch_seq = [0] * n
    placed = [False] * n
    streams = k + 1 + len(queues)
    free = [0.0] * streams
    chains: list[list[int]] = [[] for _ in range(streams)]
    base, launched = 0.0, 0  # the host: `launched` ops since it was released at `base`
    for pos, i in enumerate(order):
        kind = nostream[i] if nostream is not None else ON_STREAM
        # a launch ends at the host's clock + L; a sync happens at the host's clock; a
        # virtual node only when its producers end
        if overhead and kind != VIRTUAL:
            ready = base + (launched + (0 if kind == SYNC else 1)) * overhead
        else:
            ready = 0.0
        for p in preds[i]:
            if not placed[p]:
                raise ValueError(f"order launches node {i} before its producer {p}")
            if end[p] > ready:
                ready = end[p]
        launch_seq[i] = pos
        placed[i] = True
        if kind:
            if kind == SYNC and overhead and ready > base + launched * overhead:
                base, launched = ready, 0  # the host waited: it launches again from here
            start[i] = end[i] = ready
            stream[i] = HOST_STREAM
            continue
        launched += 1
        if is_comm[i]:
            s = 1 if k == 1 else _earliest_free(free, k)
        else:
            s = copy[i] if copy is not None and copy[i] > 0 else 0
        t = free[s] if free[s] > ready else ready
        start[i] = t
        end[i] = free[s] = t + durations[i]
        stream[i] = s
        chains[s].append(i)
    makespan = max(end, default=0.0)
    return Timeline(
        start,
        end,
        stream,
        launch_seq,
        chains,
        makespan,
        k,
        1.0,
        graph.preds,
        k + 1 if copy is not None else None,
        queues,
    )


def _earliest_free(free: list[float], k: int) -> int:
    best = 1
    for s in range(2, k + 1):
        if free[s] < free[best]:
            best = s
    return best


class _Engine:
    """Event-driven core shared by the fixed-order evaluator (slowdown) and list scheduler.

    Tracks the time, the running compute op (with its predicted end under the current
    rate), running collectives and copies (a heap of (end, seq, node, stream), which also
    holds host syncs that happen later), per-node counts of unfinished producers, the host's
    clock and the resulting timeline. With `order` (a fixed-order evaluation with launch
    overhead) the host launches in that order: `launch_at` holds each op's launch end, known
    up to the next host sync the host has not passed (inf beyond it).
    """

    def __init__(
        self,
        graph: Graph,
        durations: Sequence[float],
        k: int,
        f: float,
        overhead: float = 0.0,
        order: list[int] | None = None,
        copies: Sequence[int] | None = None,
        nostream: list[int] | None = None,
    ):
        n = len(graph.preds)
        self.overhead = overhead
        self.timers: list[float] = []
        self.graph = graph
        self.dur = durations
        self.k = k
        self.f = f
        self.waiting = [len(ps) for ps in graph.preds]
        self.start = [0.0] * n
        self.end = [0.0] * n
        self.stream = [-1] * n
        self.seq = [-1] * n
        self.finished = [False] * n
        self.copy, self.queues = _copy_streams(copies, k)
        """Each node's copy stream (-1: no copy), None without copies; the streams' queues."""
        self.nostream = nostream
        """`_no_stream`'s flags (None: every node on a stream)."""
        streams = k + 1 + len(self.queues)
        self.chains: list[list[int]] = [[] for _ in range(streams)]
        self.t = 0.0
        self.next_seq = 0
        self.done = 0
        self.comp_node = -1
        self.comp_end = 0.0
        self.comp_factor = 1.0
        self.comm_heap: list[tuple[float, int, int, int]] = []
        self.comm_busy = [False] * streams  # comm streams and the copy streams
        self.free_at = [0.0] * streams
        self.active_comm = 0
        # the host: `launches` ops launched since it was released at `base` (module doc)
        self.base = 0.0
        self.launches = 0
        self.order = order if overhead else None
        self.launch_at: list[float] | None = None
        self.sync_at: list[float] = [math.inf] * n  # when a sync's producers had all ended
        self.host_pos = 0
        if self.order is not None:
            self.launch_at = [math.inf] * n
            self._advance_host()

    def _advance_host(self) -> None:
        """Launch times of the ops of `order` from the host's position to the next sync."""
        order, launch_at, nostream = self.order, self.launch_at, self.nostream
        assert order is not None
        assert launch_at is not None
        while self.host_pos < len(order):
            i = order[self.host_pos]
            if nostream is not None and nostream[i]:
                if nostream[i] == SYNC:
                    return
                self.host_pos += 1  # a virtual node: the host launches nothing for it
                continue
            self.launches += 1
            launch_at[i] = self.base + self.launches * self.overhead
            self.host_pos += 1

    def idle_comm_stream(self) -> int:
        """The idle comm stream that freed earliest (ties: lowest id), or -1."""
        best = -1
        for s in range(1, self.k + 1):
            if not self.comm_busy[s] and (best < 0 or self.free_at[s] < self.free_at[best]):
                best = s
        return best

    def launched(self, i: int) -> bool:
        """Whether node `i`'s host launch has ended (else a timer event is set for it, unless
        the host has not reached it yet: then passing a sync brings a later event)."""
        if not self.overhead:
            return True
        ready = (
            self.launch_at[i]
            if self.launch_at is not None
            else self.base + (self.launches + 1) * self.overhead
        )
        if ready <= self.t:
            return True
        if ready < math.inf:
            heapq.heappush(self.timers, ready)
        return False

    def launch(self, i: int, s: int) -> None:
        """Start node `i` on stream `s` now."""
        t = self.t
        self.start[i] = t
        self.stream[i] = s
        self.seq[i] = self.next_seq
        self.next_seq += 1
        if self.launch_at is None:
            self.launches += 1
        self.chains[s].append(i)
        if s == COMPUTE_STREAM:
            self.comp_node = i
            self.comp_factor = self.f if self.active_comm else 1.0
            self.comp_end = t + self.dur[i] * self.comp_factor
            return
        self.comm_busy[s] = True
        if s <= self.k:  # a copy stream's copies are no communication
            self.active_comm += 1
        heapq.heappush(self.comm_heap, (t + self.dur[i], self.seq[i], i, s))

    def sync_ready(self, i: int, t: float) -> list[int]:
        """Host sync `i`'s producers have all ended (at `t`, now). Returns the syncs that
        happen now (`i`, and in a fixed order the later syncs the host passes with it); a sync
        that happens later is an event. See the module docstring "Host syncs"."""
        overhead = self.overhead
        if not overhead:
            return [i] if self._sync_at(i, t) else []
        if self.order is None:  # list scheduling: the host takes the sync now
            return [i] if self._pass_sync(i, t) else []
        self.sync_at[i] = t
        now: list[int] = []
        while self.host_pos < len(self.order):
            j = self.order[self.host_pos]
            if self.sync_at[j] == math.inf:
                break  # the host waits at a sync whose producers still run
            self.host_pos += 1
            if self._pass_sync(j, self.sync_at[j]):
                now.append(j)
            self._advance_host()
        return now

    def virtual_ready(self, i: int, t: float) -> list[int]:
        """Virtual node `i`'s producers have all ended (at `t`, now): it happens now, on no
        stream and without the host (a host sync at L = 0). Returns [i]."""
        self._sync_at(i, t)
        return [i]

    def _pass_sync(self, i: int, t: float) -> bool:
        """The host reaches sync `i` whose producers ended at `t`: it happens at max(host
        clock, t), where the host restarts. True if that is now."""
        host = self.base + self.launches * self.overhead
        if t > host:
            self.base, self.launches = t, 0
            host = t
        return self._sync_at(i, host)

    def _sync_at(self, i: int, at: float) -> bool:
        """Sync `i` happens at `at` (>= now): now (True) or by an event (False)."""
        self.start[i] = at
        self.stream[i] = HOST_STREAM
        self.seq[i] = self.next_seq
        self.next_seq += 1
        if at <= self.t:
            self.end[i] = at
            self.finished[i] = True
            self.done += 1
            return True
        heapq.heappush(self.comm_heap, (at, self.seq[i], i, HOST_STREAM))
        return False

    def update_rate(self) -> None:
        """Re-predict the running compute op's end after communication started or stopped."""
        if self.comp_node < 0 or self.f == 1.0:
            return
        factor = self.f if self.active_comm else 1.0
        if factor == self.comp_factor:
            return
        t = self.t
        # remaining work (µs at full speed) = time left at the old rate / old factor
        self.comp_end = t + (self.comp_end - t) / self.comp_factor * factor
        self.comp_factor = factor

    def pop_finished(self) -> list[int] | None:
        """Advance to the next event time and finish every op ending then, in launch order.

        Returns None when nothing runs.
        """
        running_comp = self.comp_node >= 0
        if not running_comp and not self.comm_heap and not self.timers:
            return None
        t = self.comp_end if running_comp else math.inf
        if self.comm_heap and self.comm_heap[0][0] < t:
            t = self.comm_heap[0][0]
        while self.timers and self.timers[0] <= self.t:
            heapq.heappop(self.timers)
        if self.timers and self.timers[0] < t:
            t = heapq.heappop(self.timers)
            self.t = t
            return []
        if t == math.inf:
            return None
        batch: list[tuple[int, int, int]] = []
        while self.comm_heap and self.comm_heap[0][0] == t:
            _, seq, i, s = heapq.heappop(self.comm_heap)
            batch.append((seq, i, s))
        if running_comp and self.comp_end == t:
            batch.append((self.seq[self.comp_node], self.comp_node, COMPUTE_STREAM))
        batch.sort()
        self.t = t
        out: list[int] = []
        for _, i, s in batch:
            self.end[i] = t
            self.finished[i] = True
            self.done += 1
            if s == COMPUTE_STREAM:
                self.comp_node = -1
            elif s != HOST_STREAM:
                self.comm_busy[s] = False
                self.free_at[s] = t
                if s <= self.k:
                    self.active_comm -= 1
            out.append(i)
        return out

    def timeline(self) -> Timeline:
        """The finished timeline; raises ValueError if some op could never start."""
        n = len(self.start)
        if self.done != n:
            stuck = next(i for i in range(n) if not self.finished[i])
            raise ValueError(
                f"node {stuck} never ran: the order is not executable (cycle or use before definition)"
            )
        makespan = max(self.end, default=0.0)
        return Timeline(
            self.start,
            self.end,
            self.stream,
            self.seq,
            self.chains,
            makespan,
            self.k,
            self.f,
            self.graph.preds,
            self.k + 1 if self.copy is not None else None,
            self.queues,
        )


class _Policy(Protocol):
    def on_ready(self, i: int, t: float) -> None: ...

    def fetch(self, e: _Engine) -> None: ...

    def release(self) -> bool: ...


def _hand_on(engine: _Engine, policy: _Policy, nodes: list[int], t: float) -> None:
    """Nodes whose producers have all ended (at `t`): ops go to the policy, host syncs and
    virtual nodes to the engine; the consumers of one that happens at once become ready in
    turn."""
    succs, waiting, nostream = engine.graph.succs, engine.waiting, engine.nostream
    work = list(nodes)
    k = 0
    while k < len(work):
        i = work[k]
        k += 1
        if nostream is None or not nostream[i]:
            policy.on_ready(i, t)
            continue
        now = engine.sync_ready(i, t) if nostream[i] == SYNC else engine.virtual_ready(i, t)
        for j in now:
            for s in succs[j]:
                waiting[s] -= 1
                if waiting[s] == 0:
                    work.append(s)


def _run(engine: _Engine, policy: _Policy) -> Timeline:
    """The event loop: fetch work for idle streams, advance to the next event, repeat."""
    succs = engine.graph.succs
    waiting = engine.waiting
    _hand_on(engine, policy, [i for i, w in enumerate(waiting) if w == 0], 0.0)
    policy.fetch(engine)
    engine.update_rate()
    while True:
        finished = engine.pop_finished()
        if finished is None:
            if not policy.release():
                break
        else:
            ready: list[int] = []
            for i in finished:
                for s in succs[i]:
                    waiting[s] -= 1
                    if waiting[s] == 0:
                        ready.append(s)
            _hand_on(engine, policy, ready, engine.t)
        policy.fetch(engine)
        engine.update_rate()
    return engine.timeline()


class _FixedOrderPolicy:
    """Launch compute ops, collectives and each queue's copies in the given order (one
    in-order queue each); host syncs are the engine's."""

    def __init__(self, engine: _Engine, order: list[int]):
        is_comm = engine.graph.is_comm
        copy = engine.copy or [-1] * len(order)
        nostream = engine.nostream or [ON_STREAM] * len(order)
        self.comp = [i for i in order if not is_comm[i] and copy[i] < 0 and not nostream[i]]
        self.comm = [i for i in order if is_comm[i]]
        self.copies: list[list[int]] = [[] for _ in engine.queues]
        for i in order:
            if copy[i] > 0:
                self.copies[copy[i] - engine.k - 1].append(i)
        self.next_copy = [0] * len(self.copies)
        self.next_comp = 0
        self.next_comm = 0
        self.assigned = [-1] * (engine.k + 1)  # collective queued or running on stream s

    def on_ready(self, i: int, t: float) -> None:
        """Readiness is read from the engine's counters when the op reaches a queue head."""

    def release(self) -> bool:
        """Nothing is ever held back."""
        return False

    def fetch(self, e: _Engine) -> None:
        """Start the queue heads whose stream is idle and whose producers have all ended."""
        if e.comp_node < 0 and self.next_comp < len(self.comp):
            i = self.comp[self.next_comp]
            if e.waiting[i] == 0 and e.launched(i):
                e.launch(i, COMPUTE_STREAM)
                self.next_comp += 1
        for q, queue in enumerate(self.copies):
            cs = e.k + 1 + q
            if not e.comm_busy[cs] and self.next_copy[q] < len(queue):
                i = queue[self.next_copy[q]]
                if e.waiting[i] == 0 and e.launched(i):
                    e.launch(i, cs)
                    self.next_copy[q] += 1
        assigned = self.assigned
        for s in range(1, e.k + 1):
            if assigned[s] >= 0 and e.finished[assigned[s]]:
                assigned[s] = -1
        while self.next_comm < len(self.comm):
            s = self._empty_stream(e)
            if s < 0:
                break
            assigned[s] = self.comm[self.next_comm]
            self.next_comm += 1
        for s in range(1, e.k + 1):
            i = assigned[s]
            if (
                i >= 0
                and not e.comm_busy[s]
                and e.stream[i] < 0
                and e.waiting[i] == 0
                and e.launched(i)
            ):
                e.launch(i, s)

    def _empty_stream(self, e: _Engine) -> int:
        best = -1
        for s in range(1, e.k + 1):
            if self.assigned[s] < 0 and (best < 0 or e.free_at[s] < e.free_at[best]):
                best = s
        return best


def _fixed_order_events(
    graph: Graph,
    durations: Sequence[float],
    order: list[int],
    k: int,
    f: float,
    overhead: float = 0.0,
    copies: Sequence[int] | None = None,
    nostream: list[int] | None = None,
) -> Timeline:
    engine = _Engine(graph, durations, k, f, overhead, order, copies, nostream)
    return _run(engine, _FixedOrderPolicy(engine, order))


# ---- list scheduling ---------------------------------------------------------------------------
class _ListPolicy:
    """Lancet's list scheduler: per-stream ready heaps keyed (-priority, ready time, index)."""

    def __init__(
        self,
        is_comm: list[bool],
        priorities: Sequence[float],
        delayed: list[bool],
        engine: _Engine,
    ):
        self.is_comm = is_comm
        self.priorities = priorities
        self.delayed = delayed
        # queue of each node: 0 compute, 1 comm, 2 + q the copy stream k + 1 + q
        copy, k = engine.copy, engine.k
        self.queue = [
            1 if c else copy[i] - k + 1 if copy is not None and copy[i] > 0 else 0
            for i, c in enumerate(is_comm)
        ]
        self.ready: tuple[list[tuple[float, float, int]], ...] = tuple(
            [] for _ in range(2 + len(engine.queues))
        )
        self.held: list[tuple[float, float, int]] = []
        self.released = not any(delayed)

    def on_ready(self, i: int, t: float) -> None:
        """Queue a newly ready op (held back if it is delayed and phase 2 has not begun)."""
        entry = (-self.priorities[i], t, i)
        if not self.released and self.delayed[i]:
            self.held.append(entry)
            return
        heapq.heappush(self.ready[self.queue[i]], entry)

    def release(self) -> bool:
        """Phase 2: move every held op to its ready queue; False if nothing was held."""
        if self.released or not self.held:
            return False
        self.released = True
        for entry in self.held:
            heapq.heappush(self.ready[self.queue[entry[2]]], entry)
        self.held = []
        return True

    def fetch(self, e: _Engine) -> None:
        """Start the best ready op on each idle stream."""
        comp_q, comm_q = self.ready[0], self.ready[1]
        if e.comp_node < 0 and comp_q and e.launched(comp_q[0][2]):
            e.launch(heapq.heappop(comp_q)[2], COMPUTE_STREAM)
        for q, copy_q in enumerate(self.ready[2:]):
            cs = e.k + 1 + q
            if copy_q and not e.comm_busy[cs] and e.launched(copy_q[0][2]):
                e.launch(heapq.heappop(copy_q)[2], cs)
        while comm_q:
            s = e.idle_comm_stream()
            if s < 0 or not e.launched(comm_q[0][2]):
                break
            e.launch(heapq.heappop(comm_q)[2], s)


def weight_update_first(graph: Graph) -> list[int]:
    """Ops that consume an allreduce result (Lancet's `IsWeightUpdateFirstOp`, §1.4)."""
    kinds = graph.comm_kind
    return [
        i
        for i, ps in enumerate(graph.preds)
        if any(kinds[p] == CollectiveKind.ALLREDUCE for p in ps)
    ]


def list_schedule(
    graph: Graph,
    durations: Sequence[float],
    *,
    priorities: Sequence[float] | None = None,
    delayed: Iterable[int] | None = None,
    num_comm_streams: int = 1,
    overlap_slowdown: float = 1.0,
    launch_overhead_us: float = 0.0,
    copies: Sequence[int] | None = None,
    host_syncs: Sequence[bool] | None = None,
    virtual: Sequence[bool] | None = None,
) -> Timeline:
    """Lancet's list scheduler (lancet-algorithms.md §5.1), deterministic.

    `priorities` (default all equal): larger runs first. `delayed` (default
    `weight_update_first(graph)`): held back until nothing else can run. `copies`: each
    node's copy-engine queue (memcpy / memset; module doc), `host_syncs`: the host syncs,
    `virtual`: the virtual nodes. Raises ValueError if the graph has a cycle.
    """
    n = _check_inputs(graph, durations, num_comm_streams, overlap_slowdown, launch_overhead_us,
                      copies, host_syncs, virtual)  # fmt: skip
    prio = [0.0] * n if priorities is None else list(priorities)
    if len(prio) != n:
        raise ValueError(f"{len(prio)} priorities for a graph of {n} ops")
    held = [False] * n
    for i in weight_update_first(graph) if delayed is None else delayed:
        if not 0 <= i < n:
            raise ValueError(f"delayed node {i} out of range")
        held[i] = True
    engine = _Engine(graph, durations, num_comm_streams, overlap_slowdown, launch_overhead_us,
                     copies=copies, nostream=_no_stream(host_syncs, virtual))  # fmt: skip
    return _run(engine, _ListPolicy(graph.is_comm, prio, held, engine))


# ---- analysis ----------------------------------------------------------------------------------
