"""Schedules as per-stream chains: evaluation, validity and conversion to a block order.

With one communication stream and no overlap slowdown, the fixed-order simulation of a
block order (lancet-algorithms.md §5.2) depends only on the order of the ops of each stream
among themselves: `start(v) = max(end of v's producers, end of v's predecessor on its
stream)`. A schedule is therefore a list of chains, one per stream of the internal model
(`Problem.stream`): `chains[0]` the compute stream, `chains[1]` the communication stream
and `chains[2 + r]` the r-th copy-engine queue (memcpy / memset); stream-less nodes (host
syncs and virtual nodes, `Problem.streamless`) are in no chain: each happens when its
producers end, at zero cost, and holds nothing back. This is `sim.evaluate_fixed_order` with
the problem's `node_flags`, one communication stream, no slowdown and no launch overhead,
exactly (test_sched_flags.py); with launch overhead the order of the host's launches
matters too, which the chains do not say: the schedulers optimise without it and the passes'
never-worse check simulates it. `evaluate_chains` computes this in O(V + E) and also
detects chains that no block order realises (a cycle through data and stream edges). Every
optimizer of this package works on chains and converts the winner to a block order once
(`block_order`).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice, repeat

from lancet_mlir.graph import core, reach
from lancet_mlir.graph.core import Graph, Problem


@dataclass(frozen=True)
class ChainTimes:
    """Start/end µs per node and the makespan of one evaluated chain pair."""

    start: list[float]
    end: list[float]
    makespan_us: float


def evaluate_chains(
    preds: Sequence[Sequence[int]],
    durations: Sequence[float],
    chains: Sequence[Sequence[int]],
    resume: tuple[ChainTimes, Sequence[int]] | None = None,
    bound: tuple[float, Sequence[float]] | None = None,
    streamless: Sequence[int] = (),
    marks: SuffixMarks | None = None,
) -> ChainTimes | None:
    """Fixed-order times of the chains (module docstring), or None if no block order
    realises them.

    Nodes in no chain and not in `streamless` are treated as finished at time 0 (so a
    sub-schedule can be evaluated without, e.g., the all-reduces and the optimizer updates).
    The `streamless` nodes (`Problem.streamless`) happen when their producers end (their
    durations are not read).

    `resume = (base, positions)` re-evaluates incrementally: `base` is the evaluation of
    chains that agree with `chains[s][:positions[s]]` for every stream s and in which every
    node of those prefixes, and only those, started before the first start among the
    suffixes (see `resume_point`). Their times are reused; only the suffixes (and the
    stream-less nodes) are recomputed.

    `bound = (limit, work)` stops early for a caller that only wants chains faster than
    `limit`: `work[s]` is the summed durations of the suffix of `chains[s]`. A stream can end
    no earlier than where it is free now plus the work left on it plus every wait still to
    come, so once that exceeds `limit` (by more than a relative 1e-9, far above rounding)
    the makespan cannot be below `limit` and None is returned. A result that is returned is
    exact, whatever `bound`.

    `marks` (with `resume`: a `SuffixMarks` of its base) holds the base's end times with
    the suffixes marked unfinished already; the same list as marking them here.
    """
    if len(chains) != 2 or streamless:
        return _evaluate_streams(preds, durations, chains, resume, bound, streamless)
    comp, comm = chains
    n = len(durations)
    inf = _UNSET
    if resume is None:
        end = [0.0] * n
        start = [0.0] * n
        i = j = 0
    else:
        base, (i, j) = resume
        start = list(base.start)
    if resume is not None and marks is not None:
        if marks.base is not base:
            raise ValueError("suffix marks of another base")
        end = marks.marked((i, j))
    else:
        if resume is not None:
            end = list(base.end)
        # mark the suffixes unfinished (map/deque: a C loop, no bytecode per node)
        deque(map(end.__setitem__, islice(comp, i, None), repeat(inf)), maxlen=0)
        deque(map(end.__setitem__, islice(comm, j, None), repeat(inf)), maxlen=0)
    nc, nm = len(comp), len(comm)
    free_comp = end[comp[i - 1]] if i else 0.0
    free_comm = end[comm[j - 1]] if j else 0.0
    slack_comp = slack_comm = inf
    if bound is not None:
        limit, (comp_work, comm_work) = bound
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


def _evaluate_streams(
    preds: Sequence[Sequence[int]],
    durations: Sequence[float],
    chains: Sequence[Sequence[int]],
    resume: tuple[ChainTimes, Sequence[int]] | None,
    bound: tuple[float, Sequence[float]] | None,
    streamless: Sequence[int],
) -> ChainTimes | None:
    """`evaluate_chains` for any number of chains and stream-less nodes (copies, host syncs,
    virtual nodes: imported traces). The same formula as the two-chain loop, stream by
    stream; a stream-less node happens as soon as its last producer ends (a count of its
    unfinished producers, fired from the end of each), so a chain head that waits for one
    waits for its producers."""
    n = len(durations)
    inf = _UNSET
    if resume is None:
        end = [0.0] * n
        start = [0.0] * n
        pos = [0] * len(chains)
    else:
        base, at = resume
        end = list(base.end)
        start = list(base.start)
        pos = list(at)
    for chain, k in zip(chains, pos, strict=True):
        deque(map(end.__setitem__, islice(chain, k, None), repeat(inf)), maxlen=0)
    # stream-less nodes: always recomputed (they are few and cost one pass over their edges)
    deque(map(end.__setitem__, streamless, repeat(inf)), maxlen=0)
    waiting: dict[int, int] = {}
    watchers: dict[int, list[int]] = {}  # producer -> the stream-less nodes that wait for it
    for v in streamless:
        count = 0
        for p in preds[v]:
            if end[p] == inf:
                count += 1
                watchers.setdefault(p, []).append(v)
        waiting[v] = count

    def happen(v: int) -> None:
        """Stream-less `v`'s producers have all ended: it happens, and so may its watchers."""
        todo = [v]
        while todo:
            u = todo.pop()
            t = max((end[p] for p in preds[u]), default=0.0)
            start[u] = end[u] = t
            for w in watchers.get(u, ()):
                waiting[w] -= 1
                if waiting[w] == 0:
                    todo.append(w)

    # the nodes with nothing to wait for, listed before any happens (a cascade brings the
    # counts of others to 0: those have happened then)
    for v in [v for v in streamless if waiting[v] == 0]:
        happen(v)
    free = [end[chain[k - 1]] if k else 0.0 for chain, k in zip(chains, pos, strict=True)]
    slack = [inf] * len(chains)
    if bound is not None:
        limit, work = bound
        limit += 1e-9 * (abs(limit) + 1.0)
        for s in range(len(chains)):
            slack[s] = limit - free[s] - work[s]
            if slack[s] < 0:
                return None
    left = sum(len(chain) - k for chain, k in zip(chains, pos, strict=True))
    while left:
        progressed = False
        for s, chain in enumerate(chains):
            k, size, t_free = pos[s], len(chain), free[s]
            while k < size:
                v = chain[k]
                t = t_free
                for p in preds[v]:
                    e = end[p]
                    if e == inf:
                        break
                    if e > t:
                        t = e
                else:
                    if t > t_free:  # the stream waits: its earliest end moves by the wait
                        slack[s] -= t - t_free
                        if slack[s] < 0:
                            return None
                    start[v] = t
                    t_free = end[v] = t + durations[v]
                    k += 1
                    ws = watchers.get(v)
                    if ws is not None:
                        for w in ws:
                            waiting[w] -= 1
                            if waiting[w] == 0:
                                happen(w)
                    continue
                break
            if k > pos[s]:
                left -= k - pos[s]
                pos[s], free[s] = k, t_free
                progressed = True
        if not progressed:
            return None
    makespan = max(free, default=0.0)
    for v in streamless:
        if end[v] > makespan:
            makespan = end[v]
    return ChainTimes(start, end, makespan)


