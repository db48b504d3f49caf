"""Timeline simulation of one block on a compute stream and k communication streams.

Everything here works on plain Python data: a graph given as `preds`/`succs` (lists of node
indices), `is_comm` flags, and one duration (µs) per node. `DataflowGraph` has that shape;
`TaskGraph` is a light stand-in for tests and benchmarks. No IR is touched in any loop.

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
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

COMPUTE_STREAM = 0
"""Stream id of the compute stream; communication streams are 1..k."""


class GraphLike(Protocol):
    """What the simulator reads from a graph: per-node producer/consumer lists, comm flags and
    collective kinds (`comm_kind[i]`: `allreduce`, `all_to_all`, ..., None for compute).
    `DataflowGraph`, `TaskGraph` and the optimizers' `Problem` have these fields."""

    preds: list[list[int]]
    succs: list[list[int]]
    is_comm: list[bool]
    comm_kind: list[str | None]


@dataclass
class TaskGraph:
    """A plain DAG with the fields the simulator needs (for tests, benchmarks, tools).

    `comm_kind[i]` is the collective kind of a comm node (`allreduce`, `all_to_all`, ...)
    and None for compute; it drives the default delayed set of `list_schedule`.
    """

    preds: list[list[int]]
    succs: list[list[int]]
    is_comm: list[bool]
    comm_kind: list[str | None]

    @classmethod
    def from_edges(
        cls,
        num_nodes: int,
        edges: Iterable[tuple[int, int]],
        comm: Iterable[int] | dict[int, str] = (),
    ) -> TaskGraph:
        """Build from (producer, consumer) pairs; `comm` lists the collectives (a dict maps
        each to its kind, a plain iterable makes them allreduces)."""
        kinds: list[str | None] = [None] * num_nodes
        comm_map = comm if isinstance(comm, dict) else dict.fromkeys(comm, "allreduce")
        for i, kind in comm_map.items():
            kinds[i] = kind
        pred_sets: list[set[int]] = [set() for _ in range(num_nodes)]
        for p, c in edges:
            if p == c:
                raise ValueError(f"self edge on node {p}")
            pred_sets[c].add(p)
        preds = [sorted(s) for s in pred_sets]
        succs: list[list[int]] = [[] for _ in range(num_nodes)]
        for c, ps in enumerate(preds):
            for p in ps:
                succs[p].append(c)
        return cls(preds, succs, [k is not None for k in kinds], kinds)

    def __len__(self) -> int:
        return len(self.preds)


@dataclass
class Timeline:
    """The simulated execution of one block.

    Lists are indexed by node: `start`/`end` in µs, `stream` (0 compute, 1..k comm) and
    `launch_seq` (the order in which the simulator launched the ops). `chains[s]` is the
    launch order on stream s. `order` is the total launch order (see the module docstring).
    """

    start: list[float]
    end: list[float]
    stream: list[int]
    launch_seq: list[int]
    chains: list[list[int]]
    makespan_us: float
    num_comm_streams: int = 1
    overlap_slowdown: float = 1.0
    preds: list[list[int]] = field(default_factory=list, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.start)

    @cached_property
    def order(self) -> list[int]:
        """Total launch order: by start, compute before comm, then launch sequence."""
        n = len(self.start)
        key = [(self.start[i], self.stream[i] > 0, self.launch_seq[i]) for i in range(n)]
        order = sorted(range(n), key=key.__getitem__)
        if self._respects_edges(order):
            return order
        return self._topological_by_key(key)

    def chain_pred(self) -> list[int]:
        """For each node, the op launched just before it on its stream (-1 if first)."""
        prev = [-1] * len(self.start)
        for chain in self.chains:
            for a, b in zip(chain, chain[1:], strict=False):
                prev[b] = a
        return prev

    def _respects_edges(self, order: Sequence[int]) -> bool:
        position = [0] * len(order)
        for k, i in enumerate(order):
            position[i] = k
        for chain in self.chains:
            if any(position[a] > position[b] for a, b in zip(chain, chain[1:], strict=False)):
                return False
        return all(position[p] < position[i] for i, ps in enumerate(self.preds) for p in ps)

    def _topological_by_key(self, key: list[tuple[float, bool, int]]) -> list[int]:
        # Only reached when zero-duration ops of different streams tie at one instant.
        n = len(key)
        chain_prev = self.chain_pred()
        succs: list[list[int]] = [[] for _ in range(n)]
        indeg = [0] * n
        for i in range(n):
            incoming = list(self.preds[i]) if self.preds else []
            if chain_prev[i] >= 0:
                incoming.append(chain_prev[i])
            for p in incoming:
                succs[p].append(i)
            indeg[i] = len(incoming)
        heap = [(key[i], i) for i in range(n) if indeg[i] == 0]
        heapq.heapify(heap)
        order: list[int] = []
        while heap:
            _, i = heapq.heappop(heap)
            order.append(i)
            for s in succs[i]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, (key[s], s))
        return order


