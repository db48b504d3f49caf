"""`optimize.propagate`: re-evaluating a fusion trial by propagating its change gives exactly
the times (and so the plan) of evaluating the chains again."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.graph.core import Problem
from lancet_mlir.optimize import fusion
from lancet_mlir.optimize.chains import evaluate_chains, resume_point, split_chains
from lancet_mlir.optimize.propagate import UNSETTLED, ChainLinks, propagate


def test_a_delay_moves_only_what_reads_it() -> None:
    # compute 0 (2) -> allreduce 1 (3) -> compute 2 (1); compute 3 (4) independent.
    # Chains [0, 3, 2] and [1]: 0 0-2, 3 2-6, 1 2-5, 2 waits for 3: 6-7
    p = Problem.from_edges([2.0, 3.0, 1.0, 4.0], [(0, 1), (1, 2)], {1: "allreduce"})
    chains = [[0, 3, 2], [1]]
    base = evaluate_chains(p.preds, p.durations, chains)
    assert base is not None
    assert base.end == [2.0, 5.0, 7.0, 6.0]
    links = ChainLinks(chains, 4)
    longer = [2.0, 6.0, 1.0, 4.0]  # the all-reduce now ends at 8: op 2 runs 8-9
    out = propagate(p.preds, longer, chains, links, base, [1], lambda v: p.succs[v], 100)
    assert out is not None
    assert (out.start, out.end, out.makespan_us) == ([0.0, 2.0, 8.0, 2.0], [2.0, 8.0, 9.0, 6.0], 9.0)
    assert base.end == [2.0, 5.0, 7.0, 6.0]  # the base is not touched


def test_a_cycle_never_settles() -> None:
    # 0 -> 1 on data, but the compute chain runs 1 before 0: a cycle of positive duration
    p = Problem.from_edges([1.0, 1.0], [(0, 1)])
    chains = [[1, 0]]
    assert evaluate_chains(p.preds, p.durations, chains) is None
    links = ChainLinks(chains, 2)
    from lancet_mlir.optimize.chains import ChainTimes

    base = ChainTimes([1.0, 0.0], [2.0, 1.0], 2.0)  # what the chain alone would give
    out = propagate(p.preds, p.durations, chains, links, base, [1], lambda v: p.succs[v], 50)
    assert out is UNSETTLED


def test_links_follow_unlink_and_relink() -> None:
    links = ChainLinks([[4, 2, 7], [1]], 8)
    assert (links.prev[2], links.next[2], links.chained[2]) == (4, 7, True)
    around = links.unlink(2)
    assert (links.next[4], links.prev[7], links.chained[2]) == (7, 4, False)
    links.relink(2, around)
    assert (links.next[4], links.prev[7], links.prev[2], links.next[2]) == (2, 2, 4, 7)
    assert links.unlink(1) == (-1, -1)


def _replayed_trial(preds, succs, durations, chains, links, times, a, b, streamless):
    """The evaluation `fusion._trial_times` replaces: the chains again from a's start."""
    return evaluate_chains(
        preds, durations, chains, resume_point(times, chains, times.start[a]), streamless=streamless
    )


@st.composite
def fusion_cases(draw: st.DrawFn) -> tuple[Problem, list[list[int]], float]:
    """A random DAG of compute ops and all-reduces, a realisable order's chains and a factor
    for the fused all-reduce's time."""
    n = draw(st.integers(2, 24))
    edges = [(i, j) for j in range(n) for i in range(max(0, j - 6), j) if draw(st.integers(0, 3)) == 0]
    comm = {v: "allreduce" for v in range(n) if draw(st.integers(0, 2)) > 0}
    durations = [draw(st.integers(0, 8)) * 0.5 for _ in range(n)]
    p = Problem.from_edges(durations, edges, comm)
    priority = draw(st.permutations(range(n)))
    ready = [(priority[v], v) for v in range(n) if not p.preds[v]]
    heapq.heapify(ready)
    waiting = [len(p.preds[v]) for v in range(n)]
    order: list[int] = []
    while ready:  # a random topological order
        _, v = heapq.heappop(ready)
        order.append(v)
        for w in p.succs[v]:
            waiting[w] -= 1
            if waiting[w] == 0:
                heapq.heappush(ready, (priority[w], w))
    factor = draw(st.sampled_from([0.0, 0.5, 0.8, 1.0, 1.3]))
    return p, split_chains(p, order), factor


@settings(max_examples=300, deadline=None)
@given(fusion_cases())
def test_fusion_plans_are_those_of_evaluating_again(case) -> None:
    p, chains, factor = case

    def fused_time(group: list[int]) -> float:
        return factor * sum(p.durations[v] for v in group) + (0.25 if factor else 0.0)

    found = fusion.plan_noncritical_fusion(p, chains, fused_time, lambda a, b: True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fusion, "_trial_times", _replayed_trial)
        expected = fusion.plan_noncritical_fusion(p, chains, fused_time, lambda a, b: True)
    assert found.groups == expected.groups
    assert found.chains == expected.chains
    assert found.evaluations == expected.evaluations
    assert (found.times.start, found.times.end, found.times.makespan_us) == (
        expected.times.start,
        expected.times.end,
        expected.times.makespan_us,
    )
