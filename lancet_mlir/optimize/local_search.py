"""Critical-path local search over (compute, communication) chain pairs.

Each step finds the critical path of the current schedule (data and stream edges, walked back
from the op that ends last) and, at every point where the path hops between streams (a
compute op waits for a collective or the reverse) and at its end, looks at the stream edge
(u, v) just before the hop: `v` was delayed by `u`, its predecessor on the same stream. Two
kinds of moves address that: launch `v` earlier (before `u`, or several places earlier), or
launch `u` later (after `v`, or several places later). Every move is evaluated exactly with
the O(V + E) chain evaluator, incrementally from the first op whose start can change; the
best strictly improving move of a step is applied; the search stops at a local optimum or
when the evaluation budget is spent.

Moves stay on one stream (`Problem.stream`): an op moves within its own chain, compute,
communication or a copy queue, never to another; stream-less nodes (host syncs, virtual
nodes) are in no chain, so the critical path passes through them but no move shifts them.

The budget counts evaluations, not seconds, so the result is the same on every machine and
in every run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate

from lancet_mlir.graph.core import Problem
from lancet_mlir.optimize.chains import (
    ChainTimes,
    Reach,
    SuffixMarks,
    evaluate,
    reachability,
    resume_point,
)

STEP_OFFSETS = (1, 2, 3, 5, 9, 17, 33, 65)
"""How far (in chain positions) a move shifts an op: near moves first, then doubling jumps."""

CLEAR_PER_SEGMENT = 6
"""How many ops a step tries to move out of each critical run on one stream."""

GAP_FILLERS = 6
"""How many ops a step tries to pull into each idle gap of a stream on the critical path."""


@dataclass
class SearchResult:
    """The best chains found, their evaluation and how many evaluations were spent."""

    chains: list[list[int]]
    times: ChainTimes
    evaluations: int
    improvements: int


class ChainSearch:
    """Local search state: the incumbent chains, their times, the evaluation budget."""

    def __init__(
        self,
        problem: Problem,
        chains: Sequence[Sequence[int]],
        budget: int,
        progress: Callable[[int], None] | None = None,
        reach: Reach | None = None,
    ):
        times = evaluate(problem, chains)
        if times is None:
            raise ValueError("initial chains form a cycle")
        self.problem = problem
        # `reach`: the problem's `reachability`, when the caller has it already
        self.reach = reach if reach is not None else reachability(problem)
        self.chains = [list(chain) for chain in chains]
        self.times = times
        self.budget = budget
        self.progress = progress
        self.evaluations = 0
        self.improvements = 0
        self._ready: list[float] | None = None
        """Per step: when each op's producers end in the incumbent (`_fill_gap`)."""

    # ---- the search ----------------------------------------------------------------------------
    def run(self) -> SearchResult:
        """Improve until no candidate move helps or the budget is spent."""
        while self.evaluations < self.budget:
            before = self.evaluations
            improved = self._step()
            if self.progress is not None:
                self.progress(self.evaluations - before)
            if not improved:
                break
            self.improvements += 1
        return SearchResult(self.chains, self.times, self.evaluations, self.improvements)

    def _step(self) -> bool:
        best: tuple[float, int, list[int]] | None = None
        current = self.times.makespan_us
        durations = self.problem.durations
        # work before each position of the incumbent chains: a move keeps the chain prefix
        # before its resume point, so the work after it is the incumbent's there
        done = [list(accumulate((durations[v] for v in c), initial=0.0)) for c in self.chains]
        marks = SuffixMarks(self.times, self.chains)  # every move resumes from the incumbent
        for stream, chain_new, changed_from in self._candidates():
            if self.evaluations >= self.budget:
                break
            chains = list(self.chains)
            chains[stream] = chain_new
            self.evaluations += 1
            resume = resume_point(self.times, self.chains, changed_from)
            # only a makespan below the best so far counts, so the evaluation may stop as
            # soon as it cannot get there (`bound`); the result is the same
            limit = current if best is None else best[0]
            work = tuple(d[-1] - d[k] for d, k in zip(done, resume[1], strict=True))
            times = evaluate(self.problem, chains, resume, (limit, work), marks)
            if times is None or times.makespan_us >= current:
                continue
            if best is None or times.makespan_us < best[0]:
                best = (times.makespan_us, stream, chain_new)
                self._best_times = times
        if best is None:
            return False
        _, stream, chain_new = best
        self.chains[stream] = chain_new
        self.times = self._best_times
        return True

    # ---- moves -------------------------------------------------------------------------------
    def _candidates(self) -> Iterator[tuple[int, list[int], float]]:
        """(stream, new chain, earliest old start that can change) for every move of a step."""
        chains = self.chains
        position = [0] * len(self.problem)
        for chain in chains:
            for k, v in enumerate(chain):
                position[v] = k
        segments = self._segments(self._critical_path())
        self._ready = None  # the incumbent changed: made again by the first gap to fill
        for index, segment in enumerate(segments):
            stream = self.problem.stream[segment[0]]
            if stream < 0:
                continue  # a stream-less node is in no chain: nothing to move
            chain = chains[stream]
            if index > 0:
                yield from self._fill_gap(stream, chain, position[segment[0]])
            if len(segment) < 2:
                continue
            last = segment[-1]
            yield from self._clear_segment(stream, chain, segment, position)
            yield from self._earlier(stream, chain, position[last], position)
            yield from self._later(stream, chain, position[segment[-2]], position)

    def _segments(self, path: list[int]) -> list[list[int]]:
        """The critical path cut into maximal runs on one stream."""
        segments: list[list[int]] = []
        stream = self.problem.stream
        for v in path:
            if segments and stream[segments[-1][-1]] == stream[v]:
                segments[-1].append(v)
            else:
                segments.append([v])
        return segments

    def _clear_segment(
        self, stream: int, chain: list[int], segment: list[int], position: list[int]
    ) -> Iterator[tuple[int, list[int], float]]:
        """Launch the largest ops of a critical run that the run's last op does not need
        right after that op, so it (and what waits for it) starts earlier."""
        last = segment[-1]
        reaches = self.reach.reaches
        dur = self.problem.durations
        movable = [u for u in segment[:-1] if not reaches(u, last) and dur[u] > 0]
        movable.sort(key=lambda u: (-dur[u], position[u]))
        k_last = position[last]
        for u in movable[:CLEAR_PER_SEGMENT]:
            k = position[u]
            ceiling = min(
                (position[s] - 1 for s in self.problem.succs[u] if self._same(s, u)),
                default=len(chain) - 1,
            )
            if ceiling < k_last:
                continue
            new = chain[:k] + chain[k + 1 : k_last + 1] + [u] + chain[k_last + 1 :]
            yield stream, new, self.times.start[u]

    def _earlier(
        self, stream: int, chain: list[int], k: int, position: list[int]
    ) -> Iterator[tuple[int, list[int], float]]:
        """Move chain[k] to k-1, k-2, k-3, k-5, ... (not before a same-stream producer)."""
        v = chain[k]
        floor = max((position[p] + 1 for p in self.problem.preds[v] if self._same(p, v)), default=0)
        for off in STEP_OFFSETS:
            q = k - off
            if q < floor:
                break
            new = chain[:q] + [v] + chain[q:k] + chain[k + 1 :]
            yield stream, new, self.times.start[chain[q]]

    def _later(
        self, stream: int, chain: list[int], k: int, position: list[int]
    ) -> Iterator[tuple[int, list[int], float]]:
        """Move chain[k] to k+1, k+2, ... (not after a same-stream consumer)."""
        u = chain[k]
        ceiling = min(
            (position[s] - 1 for s in self.problem.succs[u] if self._same(s, u)),
            default=len(chain) - 1,
        )
        for off in STEP_OFFSETS:
            q = k + off
            if q > ceiling:
                break
            new = chain[:k] + chain[k + 1 : q + 1] + [u] + chain[q + 1 :]
            yield stream, new, self.times.start[u]

    def _fill_gap(
        self, stream: int, chain: list[int], k: int
    ) -> Iterator[tuple[int, list[int], float]]:
        """Pull a later op of the chain into the idle gap before chain[k]: the ops that do
        not depend on chain[k] and are ready by its start, best fit to the gap first, then
        the largest."""
        if k == 0:
            return
        w = chain[k]
        start, end = self.times.start, self.times.end
        gap_from = end[chain[k - 1]]
        gap = start[w] - gap_from
        if gap <= 0:
            return
        dur = self.problem.durations
        below = self.reach.descendants[w]
        if self._ready is None:  # when each op's producers are done, for every gap of the step
            get = end.__getitem__
            self._ready = [max(map(get, ps), default=0.0) for ps in self.problem.preds]
        ready = self._ready
        options = []
        for q in range(k + 1, len(chain)):
            x = chain[q]
            if ready[x] <= gap_from and not below >> x & 1:
                options.append((abs(dur[x] - gap), -dur[x], q))
        options.sort()
        picked = options[: GAP_FILLERS - 1]
        if options:
            largest = min(options, key=lambda o: (o[1], o[2]))
            if largest not in picked:
                picked.append(largest)
        for _, _, q in picked:
            x = chain[q]
            yield stream, chain[:k] + [x] + chain[k:q] + chain[q + 1 :], gap_from

    def _same(self, a: int, b: int) -> bool:
        return self.problem.stream[a] == self.problem.stream[b]

    def _critical_path(self) -> list[int]:
        """Walk back from the op that ends last along the binding constraint of each start:
        a producer that ended exactly then, else the stream predecessor."""
        start, end = self.times.start, self.times.end
        prev = [-1] * len(self.problem)
        for chain in self.chains:
            for a, b in zip(chain, chain[1:], strict=False):
                prev[b] = a
        tails = [c[-1] for c in self.chains if c]
        if not tails:
            return []
        v = max(tails, key=lambda x: (end[x], x))
        path = [v]
        while start[v] > 0:
            binding = next((p for p in self.problem.preds[v] if end[p] == start[v]), -1)
            if binding < 0 and prev[v] >= 0 and end[prev[v]] == start[v]:
                binding = prev[v]
            if binding < 0:
                break
            v = binding
            path.append(v)
        path.reverse()
        return path


def improve(
    problem: Problem,
    chains: Sequence[Sequence[int]],
    budget: int,
    progress: Callable[[int], None] | None = None,
    reach: Reach | None = None,
) -> SearchResult:
    """Run the local search from the given chains with at most `budget` evaluations;
    `progress(k)` is told after each step that k more evaluations were spent; `reach`:
    `chains.reachability(problem)` when the caller computed it (a function of the edges
    alone: the searches of one problem share it)."""
    return ChainSearch(problem, chains, budget, progress, reach).run()