# ---- input checks ----------------------------------------------------------------------------
def _check_inputs(
    graph: GraphLike, durations: Sequence[float], num_comm_streams: int, overlap_slowdown: float
) -> int:
    n = len(graph.preds)
    if len(durations) != n:
        raise ValueError(f"{len(durations)} durations for a graph of {n} ops")
    for i, d in enumerate(durations):
        if not (d >= 0.0 and math.isfinite(d)):
            raise ValueError(f"duration of node {i} must be finite and >= 0, got {d}")
    if num_comm_streams < 1:
        raise ValueError(f"num_comm_streams must be >= 1, got {num_comm_streams}")
    if not (overlap_slowdown >= 1.0 and math.isfinite(overlap_slowdown)):
        raise ValueError(f"overlap_slowdown must be finite and >= 1.0, got {overlap_slowdown}")
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
    graph: GraphLike,
    durations: Sequence[float],
    *,
    num_comm_streams: int = 1,
    overlap_slowdown: float = 1.0,
    order: Sequence[int] | None = None,
) -> Timeline:
    """Simulate ops launched in `order` (default: node order = block order).

    See the module docstring for the exact semantics. Raises ValueError if the order uses a
    value before its producer ran (not a topological order).
    """
    n = _check_inputs(graph, durations, num_comm_streams, overlap_slowdown)
    seq = list(range(n)) if order is None else _check_order(order, n)
    if overlap_slowdown == 1.0:
        return _fixed_order_plain(graph, durations, seq, num_comm_streams)
    return _fixed_order_events(graph, durations, seq, num_comm_streams, overlap_slowdown)


def _fixed_order_plain(
    graph: GraphLike, durations: Sequence[float], order: list[int], k: int
) -> Timeline:
    """The O(V + E) formula: start = max(stream free, producers' end)."""
    n = len(order)
    preds, is_comm = graph.preds, graph.is_comm
    start = [0.0] * n
    end = [0.0] * n
    stream = [0] * n
    launch_seq = [0] * n
    placed = [False] * n
    free = [0.0] * (k + 1)
    chains: list[list[int]] = [[] for _ in range(k + 1)]
    for pos, i in enumerate(order):
        ready = 0.0
        for p in preds[i]:
            if not placed[p]:
                raise ValueError(f"order launches node {i} before its producer {p}")
            if end[p] > ready:
                ready = end[p]
        s = (1 if k == 1 else _earliest_free(free, k)) if is_comm[i] else 0
        t = free[s] if free[s] > ready else ready
        start[i] = t
        end[i] = free[s] = t + durations[i]
        stream[i] = s
        launch_seq[i] = pos
        placed[i] = True
        chains[s].append(i)
    makespan = max(end, default=0.0)
    return Timeline(start, end, stream, launch_seq, chains, makespan, k, 1.0, graph.preds)


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

    def __init__(self, graph: GraphLike, durations: Sequence[float], k: int, f: float):
        n = len(graph.preds)
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
        self.chains: list[list[int]] = [[] for _ in range(k + 1)]
        self.t = 0.0
        self.next_seq = 0
        self.done = 0
        self.comp_node = -1
        self.comp_end = 0.0
        self.comp_factor = 1.0
        self.comm_heap: list[tuple[float, int, int, int]] = []
        self.comm_busy = [False] * (k + 1)
        self.free_at = [0.0] * (k + 1)
        self.active_comm = 0

    def idle_comm_stream(self) -> int:
        """The idle comm stream that freed earliest (ties: lowest id), or -1."""
        best = -1
        for s in range(1, self.k + 1):
            if not self.comm_busy[s] and (best < 0 or self.free_at[s] < self.free_at[best]):
                best = s
        return best

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
        if not running_comp and not self.comm_heap:
            return None
        t = self.comp_end if running_comp else math.inf
        if self.comm_heap and self.comm_heap[0][0] < t:
            t = self.comm_heap[0][0]
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
            self.start, self.end, self.stream, self.seq, self.chains, makespan, self.k, self.f,
            self.graph.preds,
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
        self.comp = [i for i in order if not is_comm[i]]
        self.comm = [i for i in order if is_comm[i]]
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
            if e.waiting[i] == 0:
                e.launch(i, COMPUTE_STREAM)
                self.next_comp += 1
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
            if i >= 0 and not e.comm_busy[s] and e.stream[i] < 0 and e.waiting[i] == 0:
                e.launch(i, s)

    def _empty_stream(self, e: _Engine) -> int:
        best = -1
        for s in range(1, e.k + 1):
            if self.assigned[s] < 0 and (best < 0 or e.free_at[s] < e.free_at[best]):
                best = s
        return best


