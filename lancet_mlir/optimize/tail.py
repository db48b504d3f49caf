"""Tail deferral: move compute that hides nothing behind the most exposed collective.

The critical-path moves of `local_search` shift one op at a time; they miss this compound
move. Take the collective `T` that is exposed longest (at the end of a training step: the
gradient all-reduce of a tied embedding, which can only start after the whole dX chain).
Compute ops that do not feed `T` (nor depend on it), end before it starts and run mostly while
the communication stream is idle hide nothing where they are; launched right after `T`
instead, they overlap it. They move with everything that depends on them (their gradient
all-reduces and updates), so the move is only worth it for some of them: the latest k of them
are tried for k = 1, 2, ..., each made a topological order and improved by the local search;
the best result counts if it beats the incumbent, and the step repeats from there. Budget in
evaluations; no randomness, so deterministic. Only compute ops (`Problem.is_compute`) are
candidates; what moves with them (copies, host syncs, virtual nodes among their descendants)
keeps its own stream.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lancet_mlir.graph.core import Problem
from lancet_mlir.optimize.chains import (
    ChainTimes,
    Reach,
    block_order,
    evaluate,
    reachability,
    split_chains,
)
from lancet_mlir.optimize.dw import topological_by_preference
from lancet_mlir.optimize.local_search import improve

MAX_DEFERRED = 8
"""Most ops one deferral moves (the latest candidates first)."""

MAX_ROUNDS = 3
"""Deferral steps after which the stage stops even if each one gained."""

IDLE_SHARE = 0.5
"""A candidate runs with the communication stream idle for at least this share of its time."""


@dataclass
class TailResult:
    """The best chains found (None: nothing beat the input) and the evaluations spent."""

    chains: list[list[int]]
    times: ChainTimes | None
    evaluations: int


def defer_to_tail(
    problem: Problem,
    chains: list[list[int]],
    budget: int,
    progress: Callable[[int], None] | None = None,
    reach: Reach | None = None,
) -> TailResult:
    """Improve the chains by tail deferral (module docstring) within `budget` evaluations;
    `reach`: `reachability(problem)` when the caller has it."""
    best = TailResult(chains, None, 0)
    times = evaluate(problem, chains)
    if times is None or not chains[1] or not chains[0]:
        return best
    reach = reach if reach is not None else reachability(problem)
    desc = reach.descendants
    for _ in range(MAX_ROUNDS):
        target = most_exposed(chains, times)
        related = reach.ancestors(target) | desc[target]
        candidates = idle_candidates(problem, chains, times, target, related)
        order = block_order(problem, best.chains, times.start)
        found: tuple[list[list[int]], ChainTimes] | None = None
        for k in range(1, len(candidates) + 1):
            left = budget - best.evaluations
            if left <= 0:
                return best
            share = max(1, left // (len(candidates) - k + 1))
            deferred = _deferred(problem, order, target, candidates[:k], desc)
            best.evaluations += 1
            if deferred is None:
                continue
            result = improve(problem, deferred, min(share, left - 1), progress, reach)
            best.evaluations += result.evaluations
            span = result.times.makespan_us
            if span < (found[1].makespan_us if found else times.makespan_us) - 1e-9:
                found = (result.chains, result.times)
        if found is None:
            return best
        chains, times = found
        best = TailResult(chains, times, best.evaluations)
    return best


def most_exposed(chains: Sequence[Sequence[int]], times: ChainTimes) -> int:
    """The collective exposed longest (by the compute stream, `chains[0]`; ties: the later
    one)."""
    comp, comm = chains[0], chains[1]
    busy = _merged([(times.start[v], times.end[v]) for v in comp])
    return max(
        comm,
        key=lambda c: (
            times.end[c] - times.start[c] - _covered(busy, times.start[c], times.end[c]),
            times.start[c],
            c,
        ),
    )


def idle_candidates(
    problem: Problem,
    chains: Sequence[Sequence[int]],
    times: ChainTimes,
    target: int,
    related: int,
) -> list[int]:
    """Compute ops (`chains[0]`) unrelated to `target` that end before it starts and overlap
    collectives (`chains[1]`) for less than `1 - IDLE_SHARE` of their time; the latest
    `MAX_DEFERRED`, latest first."""
    comp, comm = chains[0], chains[1]
    talking = _merged([(times.start[c], times.end[c]) for c in comm])
    out = []
    for x in comp:
        d = problem.durations[x]
        if d <= 0 or related >> x & 1 or times.end[x] > times.start[target]:
            continue
        if d - _covered(talking, times.start[x], times.end[x]) >= IDLE_SHARE * d:
            out.append(x)
    out.sort(key=lambda x: (-times.start[x], x))
    return out[:MAX_DEFERRED]


def _deferred(
    problem: Problem, order: list[int], target: int, moved_ops: list[int], desc: Sequence[int]
) -> list[list[int]] | None:
    """Chains of `order` with `moved_ops` and all their descendants launched right after
    `target` (made topological); None if they do not evaluate."""
    moved = 0
    for x in moved_ops:
        moved |= 1 << x | desc[x]
    kept = [v for v in order if not moved >> v & 1]
    at = kept.index(target) + 1
    preferred = kept[:at] + [v for v in order if moved >> v & 1] + kept[at:]
    chains = split_chains(problem, topological_by_preference(problem, preferred))
    if evaluate(problem, chains) is None:
        return None
    return chains


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _covered(merged: list[tuple[float, float]], a: float, b: float) -> float:
    """Length of [a, b] inside the union `merged` (sorted, disjoint)."""
    total = 0.0
    k = max(0, bisect.bisect_right(merged, (a, float("inf"))) - 1)
    while k < len(merged) and merged[k][0] < b:
        lo, hi = max(a, merged[k][0]), min(b, merged[k][1])
        if hi > lo:
            total += hi - lo
        k += 1
    return total
