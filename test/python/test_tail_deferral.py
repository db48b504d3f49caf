"""Tail deferral (`optimize/tail.py`): compute that hides nothing moves behind the most exposed
collective, with its all-reduce."""

from __future__ import annotations

from lancet_mlir.graph.core import Problem
from lancet_mlir.optimize.chains import evaluate_chains
from lancet_mlir.optimize.search import search_schedule
from lancet_mlir.optimize.tail import defer_to_tail, idle_candidates, most_exposed


def drag_example() -> Problem:
    # x(5) -> r(3, all-reduce); a(1) -> E(10, all-to-all); nodes 0..3 = x, r, a, E
    return Problem.from_edges([5, 3, 1, 10], [(0, 1), (2, 3)], {1: "allreduce", 3: "all_to_all"})


def test_idle_compute_and_its_allreduce_move_behind_the_exposed_collective() -> None:
    p = drag_example()
    comp, comm = [0, 2], [1, 3]
    # x [0,5], r [5,8], a [5,6], E [8,18]: E is exposed for 10, r for 2; x overlaps nothing
    times = evaluate_chains(p.preds, p.durations, [comp, comm])
    assert times is not None
    assert times.makespan_us == 18.0
    assert most_exposed([comp, comm], times) == 3
    assert idle_candidates(p, [comp, comm], times, 3, 1 << 2) == [0]
    result = defer_to_tail(p, [comp, comm], budget=100)
    # a [0,1], E [1,11], x [1,6], r [11,14]
    assert result.times is not None
    assert result.times.makespan_us == 14.0
    assert result.chains == [[2, 0], [3, 1]]
    assert result.evaluations <= 100


def test_no_budget_or_nothing_to_defer_keeps_the_input() -> None:
    p = drag_example()
    assert defer_to_tail(p, [[0, 2], [1, 3]], budget=0).times is None
    best = defer_to_tail(p, [[2, 0], [3, 1]], budget=100)  # already optimal: nothing gains
    assert best.times is None
    assert best.chains == [[2, 0], [3, 1]]
    compute_only = Problem.from_edges([1, 2], [(0, 1)])
    assert defer_to_tail(compute_only, [[0, 1], []], budget=10).times is None


def test_search_reaches_the_optimum_of_the_example() -> None:
    p = drag_example()
    outcome = search_schedule(p, 200, [("input", [0, 1, 2, 3])])
    assert outcome.makespan_us == 14.0
