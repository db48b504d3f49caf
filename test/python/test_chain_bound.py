"""`evaluate_chains(..., bound=)`: the local search's early stop never changes a result."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.graph.core import Problem
from lancet_mlir.optimize.chains import evaluate_chains, split_chains


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
