"""Schedules as per-stream chains: evaluation, validity and conversion to a block order.

With one communication stream and no overlap slowdown, the fixed-order simulation of a
block order (lancet-algorithms.md §5.2) depends only on the order of the compute ops among
themselves and of the collectives among themselves: `start(v) = max(end of v's producers,
end of v's predecessor on its stream)`. `evaluate_chains` computes this in O(V + E) and
also detects chain pairs that no block order realises (a cycle through data and stream
edges). Every optimizer of this package works on chain pairs and converts the winner to a
block order once (`block_order`).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice, repeat

from lancet_mlir.graph import core, reach
from lancet_mlir.graph.core import Graph


@dataclass(frozen=True)
class ChainTimes:
    """Start/end µs per node and the makespan of one evaluated chain pair."""

    start: list[float]
    end: list[float]
    makespan_us: float


def evaluate_chains(
    preds: Sequence[Sequence[int]],
    durations: Sequence[float],
    comp: Sequence[int],
    comm: Sequence[int],
    resume: tuple[ChainTimes, int, int] | None = None,
    bound: tuple[float, float, float] | None = None,
) -> ChainTimes | None:
    """Fixed-order times of the chain pair, or None if no block order realises it.

    Nodes in neither chain are treated as finished at time 0 (so a sub-schedule can be
    evaluated without, e.g., the all-reduces and the optimizer updates).

    `resume = (base, i, j)` re-evaluates incrementally: `base` is the evaluation of chains
    that agree with `comp[:i]` and `comm[:j]` and in which every node of those prefixes, and
    only those, started before the first start among `comp[i:]` and `comm[j:]` (see
    `resume_point`). Their times are reused; only the suffixes are recomputed.

    `bound = (limit, comp_work, comm_work)` stops early for a caller that only wants chains
    faster than `limit`: `comp_work` and `comm_work` are the summed durations of `comp[i:]`
    and `comm[j:]`. A stream can end no earlier than where it is free now plus the work
    left on it plus every wait still to come, so once that exceeds `limit` (by more than a
    relative 1e-9, far above rounding) the makespan cannot be below `limit` and None is
    returned. A result that is returned is exact, whatever `bound`.
    """
    n = len(durations)
    inf = _UNSET
    if resume is None:
        end = [0.0] * n
        start = [0.0] * n
        i = j = 0
    else:
        base, i, j = resume
        end = list(base.end)
        start = list(base.start)
    # mark the suffixes unfinished (map/deque: a C loop, no bytecode per node)
    deque(map(end.__setitem__, islice(comp, i, None), repeat(inf)), maxlen=0)
    deque(map(end.__setitem__, islice(comm, j, None), repeat(inf)), maxlen=0)
    nc, nm = len(comp), len(comm)
    free_comp = end[comp[i - 1]] if i else 0.0
    free_comm = end[comm[j - 1]] if j else 0.0
    slack_comp = slack_comm = inf
    if bound is not None:
        limit, comp_work, comm_work = bound
        limit += 1e-9 * (abs(limit) + 1.0)
        slack_comp = limit - free_comp - comp_work
        slack_comm = limit - free_comm - comm_work
        if slack_comp < 0 or slack_comm < 0:
            return None
    while i < nc or j < nm:
        progressed = False
        while i < nc:
            v = comp[i]
            t = free_comp
            for p in preds[v]:
                e = end[p]
                if e == inf:
                    break
                if e > t:
                    t = e
            else:
                if t > free_comp:  # the stream waits: its earliest end moves by the wait
                    slack_comp -= t - free_comp
                    if slack_comp < 0:
                        return None
                start[v] = t
                free_comp = end[v] = t + durations[v]
                i += 1
                progressed = True
                continue
            break
        while j < nm:
            v = comm[j]
            t = free_comm
            for p in preds[v]:
                e = end[p]
                if e == inf:
                    break
                if e > t:
                    t = e
            else:
                if t > free_comm:  # the stream waits: its earliest end moves by the wait
                    slack_comm -= t - free_comm
                    if slack_comm < 0:
                        return None
                start[v] = t
                free_comm = end[v] = t + durations[v]
                j += 1
                progressed = True
                continue
            break
        if not progressed:
            return None
    return ChainTimes(start, end, max(free_comp, free_comm))


_UNSET = float("inf")


def resume_point(
    times: ChainTimes, comp: Sequence[int], comm: Sequence[int], changed_from: float
) -> tuple[ChainTimes, int, int]:
    """`resume` for `evaluate_chains` after a change that only touches ops starting at or
    after `changed_from`: the first positions of each chain whose start is >= it."""
    start = times.start
    i = bisect.bisect_left(comp, changed_from, key=start.__getitem__)
    j = bisect.bisect_left(comm, changed_from, key=start.__getitem__)
    return times, i, j


def split_chains(is_comm: Sequence[bool], order: Sequence[int]) -> tuple[list[int], list[int]]:
    """The (compute, communication) chains of a block order."""
    comp = [v for v in order if not is_comm[v]]
    comm = [v for v in order if is_comm[v]]
    return comp, comm


def block_order(
    graph: Graph,
    comp: Sequence[int],
    comm: Sequence[int],
    start: Sequence[float],
) -> list[int]:
    """A block order whose chains are `comp` and `comm`: launch order by start time.

    Kahn's algorithm over data and stream edges, smallest (start, comm after compute,
    chain position) first, so the result is topological even when zero-duration ops tie.
    Raises ValueError if the chains do not cover the graph or form a cycle.
    """
    n = len(graph.preds)
    if len(comp) + len(comm) != n:
        raise ValueError("chains do not cover the graph")
    key: list[tuple[float, int, int]] = [(0.0, 0, 0)] * n
    for flag, chain in ((0, comp), (1, comm)):
        for pos, v in enumerate(chain):
            key[v] = (start[v], flag, pos)
    try:
        return core.topological_order(graph.preds, graph.succs, key, (comp, comm))
    except ValueError:
        raise ValueError("chains and data edges form a cycle") from None


def reachability(graph: Graph) -> tuple[list[int], Sequence[int]]:
    """(ancestors, descendants) of every node as Python-int bitsets (bit j = node j), from
    `graph/reach.py`: O(V · E / wordsize)."""
    order = core.topological_order(graph.preds, graph.succs)
    return reach.ancestor_bits(graph.preds, order), reach.descendant_bits(graph.succs, order)


bits_of = reach.bits_of
