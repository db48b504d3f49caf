"""`evaluate_chains(..., bound=)`: the local search's early stop never changes a result."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.graph.core import Problem
from lancet_mlir.optimize.chains import SuffixMarks, evaluate_chains, resume_point, split_chains


def test_bound_stops_once_the_limit_is_out_of_reach() -> None:
    # compute a(2) -> collective b(5) -> compute c(3); d(1) independent. Chains [a, d, c], [b]:
    # a 0-2, d 2-3, b 2-7, c waits 3-7 and runs 7-10: makespan 10
    p = Problem.from_edges([2.0, 5.0, 3.0, 1.0], [(0, 1), (1, 2)], {1: "all_to_all"})
    comp, comm = [0, 3, 2], [1]
    full = evaluate_chains(p.preds, p.durations, [comp, comm])
    assert full is not None
    assert full.makespan_us == 10.0
    # compute work 6 fits under 9.5, but c's 4 µs wait makes 10: stopped at that wait
    assert evaluate_chains(p.preds, p.durations, [comp, comm], None, (9.5, (6.0, 5.0))) is None
    # work alone above the limit: stopped before anything runs
    assert evaluate_chains(p.preds, p.durations, [comp, comm], None, (5.5, (6.0, 5.0))) is None
    # a reachable limit (even an equal one: callers reject makespan >= limit themselves)
    for limit in (10.0, 10.5):
        kept = evaluate_chains(p.preds, p.durations, [comp, comm], None, (limit, (6.0, 5.0)))
        assert kept is not None
        assert (kept.start, kept.end, kept.makespan_us) == (full.start, full.end, full.makespan_us)


@st.composite
def chain_cases(draw: st.DrawFn) -> tuple[Problem, list[int], list[int], float]:
    n = draw(st.integers(2, 9))
    edges = [(i, j) for j in range(n) for i in range(j) if draw(st.integers(0, 2)) == 0]
    comm = {v: "allreduce" for v in range(n) if draw(st.booleans())}
    p = Problem.from_edges([draw(st.integers(0, 6)) * 0.1 for _ in range(n)], edges, comm)
    order = draw(st.permutations(range(n)))  # any chains, realisable or not
    comp, chain = split_chains(p, order)
    return p, comp, chain, draw(st.integers(0, 40)) * 0.1


@settings(max_examples=200, deadline=None)
@given(chain_cases())
def test_bounded_evaluation_is_exact_or_provably_too_slow(case) -> None:
    p, comp, comm, limit = case
    full = evaluate_chains(p.preds, p.durations, [comp, comm])
    work = (sum(p.durations[v] for v in comp), sum(p.durations[v] for v in comm))
    bounded = evaluate_chains(p.preds, p.durations, [comp, comm], None, (limit, work))
    if bounded is None:
        assert full is None or full.makespan_us >= limit
    else:
        assert full is not None
        assert (bounded.start, bounded.end, bounded.makespan_us) == (
            full.start,
            full.end,
            full.makespan_us,
        )
    if full is not None and full.makespan_us < limit:
        assert bounded is not None  # a result that can win is never dropped


@st.composite
def move_sequences(draw: st.DrawFn) -> tuple[Problem, list[list[int]], list[tuple[int, int, int]]]:
    """A two-stream problem, realisable chains (a topological order split) and several
    single-op moves of them (stream, from, to), each evaluated from the same base."""
    n = draw(st.integers(2, 12))
    edges = [(i, j) for j in range(n) for i in range(j) if draw(st.integers(0, 2)) == 0]
    comm = {v: "allreduce" for v in range(n) if draw(st.booleans())}
    p = Problem.from_edges([draw(st.integers(0, 6)) * 0.1 for _ in range(n)], edges, comm)
    chains = split_chains(p, list(range(n)))
    moves = []
    for _ in range(draw(st.integers(1, 8))):
        s = draw(st.integers(0, 1))
        if len(chains[s]) < 2:
            continue
        k = draw(st.integers(0, len(chains[s]) - 1))
        moves.append((s, k, draw(st.integers(0, len(chains[s]) - 1))))
    return p, chains, moves


@settings(max_examples=300, deadline=None)
@given(move_sequences(), st.data())
def test_suffix_marks_reused_across_moves_change_no_evaluation(case, data) -> None:
    # the local search's step: every move resumed from one incumbent with one SuffixMarks,
    # at positions that go up and down; each result is the fresh resumed evaluation's
    p, chains, moves = case
    base = evaluate_chains(p.preds, p.durations, chains)
    assert base is not None
    marks = SuffixMarks(base, chains)
    for s, k, q in moves:
        moved = [list(c) for c in chains]
        moved[s].insert(q, moved[s].pop(k))
        changed = min(base.start[chains[s][k]], base.start[chains[s][q]])
        resume = resume_point(base, chains, changed)
        limit = data.draw(st.sampled_from([math.inf, base.makespan_us, base.makespan_us / 2]))
        work = tuple(
            sum(p.durations[v] for v in c[at:]) for c, at in zip(chains, resume[1], strict=True)
        )
        fresh = evaluate_chains(p.preds, p.durations, moved, resume, (limit, work))
        marked = evaluate_chains(p.preds, p.durations, moved, resume, (limit, work), (), marks)
        assert (fresh is None) == (marked is None)
        if fresh is not None:
            assert marked is not None
            assert (marked.start, marked.end, marked.makespan_us) == (
                fresh.start,
                fresh.end,
                fresh.makespan_us,
            )
    # the base itself is left as it was
    again = evaluate_chains(p.preds, p.durations, chains)
    assert again is not None
    assert (again.start, again.end) == (base.start, base.end)


def test_suffix_marks_refuse_another_base() -> None:
    p = Problem.from_edges([1.0, 2.0], [(0, 1)], {1: "allreduce"})
    chains = split_chains(p, [0, 1])
    base = evaluate_chains(p.preds, p.durations, chains)
    other = evaluate_chains(p.preds, p.durations, chains)
    assert base is not None
    assert other is not None
    with pytest.raises(ValueError, match="another base"):
        evaluate_chains(
            p.preds, p.durations, chains, (other, (0, 0)), None, (), SuffixMarks(base, chains)
        )
