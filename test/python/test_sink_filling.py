"""Sink filling (`optimize/sinks.py`): ops nothing waits for move into idle compute gaps."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.graph.core import Problem
from lancet_mlir.optimize.chains import evaluate, evaluate_chains, split_chains
from lancet_mlir.optimize.search import search_schedule
from lancet_mlir.optimize.sinks import fill_sinks


def tied_embedding_tail() -> Problem:
    """0 a(1) -> 1 E(a2a, 5) -> 2 b(2) -> 3 R(all-reduce, 6) -> 4 u_R(1, sink);
    5 g(1) -> 6 r(all-reduce, 1) -> 7 u_g(1, sink)."""
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (5, 6), (6, 7)]
    kinds = {1: "all_to_all", 3: "allreduce", 6: "allreduce"}
    return Problem.from_edges([1, 5, 2, 6, 1, 1, 1, 1], edges, kinds)


def test_an_update_waiting_in_program_order_moves_into_the_gap() -> None:
    p = tied_embedding_tail()
    # g [0,1], a [1,2], r [1,2], E [2,7], b [7,9], R [9,15], u_R [15,16], u_g [16,17]
    chains = [[5, 0, 2, 4, 7], [6, 1, 3]]
    times = evaluate(p, chains)
    assert times is not None
    assert times.makespan_us == 17.0
    filled = fill_sinks(p, chains, times)
    assert filled is not None
    new_chains, new_times, used = filled
    # u_g is ready at 2 (r ends) and fits the idle [2, 7] before b; u_R stays last
    assert new_chains == [[5, 0, 7, 2, 4], [6, 1, 3]]
    assert (new_times.start[7], new_times.end[7]) == (2.0, 3.0)
    assert new_times.makespan_us == 16.0
    assert used == 2


def test_nothing_to_gain_or_no_sinks_keeps_the_chains() -> None:
    p = tied_embedding_tail()
    best = [[5, 0, 7, 2, 4], [6, 1, 3]]
    times = evaluate(p, best)
    assert times is not None
    assert fill_sinks(p, best, times) is None
    no_sinks = Problem.from_edges([1, 2, 3], [(0, 1), (1, 2)], {1: "allreduce"})
    chains = [[0, 2], [1]]
    times = evaluate(no_sinks, chains)
    assert times is not None
    assert fill_sinks(no_sinks, chains, times) is None  # node 2 is a sink but nothing waits


def test_the_search_ends_with_the_sinks_filled() -> None:
    p = tied_embedding_tail()
    outcome = search_schedule(p, 0, [("input", [5, 6, 0, 1, 2, 3, 4, 7])])
    assert outcome.makespan_us == 16.0
    assert outcome.start == "input+sinks"


@st.composite
def problems_with_chains(draw: st.DrawFn) -> tuple[Problem, list[list[int]]]:
    n = draw(st.integers(2, 10))
    edges = [(i, j) for j in range(n) for i in range(j) if draw(st.integers(0, 2)) == 0]
    comm = {v: "allreduce" for v in range(n) if draw(st.booleans())}
    p = Problem.from_edges([draw(st.integers(0, 6)) * 0.5 for _ in range(n)], edges, comm)
    order = draw(st.permutations(range(n)))
    # a topological order drawn from the permutation: valid chains
    placed: list[int] = []
    left = list(order)
    while left:
        v = next(v for v in left if all(u in placed for u in p.preds[v]))
        left.remove(v)
        placed.append(v)
    return p, split_chains(p, placed)


@settings(max_examples=200, deadline=None)
@given(problems_with_chains())
def test_filling_is_valid_faster_and_holds_no_other_op_back(case) -> None:
    p, chains = case
    times = evaluate(p, chains)
    assert times is not None
    filled = fill_sinks(p, chains, times)
    if filled is None:
        return
    new_chains, new_times, _ = filled
    assert sorted(new_chains[0]) == sorted(chains[0])
    assert new_chains[1:] == chains[1:]
    again = evaluate_chains(p.preds, p.durations, new_chains)
    assert again is not None
    assert again.makespan_us == new_times.makespan_us
    assert new_times.makespan_us < times.makespan_us
    for v in range(len(p)):
        if p.succs[v]:  # an op something waits for never starts later
            assert new_times.start[v] <= times.start[v] + 1e-9
