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

**Copy engine** (`copies`, one flag per node: memcpy / memset). GPUs copy memory on
dedicated copy engines, not on the SMs, so a copy runs alongside a kernel. Given `copies` with
at least one copy, the copies run in their (launch) order on a stream of their own,
`Timeline.copy_stream` = k + 1, one at a time, and compute ops no longer wait for them except
through their dependencies. Copies are not slowed by communication and do not slow compute.
Without copies (every model our importers and generators build except imported traces) no such
stream exists and every time is the same as without the feature.

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

from lancet_mlir.dialects.vocab import CollectiveKind
from lancet_mlir.graph.core import Graph
from lancet_mlir.sim.model import COMPUTE_STREAM, Timeline


# ---- input checks ----------------------------------------------------------------------------
def _check_inputs(
    graph: Graph,
    durations: Sequence[float],
    num_comm_streams: int,
    overlap_slowdown: float,
    launch_overhead_us: float = 0.0,
    copies: Sequence[bool] | None = None,
) -> int:
    n = len(graph.preds)
    if len(durations) != n:
        raise ValueError(f"{len(durations)} durations for a graph of {n} ops")
    if copies is not None:
        if len(copies) != n:
            raise ValueError(f"{len(copies)} copy flags for a graph of {n} ops")
        if any(c and m for c, m in zip(copies, graph.is_comm, strict=True)):
            raise ValueError("a collective cannot be a copy")
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


# ---- fixed-order evaluation ------------------------------------------------------------------
def evaluate_fixed_order(
    graph: Graph,
    durations: Sequence[float],
    *,
    num_comm_streams: int = 1,
    overlap_slowdown: float = 1.0,
    order: Sequence[int] | None = None,
    launch_overhead_us: float = 0.0,
    copies: Sequence[bool] | None = None,
) -> Timeline:
    """Simulate ops launched in `order` (default: node order = block order); `copies` flags
    the memcpy / memset nodes that run on the copy engine.

    See the module docstring for the exact semantics. Raises ValueError if the order uses a
    value before its producer ran (not a topological order).
    """
    n = _check_inputs(
        graph, durations, num_comm_streams, overlap_slowdown, launch_overhead_us, copies
    )
    seq = list(range(n)) if order is None else _check_order(order, n)
    copy = _copy_flags(copies)
    if overlap_slowdown == 1.0:
        return _fixed_order_plain(graph, durations, seq, num_comm_streams, launch_overhead_us, copy)
    return _fixed_order_events(
        graph, durations, seq, num_comm_streams, overlap_slowdown, launch_overhead_us, copy
    )


def _copy_flags(copies: Sequence[bool] | None) -> list[bool] | None:
    """The copy flags if some node is a copy, else None (no copy stream)."""
    return list(copies) if copies is not None and any(copies) else None


def _fixed_order_plain(
    graph: Graph,
    durations: Sequence[float],
    order: list[int],
    k: int,
    overhead: float = 0.0,
    copy: list[bool] | None = None,
) -> Timeline:
    """The O(V + E) formula: start = max(stream free, producers' end)."""
    n = len(order)
    preds, is_comm = graph.preds, graph.is_comm
    start = [0.0] * n
    end = [0.0] * n
    stream = [0] * n
    launch_seq = [0] * n
    placed = [False] * n
    streams = k + 2 if copy is not None else k + 1
    free = [0.0] * streams
    chains: list[list[int]] = [[] for _ in range(streams)]
    for pos, i in enumerate(order):
        ready = (pos + 1) * overhead if overhead else 0.0
        for p in preds[i]:
            if not placed[p]:
                raise ValueError(f"order launches node {i} before its producer {p}")
            if end[p] > ready:
                ready = end[p]
        if is_comm[i]:
            s = 1 if k == 1 else _earliest_free(free, k)
        else:
            s = k + 1 if copy is not None and copy[i] else 0
        t = free[s] if free[s] > ready else ready
        start[i] = t
        end[i] = free[s] = t + durations[i]
        stream[i] = s
        launch_seq[i] = pos
        placed[i] = True
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
    rate), running collectives (a heap of (end, seq, node, stream)), per-node counts of
    unfinished producers, and the resulting timeline.
    """

    def __init__(
        self,
        graph: Graph,
        durations: Sequence[float],
        k: int,
        f: float,
        overhead: float = 0.0,
        launch_at: list[float] | None = None,
        copy: list[bool] | None = None,
    ):
        n = len(graph.preds)
        self.overhead = overhead
        self.launch_at = launch_at
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
        self.copy = copy
        self.copy_stream = k + 1 if copy is not None else -1  # -1: no copy stream
        streams = k + 2 if copy is not None else k + 1
        self.chains: list[list[int]] = [[] for _ in range(streams)]
        self.t = 0.0
        self.next_seq = 0
        self.done = 0
        self.comp_node = -1
        self.comp_end = 0.0
        self.comp_factor = 1.0
        self.comm_heap: list[tuple[float, int, int, int]] = []
        self.comm_busy = [False] * streams  # comm streams and the copy stream
        self.free_at = [0.0] * streams
        self.active_comm = 0

    def idle_comm_stream(self) -> int:
        """The idle comm stream that freed earliest (ties: lowest id), or -1."""
        best = -1
        for s in range(1, self.k + 1):
            if not self.comm_busy[s] and (best < 0 or self.free_at[s] < self.free_at[best]):
                best = s
        return best

    def launched(self, i: int) -> bool:
        """Whether node `i`'s host launch has ended (else a timer event is set for it)."""
        if not self.overhead:
            return True
        ready = (
            self.launch_at[i] if self.launch_at is not None else (self.next_seq + 1) * self.overhead
        )
        if ready <= self.t:
            return True
        heapq.heappush(self.timers, ready)
        return False

    def launch(self, i: int, s: int) -> None:
        """Start node `i` on stream `s` now."""
        t = self.t
        self.start[i] = t
        self.stream[i] = s
        self.seq[i] = self.next_seq
        self.next_seq += 1
        self.chains[s].append(i)
        if s == COMPUTE_STREAM:
            self.comp_node = i
            self.comp_factor = self.f if self.active_comm else 1.0
            self.comp_end = t + self.dur[i] * self.comp_factor
            return
        self.comm_busy[s] = True
        if s != self.copy_stream:
            self.active_comm += 1
        heapq.heappush(self.comm_heap, (t + self.dur[i], self.seq[i], i, s))

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
            else:
                self.comm_busy[s] = False
                self.free_at[s] = t
                if s != self.copy_stream:
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
            self.copy_stream if self.copy_stream > 0 else None,
        )


