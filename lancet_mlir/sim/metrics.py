"""What a timeline says: busy time per stream, overlap and exposed communication, the
critical path, the lower bound, and `summarize`, their typed summary (`TimelineSummary`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace

from lancet_mlir.graph.core import Graph, topological_order
from lancet_mlir.sim.model import COMPUTE_STREAM, Timeline


def critical_path(graph: Graph, durations: Sequence[float], timeline: Timeline) -> list[int]:
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
    """Busy µs per stream (index 0 compute, 1..k comm, k + 1.. the copy engines if any; host
    syncs take no stream)."""
    busy = [0.0] * len(timeline.chains)
    for s, a, b in zip(timeline.stream, timeline.start, timeline.end, strict=True):
        if s >= 0:
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


def _intersection_measure(xs: list[tuple[float, float]], ys: list[tuple[float, float]]) -> float:
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


def _stream_unions(
    timeline: Timeline,
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    comp = _union((timeline.start[i], timeline.end[i]) for i in timeline.chains[COMPUTE_STREAM])
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


def longest_data_path_us(graph: Graph, durations: Sequence[float]) -> float:
    """Length of the longest path over data edges only (node weight = duration)."""
    finish = [0.0] * len(graph.preds)
    for i in topological_order(graph.preds, graph.succs):  # ValueError on a cycle
        ready = max((finish[p] for p in graph.preds[i]), default=0.0)
        finish[i] = ready + durations[i]
    return max(finish, default=0.0)


def lower_bound_us(
    graph: Graph,
    durations: Sequence[float],
    num_comm_streams: int = 1,
    copies: Sequence[int] | None = None,
) -> float:
    """max(total compute, total comm / k, longest data path): no schedule is faster. With
    `copies` (each op's `CopyQueue`, 0 / False for no copy; True is a copy of the queue of the
    rest), compute excludes the copies and each copy queue's total is a term of its own."""
    copy = list(copies) if copies is not None else [0] * len(durations)
    compute = comm = 0.0
    copied: dict[int, float] = {}
    for d, c, cp in zip(durations, graph.is_comm, copy, strict=True):
        if c:
            comm += d
        elif cp:
            copied[int(cp)] = copied.get(int(cp), 0.0) + d
        else:
            compute += d
    return max(
        compute,
        max(copied.values(), default=0.0),
        comm / num_comm_streams,
        float(longest_data_path_us(graph, durations)),
    )


@dataclass(frozen=True)
class TimelineSummary:
    """Key numbers of a timeline, all times in µs (see `summarize`)."""

    makespan_us: float
    compute_us: float
    comm_us: float
    exposed_comm_us: float
    overlap_us: float
    lower_bound_us: float
    num_ops: int
    num_collectives: int
    critical_path_len: int
    critical_path_us: float
    num_comm_streams: int
    overlap_slowdown: float

    def as_dict(self) -> dict[str, float | int]:
        """The fields by name (JSON reports)."""
        return asdict(self)


def summarize(graph: Graph, durations: Sequence[float], timeline: Timeline) -> TimelineSummary:
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
    return TimelineSummary(
        makespan_us=timeline.makespan_us,
        compute_us=busy[COMPUTE_STREAM],
        comm_us=sum(busy[1 : timeline.num_comm_streams + 1]),
        exposed_comm_us=sum(b - a for a, b in comm) - overlap,
        overlap_us=overlap,
        lower_bound_us=lower_bound_us(
            graph,
            durations,
            timeline.num_comm_streams,
            getattr(graph, "copy_queue", None) if timeline.copy_stream is not None else None,
        ),
        num_ops=len(timeline),
        num_collectives=sum(1 for c in graph.is_comm if c),
        critical_path_len=len(path),
        critical_path_us=float(sum(timeline.end[i] - timeline.start[i] for i in path)),
        num_comm_streams=timeline.num_comm_streams,
        overlap_slowdown=timeline.overlap_slowdown,
    )


@dataclass(frozen=True)
class NestedWork:
    """The work inside node `node` (an op costed by its bodies): each body's summary with
    the number of times it runs per execution of the node."""

    node: int
    bodies: list[tuple[TimelineSummary, int]]


def with_nested_work(
    summary: TimelineSummary, timeline: Timeline, nested: Sequence[NestedWork]
) -> TimelineSummary:
    """`summary` of a block with the work of its region ops' bodies folded in.

    The makespan, lower bound and critical path stay the block's own (each region op is one
    node whose duration is its bodies' makespan). A region op's busy time leaves
    `compute_us`; its bodies' compute, communication, exposed communication, overlap, ops
    and collectives come in, each times the body's runs. The exposed communication of a body
    counts as exposed in the block too: the region op occupies the compute stream while its
    body waits on a collective, so nothing of the block hides it (collectives of the block
    beside the region op count as hidden by it, as they would be by any compute op).
    """
    compute = summary.compute_us
    comm = summary.comm_us
    exposed = summary.exposed_comm_us
    overlap = summary.overlap_us
    ops = summary.num_ops
    collectives = summary.num_collectives
    for work in nested:
        compute -= timeline.end[work.node] - timeline.start[work.node]
        for body, runs in work.bodies:
            compute += body.compute_us * runs
            comm += body.comm_us * runs
            exposed += body.exposed_comm_us * runs
            overlap += body.overlap_us * runs
            ops += body.num_ops * runs
            collectives += body.num_collectives * runs
    return replace(summary, compute_us=max(0.0, compute), comm_us=comm, exposed_comm_us=exposed,
                   overlap_us=overlap, num_ops=ops, num_collectives=collectives)  # fmt: skip
