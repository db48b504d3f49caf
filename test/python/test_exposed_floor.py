"""The exposed-communication floor (`sim/floor.py`) and the max-flow it uses (`graph/flow.py`):
hand-computed floors, and no schedule of random small graphs beating the floor."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.graph.core import Problem
from lancet_mlir.graph.flow import max_flow
from lancet_mlir.optimize.exact import exact_schedule
from lancet_mlir.sim import evaluate_fixed_order, exposed_comm_us
from lancet_mlir.sim.floor import exposed_comm_floor

INF = math.inf


# ---- max flow ---------------------------------------------------------------------------------
def test_max_flow_of_the_textbook_network() -> None:
    # CLRS figure 26.1: maximum flow 23
    edges = [(0, 1, 16), (0, 2, 13), (1, 3, 12), (2, 1, 4), (2, 4, 14), (3, 2, 9),
             (3, 5, 20), (4, 3, 7), (4, 5, 4)]  # fmt: skip
    result = max_flow(6, edges, 0, 5)
    assert result.value == 23
    out_of_source = sum(f for (u, _, _), f in zip(edges, result.edge_flow, strict=True) if u == 0)
    assert out_of_source == 23
    for (_, _, cap), f in zip(edges, result.edge_flow, strict=True):
        assert 0 <= f <= cap


def test_max_flow_needs_a_reverse_edge() -> None:
    # the greedy path 0-1-2-3 blocks both others; the maximum (2) cancels its middle edge
    edges = [(0, 1, 1), (0, 2, 1), (1, 2, 1), (1, 3, 1), (2, 3, 1)]
    assert max_flow(4, edges, 0, 3).value == 2


def test_max_flow_with_infinite_middle_edges_and_errors() -> None:
    assert max_flow(4, [(0, 1, 2.5), (1, 2, INF), (2, 3, 1.5)], 0, 3).value == 1.5
    with pytest.raises(ValueError, match="infinite capacity"):
        max_flow(2, [(0, 1, INF)], 0, 1)
    with pytest.raises(ValueError, match="capacities must be >= 0"):
        max_flow(2, [(0, 1, -1.0)], 0, 1)
    with pytest.raises(ValueError, match="distinct"):
        max_flow(2, [(0, 1, 1.0)], 1, 1)


# ---- hand-computed floors -------------------------------------------------------------------
def best_exposed(p: Problem, k: int = 1, slowdown: float = 1.0) -> float:
    """Least exposed communication over every topological order (tiny graphs only)."""
    best = math.inf
    for order in itertools.permutations(range(len(p))):
        position = {v: i for i, v in enumerate(order)}
        if all(position[q] < position[v] for v in range(len(p)) for q in p.preds[v]):
            timeline = evaluate_fixed_order(
                p, p.durations, order=list(order), num_comm_streams=k, overlap_slowdown=slowdown
            )
            best = min(best, exposed_comm_us(timeline))
    return best


def test_a_collective_between_all_compute_is_unhideable() -> None:
    # a(2) -> c(5) -> b(3): c can overlap nothing
    p = Problem.from_edges([2, 5, 3], [(0, 1), (1, 2)], {1: "all_to_all"})
    floor = exposed_comm_floor(p, p.durations)
    assert floor.unhideable == [1]
    assert floor.unhideable_us == floor.floor_us == 5.0
    assert best_exposed(p) == 5.0


def test_independent_compute_hides_part_of_a_collective() -> None:
    # a(2) -> c(5) -> b(3) and an independent x(3): at best 5 - 3 = 2 µs stay exposed
    p = Problem.from_edges([2, 5, 3, 3], [(0, 1), (1, 2)], {1: "all_to_all"})
    floor = exposed_comm_floor(p, p.durations)
    assert floor.unhideable == []
    assert floor.unhideable_us == 0.0
    assert floor.floor_us == 2.0
    assert floor.uncovered_us == {1: 2.0}
    assert best_exposed(p) == 2.0


def test_a_too_large_network_falls_back_to_the_unhideable_floor() -> None:
    # a(2) -> c(5) -> b(3) -> d(4) -> e(1) and x(3) -> d: x can overlap c only; d is unhideable
    p = Problem.from_edges(
        [2, 5, 3, 3, 4, 1],
        [(0, 1), (1, 2), (2, 4), (3, 4), (4, 5)],
        {1: "all_to_all", 4: "all_to_all"},
    )
    full = exposed_comm_floor(p, p.durations)
    assert full.overlap_bound
    assert full.floor_us == 6.0  # d (4) + what x (3) leaves of c (5)
    small = exposed_comm_floor(p, p.durations, max_edges=2)
    assert not small.overlap_bound
    assert small.unhideable == [4]
    assert small.floor_us == 4.0
    assert best_exposed(p) == 6.0


def test_zero_duration_compute_hides_nothing() -> None:
    p = Problem.from_edges([2, 5, 3, 0], [(0, 1), (1, 2)], {1: "all_to_all"})
    assert exposed_comm_floor(p, p.durations).unhideable == [1]


def test_one_compute_op_overlaps_one_collective_of_a_separated_chain() -> None:
    # c1(4) -> y(1) -> c2(4), x(10) independent: x can hide c1 or c2, not both (y must run
    # between them on the one compute stream). Without the chain rule the floor would be 0.
    p = Problem.from_edges([4, 1, 4, 10], [(0, 1), (1, 2)], {0: "all_to_all", 2: "all_to_all"})
    floor = exposed_comm_floor(p, p.durations)
    assert floor.chains == [[0, 2]]
    assert floor.floor_us == 4.0
    assert best_exposed(p) == 4.0


def test_chains_are_per_collective_kind() -> None:
    # same shape, but c2 is an all-reduce: it starts its own chain, so the floor is weaker (0)
    p = Problem.from_edges([4, 1, 4, 10], [(0, 1), (1, 2)], {0: "all_to_all", 2: "allreduce"})
    floor = exposed_comm_floor(p, p.durations)
    assert floor.chains == [[0], [2]]
    assert floor.floor_us == 0.0
    assert best_exposed(p) == 4.0  # valid, not tight


def test_several_streams_use_the_longest_chain_or_the_average() -> None:
    # a(1) -> c1(4), a -> c2(6), c1, c2 -> b(1): both unhideable and unordered
    p = Problem.from_edges(
        [1, 4, 6, 1], [(0, 1), (0, 2), (1, 3), (2, 3)], {1: "allreduce", 2: "allreduce"}
    )
    assert exposed_comm_floor(p, p.durations).floor_us == 10.0
    two = exposed_comm_floor(p, p.durations, num_comm_streams=2)
    assert two.unhideable == [1, 2]
    assert two.floor_us == 6.0
    assert best_exposed(p, k=2) == 6.0
    # three unordered ones of 4 µs on two streams: max(4, 12 / 2) = 6
    q = Problem.from_edges(
        [1, 4, 4, 4, 1],
        [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4)],
        {1: "allreduce", 2: "allreduce", 3: "allreduce"},
    )
    assert exposed_comm_floor(q, q.durations, num_comm_streams=2).floor_us == 6.0
    assert best_exposed(q, k=2) == 8.0


def test_overlap_slowdown_lets_compute_cover_more() -> None:
    # x(2) slowed by 2 while c(5) runs lasts up to 4 µs alongside it: floor 5 - 4 = 1
    p = Problem.from_edges([2, 5, 3, 2], [(0, 1), (1, 2)], {1: "all_to_all"})
    assert exposed_comm_floor(p, p.durations, overlap_slowdown=2.0).floor_us == 1.0
    assert best_exposed(p, slowdown=2.0) == 1.0


def test_no_collectives_and_bad_arguments() -> None:
    p = Problem.from_edges([1, 2], [(0, 1)])
    assert exposed_comm_floor(p, p.durations).floor_us == 0.0
    with pytest.raises(ValueError, match="durations"):
        exposed_comm_floor(p, [1.0])
    with pytest.raises(ValueError, match="num_comm_streams"):
        exposed_comm_floor(p, p.durations, num_comm_streams=0)
    with pytest.raises(ValueError, match="overlap_slowdown"):
        exposed_comm_floor(p, p.durations, overlap_slowdown=0.5)


# ---- no schedule beats the floor -----------------------------------------------------------
KINDS = ("allreduce", "all_to_all")


@st.composite
def small_graphs(draw: st.DrawFn, max_ops: int) -> Problem:
    n = draw(st.integers(2, max_ops))
    edges = [(i, j) for j in range(n) for i in range(j) if draw(st.integers(0, 2)) == 0]
    comm = {v: draw(st.sampled_from(KINDS)) for v in range(n) if draw(st.booleans())}
    return Problem.from_edges([draw(st.integers(0, 6)) for _ in range(n)], edges, comm)


@settings(max_examples=100, deadline=None)
@given(small_graphs(7), st.sampled_from([(1, 1.0), (1, 1.5), (2, 1.0)]))
def test_no_order_beats_the_floor(p: Problem, options: tuple[int, float]) -> None:
    k, slowdown = options
    floor = exposed_comm_floor(p, p.durations, num_comm_streams=k, overlap_slowdown=slowdown)
    assert floor.unhideable_us <= floor.floor_us + 1e-9
    assert best_exposed(p, k, slowdown) >= floor.floor_us - 1e-9
    if k == 1:
        assert math.isclose(sum(floor.uncovered_us.values()), floor.floor_us, abs_tol=1e-9)


@settings(max_examples=60, deadline=None)
@given(small_graphs(14), st.integers(0, 2**32 - 1))
def test_exact_optimum_and_random_orders_do_not_beat_the_floor(p: Problem, seed: int) -> None:
    floor = exposed_comm_floor(p, p.durations).floor_us
    optimum = exact_schedule(p)
    timeline = evaluate_fixed_order(p, p.durations, order=optimum.order)
    assert exposed_comm_us(timeline) >= floor - 1e-9
    rng = random.Random(seed)
    for _ in range(20):
        order = random_topological_order(p, rng)
        assert exposed_comm_us(evaluate_fixed_order(p, p.durations, order=order)) >= floor - 1e-9


def random_topological_order(p: Problem, rng: random.Random) -> list[int]:
    waiting = [len(ps) for ps in p.preds]
    ready = [v for v in range(len(p)) if not waiting[v]]
    order: list[int] = []
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        order.append(v)
        for s in p.succs[v]:
            waiting[s] -= 1
            if not waiting[s]:
                ready.append(s)
    return order