_UNSET = float("inf")


class SuffixMarks:
    """The end times of `base` (the evaluation of `chains`) with the chains' suffixes from
    given positions marked unfinished, as `evaluate_chains` starts a resumed evaluation,
    kept from one evaluation to the next: a local-search step resumes every move from the
    same incumbent, at positions near the last one's, so only the ops between the two
    positions change mark (marking the whole suffix was ~40 % of the evaluations that the
    bound stops early). A resumed candidate agrees with `chains` before its positions and
    holds the same ops on each stream, so its suffixes hold the ops of `chains` from there.
    `chains` and `base` must not change while this is used."""

    def __init__(self, base: ChainTimes, chains: Sequence[Sequence[int]]) -> None:
        self.base = base
        self.chains = list(chains)  # the chain lists themselves are not copied
        self._end = list(base.end)
        self._at = [len(chain) for chain in chains]  # marked from here on: nothing yet

    def marked(self, positions: Sequence[int]) -> list[float]:
        """A new list: the base's end times with `chains[s][positions[s]:]` unfinished."""
        end, base_end = self._end, self.base.end
        for s, (chain, k) in enumerate(zip(self.chains, positions, strict=True)):
            old = self._at[s]
            if k < old:
                deque(map(end.__setitem__, islice(chain, k, old), repeat(_UNSET)), maxlen=0)
            elif k > old:
                for v in islice(chain, old, k):
                    end[v] = base_end[v]
            self._at[s] = k
        return end[:]


