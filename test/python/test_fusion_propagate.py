"""`optimize.propagate`: re-evaluating a fusion trial by propagating its change gives exactly
the times (and so the plan) of evaluating the chains again."""

from __future__ import annotations

import heapq
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.graph.core import Problem
from lancet_mlir.optimize import fusion
from lancet_mlir.optimize.chains import ChainTimes, evaluate_chains, resume_point, split_chains
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
    assert (out.start, out.end, out.makespan_us) == (
        [0.0, 2.0, 8.0, 2.0],
        [2.0, 8.0, 9.0, 6.0],
        9.0,
    )
    assert base.end == [2.0, 5.0, 7.0, 6.0]  # the base is not touched


def test_a_cycle_never_settles() -> None:
    # 0 -> 1 on data, but the compute chain runs 1 before 0: a cycle of positive duration
    p = Problem.from_edges([1.0, 1.0], [(0, 1)])
    chains = [[1, 0]]
    assert evaluate_chains(p.preds, p.durations, chains) is None
    links = ChainLinks(chains, 2)
    base = ChainTimes([1.0, 0.0], [2.0, 1.0], 2.0)  # what the chain alone would give
    out = propagate(p.preds, p.durations, chains, links, base, [1], lambda v: p.succs[v], 50)
    assert out is UNSETTLED


def test_a_merge_closing_a_cycle_is_refused_though_its_times_round_away() -> None:
    # compute 0 (100) -> all-reduce 1 (0) -> compute 2 (0) -> all-reduce 3 (1); chains [0, 2],
    # [1, 3]. Merging 1 into 3 makes 2 read 3 while 3 reads 2: a cycle. With a fused time of
    # 1e-15, 101 + 1e-15 == 101, so propagating alone would settle; the merge is refused
    # as evaluating the chains again refuses it
    p = Problem.from_edges(
        [100.0, 0.0, 0.0, 1.0], [(0, 1), (1, 2), (2, 3)], {1: "allreduce", 3: "allreduce"}
    )
    plan = fusion.plan_noncritical_fusion(p, [[0, 2], [1, 3]], lambda g: 1e-15, lambda a, b: True)
    assert plan.groups == []
    assert plan.chains == [[0, 2], [1, 3]]
    assert plan.times.end == [100.0, 100.0, 100.0, 101.0]


def test_chained_all_reduces_through_compute_are_refused_without_spinning() -> None:
    # compute -> all-reduce -> compute -> all-reduce ...: every merge of two neighbours closes
    # a cycle (the first one's reader feeds the second); found by the cycle check at once
    n_ar = 50
    durations, edges, kinds, comp, comm = [], [], {}, [], []
    prev = None
    for k in range(n_ar):
        c, r = 2 * k, 2 * k + 1
        durations += [1.0, 2.0]
        kinds[r] = "allreduce"
        if prev is not None:
            edges.append((prev, c))
        edges.append((c, r))
        prev = r
        comp.append(c)
        comm.append(r)
    p = Problem.from_edges(durations, edges, kinds)
    calls: list[int] = []

    def counted(*args, **kwargs):
        calls.append(1)
        return propagate(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fusion, "propagate", counted)
        plan = fusion.plan_noncritical_fusion(p, [comp, comm], lambda g: 2.5, lambda a, b: True)
    assert plan.groups == []
    assert plan.evaluations == n_ar  # the first evaluation and one trial per pair
    assert calls == []  # every trial refused by the cycle check, none propagated


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
    edges = [
        (i, j) for j in range(n) for i in range(max(0, j - 6), j) if draw(st.integers(0, 3)) == 0
    ]
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
    # 0: merged ops of no time; 1e-15: of a time that rounds away next to the others
    factor = draw(st.sampled_from([0.0, 1e-15, 0.5, 0.8, 1.0, 1.3, math.inf]))
    return p, split_chains(p, order), factor


@settings(max_examples=400, deadline=None)
@given(fusion_cases())
def test_fusion_plans_are_those_of_evaluating_again(case) -> None:
    p, chains, factor = case

    def fused_time(group: list[int]) -> float:
        if factor in (0.0, 1e-15, math.inf):
            return factor
        return factor * sum(p.durations[v] for v in group) + 0.25

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
