"""Exact minimum fixed-order makespan by branch and bound (for tests on small graphs).

Searches every block order by appending one op at a time (an op whose producers are all
placed). A state is (placed set, free time of each stream, end time of every placed op that
still has an unplaced consumer, makespan so far): the future depends on nothing else, so a
state that is componentwise no better than one already seen with the same placed set is
dropped (this also removes the many interleavings that give the same stream chains). The
bound is the largest of: the makespan so far; for each stream, its free time plus the work
still to run on it; for each op ready to place, its earliest start plus the longest data
path from it to the end. Exponential in the worst case: meant for graphs of up to ~20 ops.

Streams are the internal model's (`Problem.stream`): compute, communication and one per copy
queue; a stream-less node (host sync, virtual node) is placed when its producers have ended,
at that time, on no stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from lancet_mlir.graph.core import Problem, topological_order

MAX_STATES_PER_SET = 64
"""Dominance memo size per placed set (older states are kept; a full list admits new
states without recording them, which only weakens pruning)."""


@dataclass(frozen=True)
class ExactResult:
    """The optimum makespan and one block order achieving it; `nodes` = states expanded."""

    makespan_us: float
    order: list[int]
    nodes: int


def exact_schedule(
    problem: Problem, upper_bound: float | None = None, max_nodes: int = 2_000_000
) -> ExactResult:
    """Minimum fixed-order makespan (one comm stream, no slowdown, copies on their queues'
    streams) of `problem`.

    `upper_bound` (a known makespan, e.g. from a heuristic) speeds up pruning; the result is
    never worse than it only if some order reaches it. Raises RuntimeError after
    `max_nodes` expanded states.
    """
    return _Search(problem, upper_bound, max_nodes).run()


class _Search:
    def __init__(self, problem: Problem, upper_bound: float | None, max_nodes: int):
        self.p = problem
        n = len(problem)
        self.n = n
        self.dur = problem.durations
        self.stream = problem.stream  # -1: stream-less (zero duration, `Problem`)
        self.tail = [0.0] * n
        for v in reversed(topological_order(problem.preds, problem.succs)):
            self.tail[v] = self.dur[v] + max((self.tail[s] for s in problem.succs[v]), default=0.0)
        self.pred_mask = [sum(1 << p for p in ps) for ps in problem.preds]
        self.best = float("inf") if upper_bound is None else upper_bound * (1 + 1e-12) + 1e-9
        self.best_order: list[int] | None = None
        self.memo: dict[int, list[tuple[float, ...]]] = {}
        self.nodes = 0
        self.max_nodes = max_nodes
        self.end = [0.0] * n
        self.order: list[int] = []

    def run(self) -> ExactResult:
        streams = self.p.num_streams
        remaining = [0.0] * streams
        for v in range(self.n):
            if self.stream[v] >= 0:
                remaining[self.stream[v]] += self.dur[v]
        self._dfs(0, [0.0] * streams, remaining, 0.0)
        if self.best_order is None:
            raise RuntimeError("no schedule beats the given upper bound")
        return ExactResult(self.best, self.best_order, self.nodes)

    def _dfs(self, placed: int, free: list[float], remaining: list[float], span: float) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise RuntimeError("exact search exceeded its node limit")
        if len(self.order) == self.n:
            if span < self.best:
                self.best = span
                self.best_order = list(self.order)
            return
        p, end = self.p, self.end
        eligible: list[tuple[float, float, int]] = []
        bound = max(span, *(f + r for f, r in zip(free, remaining, strict=True)))
        for v in range(self.n):
            if placed >> v & 1 or self.pred_mask[v] & ~placed:
                continue
            s = free[self.stream[v]] if self.stream[v] >= 0 else 0.0
            for q in p.preds[v]:
                if end[q] > s:
                    s = end[q]
            bound = max(bound, s + self.tail[v])
            eligible.append((s, -self.tail[v], v))
        if bound >= self.best or self._dominated(placed, free, span):
            return
        eligible.sort()
        for s, _, v in eligible:
            st = self.stream[v]
            if st < 0:  # stream-less: happens when its producers end, holds no stream
                end[v] = s
                self.order.append(v)
                self._dfs(placed | 1 << v, free, remaining, max(span, s))
                self.order.pop()
                continue
            e = s + self.dur[v]
            end[v] = e
            old_free = free[st]
            free[st] = e
            remaining[st] -= self.dur[v]
            self.order.append(v)
            self._dfs(placed | 1 << v, free, remaining, max(span, e))
            self.order.pop()
            remaining[st] += self.dur[v]
            free[st] = old_free

    def _dominated(self, placed: int, free: list[float], span: float) -> bool:
        """True if a state at least as good with the same placed set was seen (module doc);
        otherwise record this one."""
        frontier = tuple(
            self.end[v]
            for v in range(self.n)
            if placed >> v & 1 and any(not placed >> s & 1 for s in self.p.succs[v])
        )
        key = (*free, span, *frontier)
        seen = self.memo.setdefault(placed, [])
        for other in seen:
            if all(a <= b for a, b in zip(other, key, strict=True)):
                return True
        if len(seen) < MAX_STATES_PER_SET:
            seen.append(key)
        return False