def _fixed_order_events(
    graph: GraphLike, durations: Sequence[float], order: list[int], k: int, f: float
) -> Timeline:
    engine = _Engine(graph, durations, k, f)
    return _run(engine, _FixedOrderPolicy(engine, order))


# ---- list scheduling ---------------------------------------------------------------------------
class _ListPolicy:
    """Lancet's list scheduler: per-stream ready heaps keyed (-priority, ready time, index)."""

    def __init__(self, is_comm: list[bool], priorities: Sequence[float], delayed: list[bool]):
        self.is_comm = is_comm
        self.priorities = priorities
        self.delayed = delayed
        self.ready: tuple[list[tuple[float, float, int]], ...] = ([], [])
        self.held: list[tuple[float, float, int]] = []
        self.released = not any(delayed)

    def on_ready(self, i: int, t: float) -> None:
        """Queue a newly ready op (held back if it is delayed and phase 2 has not begun)."""
        entry = (-self.priorities[i], t, i)
        if not self.released and self.delayed[i]:
            self.held.append(entry)
            return
        heapq.heappush(self.ready[1 if self.is_comm[i] else 0], entry)

    def release(self) -> bool:
        """Phase 2: move every held op to its ready queue; False if nothing was held."""
        if self.released or not self.held:
            return False
        self.released = True
        for entry in self.held:
            heapq.heappush(self.ready[1 if self.is_comm[entry[2]] else 0], entry)
        self.held = []
        return True

    def fetch(self, e: _Engine) -> None:
        """Start the best ready op on each idle stream."""
        comp_q, comm_q = self.ready
        if e.comp_node < 0 and comp_q:
            e.launch(heapq.heappop(comp_q)[2], COMPUTE_STREAM)
        while comm_q:
            s = e.idle_comm_stream()
            if s < 0:
                break
            e.launch(heapq.heappop(comm_q)[2], s)


def weight_update_first(graph: GraphLike) -> list[int]:
    """Ops that consume an allreduce result (Lancet's `IsWeightUpdateFirstOp`, §1.4)."""
    kinds = graph.comm_kind
    return [
        i for i, ps in enumerate(graph.preds) if any(kinds[p] == "allreduce" for p in ps)
    ]


def list_schedule(
    graph: GraphLike,
    durations: Sequence[float],
    *,
    priorities: Sequence[float] | None = None,
    delayed: Iterable[int] | None = None,
    num_comm_streams: int = 1,
    overlap_slowdown: float = 1.0,
) -> Timeline:
    """Lancet's list scheduler (lancet-algorithms.md §5.1), deterministic.

    `priorities` (default all equal): larger runs first. `delayed` (default
    `weight_update_first(graph)`): held back until nothing else can run. Raises ValueError
    if the graph has a cycle.
    """
    n = _check_inputs(graph, durations, num_comm_streams, overlap_slowdown)
    prio = [0.0] * n if priorities is None else list(priorities)
    if len(prio) != n:
        raise ValueError(f"{len(prio)} priorities for a graph of {n} ops")
    held = [False] * n
    for i in weight_update_first(graph) if delayed is None else delayed:
        if not 0 <= i < n:
            raise ValueError(f"delayed node {i} out of range")
        held[i] = True
    engine = _Engine(graph, durations, num_comm_streams, overlap_slowdown)
    return _run(engine, _ListPolicy(graph.is_comm, prio, held))


# ---- analysis ----------------------------------------------------------------------------------
def critical_path(
    graph: GraphLike, durations: Sequence[float], timeline: Timeline
) -> list[int]:
    """Longest path over data and stream-order edges, in execution order.

    Node weights are the simulated durations `end - start` (equal to `durations` unless an
    overlap slowdown stretched compute ops), so for a fixed-order evaluation without slowdown
    its length is the makespan (§5.2). Ties go to the smallest node index.
    """
    n = len(graph.preds)
    if len(durations) != n or len(timeline) != n:
        raise ValueError("graph, durations and timeline sizes differ")
    if n == 0:
        return []
    chain_prev = timeline.chain_pred()
    dist = [0.0] * n
    parent = [-1] * n
    for i in timeline.order:
        best, arg = 0.0, -1
        for p in _incoming(graph.preds[i], chain_prev[i]):  # ascending: first max wins ties
            if arg < 0 or dist[p] > best:
                best, arg = dist[p], p
        dist[i] = best + (timeline.end[i] - timeline.start[i])
        parent[i] = arg
    last = 0
    for i in range(1, n):
        if dist[i] > dist[last]:
            last = i
    path = [last]
    while parent[path[-1]] >= 0:
        path.append(parent[path[-1]])
    path.reverse()
    return path