class _Policy(Protocol):
    def on_ready(self, i: int, t: float) -> None: ...

    def fetch(self, e: _Engine) -> None: ...

    def release(self) -> bool: ...


def _run(engine: _Engine, policy: _Policy) -> Timeline:
    """The event loop: fetch work for idle streams, advance to the next event, repeat."""
    succs = engine.graph.succs
    waiting = engine.waiting
    for i, w in enumerate(waiting):
        if w == 0:
            policy.on_ready(i, 0.0)
    policy.fetch(engine)
    engine.update_rate()
    while True:
        finished = engine.pop_finished()
        if finished is None:
            if not policy.release():
                break
        else:
            t = engine.t
            for i in finished:
                for s in succs[i]:
                    waiting[s] -= 1
                    if waiting[s] == 0:
                        policy.on_ready(s, t)
        policy.fetch(engine)
        engine.update_rate()
    return engine.timeline()


class _FixedOrderPolicy:
    """Launch compute ops and collectives in the given order (one in-order queue each)."""

    def __init__(self, engine: _Engine, order: list[int]):
        is_comm = engine.graph.is_comm
        copy = engine.copy or [False] * len(order)
        self.comp = [i for i in order if not is_comm[i] and not copy[i]]
        self.comm = [i for i in order if is_comm[i]]
        self.copies = [i for i in order if copy[i]]
        self.next_copy = 0
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
        cs = e.copy_stream
        if cs > 0 and not e.comm_busy[cs] and self.next_copy < len(self.copies):
            i = self.copies[self.next_copy]
            if e.waiting[i] == 0 and e.launched(i):
                e.launch(i, cs)
                self.next_copy += 1
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
    copy: list[bool] | None = None,
) -> Timeline:
    launch_at = None
    if overhead:
        launch_at = [0.0] * len(order)
        for pos, i in enumerate(order):
            launch_at[i] = (pos + 1) * overhead
    engine = _Engine(graph, durations, k, f, overhead, launch_at, copy)
    return _run(engine, _FixedOrderPolicy(engine, order))


# ---- list scheduling ---------------------------------------------------------------------------
class _ListPolicy:
    """Lancet's list scheduler: per-stream ready heaps keyed (-priority, ready time, index)."""

    def __init__(
        self,
        is_comm: list[bool],
        priorities: Sequence[float],
        delayed: list[bool],
        copy: list[bool] | None = None,
    ):
        self.is_comm = is_comm
        self.priorities = priorities
        self.delayed = delayed
        # queue of each node: 0 compute, 1 comm, 2 copy
        self.queue = [
            1 if c else 2 if copy is not None and copy[i] else 0 for i, c in enumerate(is_comm)
        ]
        self.ready: tuple[list[tuple[float, float, int]], ...] = ([], [], [])
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
        comp_q, comm_q, copy_q = self.ready
        if e.comp_node < 0 and comp_q and e.launched(comp_q[0][2]):
            e.launch(heapq.heappop(comp_q)[2], COMPUTE_STREAM)
        cs = e.copy_stream
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
    copies: Sequence[bool] | None = None,
) -> Timeline:
    """Lancet's list scheduler (lancet-algorithms.md §5.1), deterministic.

    `priorities` (default all equal): larger runs first. `delayed` (default
    `weight_update_first(graph)`): held back until nothing else can run. `copies`: the
    memcpy / memset nodes, run on the copy engine (module doc). Raises ValueError if the graph
    has a cycle.
    """
    n = _check_inputs(
        graph, durations, num_comm_streams, overlap_slowdown, launch_overhead_us, copies
    )
    prio = [0.0] * n if priorities is None else list(priorities)
    if len(prio) != n:
        raise ValueError(f"{len(prio)} priorities for a graph of {n} ops")
    held = [False] * n
    for i in weight_update_first(graph) if delayed is None else delayed:
        if not 0 <= i < n:
            raise ValueError(f"delayed node {i} out of range")
        held[i] = True
    copy = _copy_flags(copies)
    engine = _Engine(
        graph, durations, num_comm_streams, overlap_slowdown, launch_overhead_us, copy=copy
    )
    return _run(engine, _ListPolicy(graph.is_comm, prio, held, copy))


# ---- analysis ----------------------------------------------------------------------------------