def resume_point(
    times: ChainTimes, chains: Sequence[Sequence[int]], changed_from: float
) -> tuple[ChainTimes, tuple[int, ...]]:
    """`resume` for `evaluate_chains` after a change that only touches ops starting at or
    after `changed_from`: the first position of each chain whose start is >= it."""
    start = times.start
    return times, tuple(
        bisect.bisect_left(chain, changed_from, key=start.__getitem__) for chain in chains
    )


def split_chains(problem: Problem, order: Sequence[int]) -> list[list[int]]:
    """The chains of a block order, one per stream of the problem (`Problem.stream`: compute,
    communication, each copy queue); stream-less nodes are in none."""
    chains: list[list[int]] = [[] for _ in range(problem.num_streams)]
    stream = problem.stream
    for v in order:
        s = stream[v]
        if s >= 0:
            chains[s].append(v)
    return chains


def block_order(
    problem: Problem,
    chains: Sequence[Sequence[int]],
    start: Sequence[float],
) -> list[int]:
    """A block order whose chains are `chains`: launch order by start time.

    Kahn's algorithm over data and stream edges, smallest (start, stream, chain position)
    first (stream-less nodes after the ops of their instant), so the result is topological
    even when zero-duration ops tie. Raises ValueError if the chains (with the stream-less
    nodes) do not cover the graph or form a cycle.
    """
    n = len(problem.preds)
    if sum(map(len, chains)) + len(problem.streamless) != n:
        raise ValueError("chains do not cover the graph")
    key: list[tuple[float, int, int]] = [(0.0, 0, 0)] * n
    for flag, chain in enumerate(chains):
        for pos, v in enumerate(chain):
            key[v] = (start[v], flag, pos)
    for v in problem.streamless:
        key[v] = (start[v], len(chains), v)
    try:
        return core.topological_order(problem.preds, problem.succs, key, chains)
    except ValueError:
        raise ValueError("chains and data edges form a cycle") from None


def evaluate(
    problem: Problem,
    chains: Sequence[Sequence[int]],
    resume: tuple[ChainTimes, Sequence[int]] | None = None,
    bound: tuple[float, Sequence[float]] | None = None,
    marks: SuffixMarks | None = None,
) -> ChainTimes | None:
    """`evaluate_chains` of the problem's edges, durations and stream-less nodes (`marks`:
    see `evaluate_chains`)."""
    return evaluate_chains(
        problem.preds, problem.durations, chains, resume, bound, problem.streamless, marks
    )


Reach = reach.Reachability
"""What the optimizers ask about reachability (`reachability`)."""


def reachability(graph: Graph) -> Reach:
    """The reachability of `graph`'s edges (`graph/reach.Reachability`: descendant sets as
    Python-int bitsets, bit j = node j, O(V · E / wordsize); no per-node ancestor sets)."""
    order = core.topological_order(graph.preds, graph.succs)
    return reach.Reachability(graph.preds, graph.succs, order)


bits_of = reach.bits_of