def _incoming(preds: list[int], chain_prev: int) -> list[int]:
    if chain_prev < 0 or chain_prev in preds:
        return preds
    return sorted([*preds, chain_prev])


def busy_time(timeline: Timeline) -> list[float]:
    """Busy µs per stream (index 0 compute, 1..k comm)."""
    busy = [0.0] * (timeline.num_comm_streams + 1)
    for s, a, b in zip(timeline.stream, timeline.start, timeline.end, strict=True):
        busy[s] += b - a
    return busy


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1] = (merged[-1][0], b)
            continue
        merged.append((a, b))
    return merged


def _intersection_measure(
    xs: list[tuple[float, float]], ys: list[tuple[float, float]]
) -> float:
    total, i, j = 0.0, 0, 0
    while i < len(xs) and j < len(ys):
        lo = max(xs[i][0], ys[j][0])
        hi = min(xs[i][1], ys[j][1])
        if hi > lo:
            total += hi - lo
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total


def _stream_unions(timeline: Timeline) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    comp = _union(
        (timeline.start[i], timeline.end[i]) for i in timeline.chains[COMPUTE_STREAM]
    )
    comm = _union(
        (timeline.start[i], timeline.end[i])
        for s in range(1, timeline.num_comm_streams + 1)
        for i in timeline.chains[s]
    )
    return comp, comm


def overlap_us(timeline: Timeline) -> float:
    """µs during which some collective and some compute op both run."""
    comp, comm = _stream_unions(timeline)
    return _intersection_measure(comm, comp)


def exposed_comm_us(timeline: Timeline) -> float:
    """µs during which communication runs and no computation does (union(comm) − union(compute))."""
    comp, comm = _stream_unions(timeline)
    return sum(b - a for a, b in comm) - _intersection_measure(comm, comp)


def longest_data_path_us(graph: GraphLike, durations: Sequence[float]) -> float:
    """Length of the longest path over data edges only (node weight = duration)."""
    n = len(graph.preds)
    finish = [0.0] * n
    indeg = [len(ps) for ps in graph.preds]
    stack = [i for i in range(n) if indeg[i] == 0]
    seen = 0
    while stack:
        i = stack.pop()
        seen += 1
        ready = max((finish[p] for p in graph.preds[i]), default=0.0)
        finish[i] = ready + durations[i]
        for s in graph.succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                stack.append(s)
    if seen != n:
        raise ValueError("graph has a cycle")
    return max(finish, default=0.0)


def lower_bound_us(
    graph: GraphLike, durations: Sequence[float], num_comm_streams: int = 1
) -> float:
    """max(total compute, total comm / k, longest data path): no schedule is faster."""
    compute = float(sum(d for d, c in zip(durations, graph.is_comm, strict=True) if not c))
    comm = float(sum(d for d, c in zip(durations, graph.is_comm, strict=True) if c))
    return max(compute, comm / num_comm_streams, float(longest_data_path_us(graph, durations)))


def summarize(graph: GraphLike, durations: Sequence[float], timeline: Timeline) -> dict:
    """Key numbers of a timeline (all times in µs).

    `compute_us`/`comm_us`: busy time of the compute stream / of all comm streams together
    (simulated, i.e. including overlap slowdown); `exposed_comm_us`: union of comm intervals
    minus union of compute intervals; `overlap_us`: their intersection, so
    `exposed + overlap` = time with some communication running; `lower_bound_us`: see
    `lower_bound_us`; `critical_path_len`: number of ops on `critical_path`,
    `critical_path_us` its length.
    """
    busy = busy_time(timeline)
    path = critical_path(graph, durations, timeline)
    comp, comm = _stream_unions(timeline)
    overlap = _intersection_measure(comm, comp)
    return {
        "makespan_us": timeline.makespan_us,
        "compute_us": busy[COMPUTE_STREAM],
        "comm_us": sum(busy[1:]),
        "exposed_comm_us": sum(b - a for a, b in comm) - overlap,
        "overlap_us": overlap,
        "lower_bound_us": lower_bound_us(graph, durations, timeline.num_comm_streams),
        "num_ops": len(timeline),
        "num_collectives": sum(1 for c in graph.is_comm if c),
        "critical_path_len": len(path),
        "critical_path_us": sum(timeline.end[i] - timeline.start[i] for i in path),
        "num_comm_streams": timeline.num_comm_streams,
        "overlap_slowdown": timeline.overlap_slowdown,
    }
