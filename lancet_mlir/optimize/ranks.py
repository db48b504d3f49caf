"""Upward-rank priorities and the list schedule they give."""

from __future__ import annotations

from lancet_mlir.graph.core import Problem, node_flags, topological_order
from lancet_mlir.sim import Timeline, list_schedule


def upward_rank(problem: Problem) -> list[float]:
    """Longest remaining path (µs) from each op to the end, its own duration and every
    collective on the way included (HEFT's upward rank)."""
    rank = [0.0] * len(problem)
    for v in reversed(topological_order(problem.preds, problem.succs)):
        rank[v] = problem.durations[v] + max((rank[s] for s in problem.succs[v]), default=0.0)
    return rank


def rank_list_schedule(problem: Problem) -> Timeline:
    """List schedule (one comm stream) that always launches the ready op with the longest
    remaining path: the critical dX chain first, dW work when the chain waits."""
    return list_schedule(
        problem,
        problem.durations,
        priorities=upward_rank(problem),
        delayed=[],
        **node_flags(problem),
    )
