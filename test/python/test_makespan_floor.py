"""The makespan floor (`sim/makespan_floor.py`): hand-computed floors, no order of random
small graphs beating it (the exact optimum included), and what `ModuleSimulation` feeds it;
the same for the communication-windows floor (one comm stream)."""

from __future__ import annotations

import random

import pytest
from helpers import parse
from hypothesis import given, settings
from hypothesis import strategies as st
from test_exposed_floor import random_topological_order, small_graphs

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.graph.core import Problem, node_flags
from lancet_mlir.optimize.exact import exact_schedule
from lancet_mlir.sim import evaluate_fixed_order
from lancet_mlir.sim.blocks import ModuleSimulation
from lancet_mlir.sim.makespan_floor import (
    comm_window_floor_us,
    heads_and_tails,
    release_floor_us,
)
from lancet_mlir.sim.options import SimOptions


def floor_of(p: Problem) -> float:
    """The floor of a problem with its own durations, its compute stream as `on_compute`."""
    return release_floor_us(p.preds, p.succs, p.durations, [p.is_compute(v) for v in range(len(p))])


def window_floor_of(p: Problem, durations: list[float] | None = None) -> float:
    """The communication-windows floor of a problem, its collectives as `on_comm`."""
    return comm_window_floor_us(
        p.preds,
        p.succs,
        p.durations if durations is None else durations,
        [p.is_compute(v) for v in range(len(p))],
        [p.comm_kind[v] is not None for v in range(len(p))],
    )


def makespan(p: Problem, order: list[int], **options: float) -> float:
    return evaluate_fixed_order(p, p.durations, order=order, **node_flags(p), **options).makespan_us


def test_heads_and_tails_exclude_the_node_itself() -> None:
    # a(2) -> c(5) -> x(3); a -> y(4)
    p = Problem.from_edges([2, 5, 3, 4], [(0, 1), (1, 2), (0, 3)], {1: "all_to_all"})
    head, tail = heads_and_tails(p.preds, p.succs, p.durations)
    assert head == [0.0, 2.0, 7.0, 2.0]
    assert tail == [8.0, 3.0, 0.0, 0.0]


def test_a_graph_out_of_program_order_is_sorted_first() -> None:
    # b(3) -> a(2), numbered against the edge
    p = Problem.from_edges([2, 3], [(1, 0)])
    assert heads_and_tails(p.preds, p.succs, p.durations) == ([3.0, 0.0], [0.0, 2.0])
    assert floor_of(p) == 5.0


def test_the_head_bound_counts_what_waits_for_a_collective() -> None:
    # a(2) -> c(5) -> {x(3), y(4)}; z(1) independent. Compute alone is 10, the critical path
    # 11; x and y cannot start before 7 and run one after the other: 7 + 3 + 4 = 14, which
    # the best order reaches (a, z under c, then x, y)
    p = Problem.from_edges([2, 5, 3, 4, 1], [(0, 1), (1, 2), (1, 3)], {1: "all_to_all"})
    assert floor_of(p) == 14.0
    assert makespan(p, exact_schedule(p).order) == 14.0


def test_the_tail_bound_counts_what_a_collective_waits_for() -> None:
    # the same graph reversed: {x(3), y(4)} -> c(5) -> a(2); z(1) independent
    p = Problem.from_edges([3, 4, 5, 2, 1], [(0, 2), (1, 2), (2, 3)], {2: "all_to_all"})
    assert floor_of(p) == 14.0
    assert makespan(p, exact_schedule(p).order) == 14.0


def test_the_critical_path_counts_collectives_in_a_row() -> None:
    # a(1) -> c1(5) -> c2(5) -> b(1): no compute to speak of, the path is 12
    p = Problem.from_edges(
        [1, 5, 5, 1], [(0, 1), (1, 2), (2, 3)], {1: "all_to_all", 2: "all_to_all"}
    )
    assert floor_of(p) == 12.0


PARTS = Problem.from_edges(
    [1, 10, 10, 2, 2, 1],
    [(0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 5)],
    {1: "all_to_all", 2: "all_to_all"},
)
"""g(1) -> {a1(10) -> e1(2), a2(10) -> e2(2)} -> h(1): two parts of an MoE layer, each an
all-to-all then its expert."""


def test_the_windows_floor_counts_the_compute_beside_a_group_of_collectives() -> None:
    """With one comm stream a1 and a2 run one after the other, 20 us in all, beside which only
    e1 and e2 (4 us) can run: the compute (6 us) plus 16 us idle is 22 us. The release bounds
    say 16 (e1, e2 and h after 11); the best order takes 24 (e1 under a2, e2 after it)."""
    assert window_floor_of(PARTS) == 22.0
    assert floor_of(PARTS) == 16.0
    assert makespan(PARTS, exact_schedule(PARTS).order) == 24.0


def test_the_windows_floor_of_collectives_in_a_row() -> None:
    # g(2) -> c1(10) -> e(3) -> c2(10) -> h(1): nothing runs beside either: 6 + 20
    p = Problem.from_edges(
        [2, 10, 3, 10, 1], [(0, 1), (1, 2), (2, 3), (3, 4)], {1: "all_to_all", 3: "all_to_all"}
    )
    assert window_floor_of(p) == 26.0


def test_the_windows_floor_keeps_hidden_collectives_apart() -> None:
    """c1(4) hides under x(5), c2(6) is alone: 5 + 1 + 6 = 12 as groups {c1}, {c2}; one group
    {c1, c2} would give only 10 - 5 = 5 idle (12 - 1 = 11), so the greedy keeps them apart.
    g(1) -> {c1, x}; {c1, x} -> c2 -> h(0)."""
    p = Problem.from_edges(
        [1, 4, 5, 6, 0],
        [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4)],
        {1: "all_to_all", 3: "all_to_all"},
    )
    assert window_floor_of(p) == 12.0
    assert makespan(p, exact_schedule(p).order) == 12.0


def test_the_windows_floor_without_collectives_or_compute() -> None:
    assert window_floor_of(Problem.from_edges([3, 4], [(0, 1)])) == 7.0
    assert (
        window_floor_of(Problem.from_edges([3, 4], [(0, 1)], {0: "all_to_all", 1: "all_to_all"}))
        == 7.0
    )
    assert comm_window_floor_us([], [], [], [], []) == 0.0
    with pytest.raises(ValueError, match="one entry per node"):
        comm_window_floor_us([[]], [[]], [1.0], [True], [])


@settings(max_examples=60, deadline=None)
@given(small_graphs(12), st.integers(0, 2**32 - 1))
def test_no_order_beats_the_windows_floor(p: Problem, seed: int) -> None:
    """One comm stream: not the exact optimum, nor random orders under an overlap slowdown
    or a launch overhead, nor orders whose ops take longer than the floor's durations."""
    floor = window_floor_of(p)
    assert makespan(p, exact_schedule(p).order) >= floor - 1e-9
    rng = random.Random(seed)
    longer = [d * rng.choice([1.0, 1.5, 3.0]) for d in p.durations]
    for options in ({}, {"overlap_slowdown": 1.5}, {"launch_overhead_us": 0.5}):
        for _ in range(5):
            order = random_topological_order(p, rng)
            assert makespan(p, order, **options) >= floor - 1e-9
            slower = evaluate_fixed_order(p, longer, order=order, **node_flags(p), **options)
            assert slower.makespan_us >= floor - 1e-9


def test_bad_input() -> None:
    assert release_floor_us([], [], [], []) == 0.0
    with pytest.raises(ValueError, match="one entry per node"):
        release_floor_us([[]], [[]], [1.0], [])


@settings(max_examples=60, deadline=None)
@given(small_graphs(12), st.integers(0, 2**32 - 1))
def test_no_order_beats_the_floor(p: Problem, seed: int) -> None:
    """Not the exact optimum, nor random orders with 1 or 2 comm streams, an overlap slowdown
    or a launch overhead (the floor ignores them: they only make an order slower)."""
    floor = floor_of(p)
    assert makespan(p, exact_schedule(p).order) >= floor - 1e-9
    rng = random.Random(seed)
    for options in ({}, {"num_comm_streams": 2}, {"overlap_slowdown": 1.5},
                    {"launch_overhead_us": 0.5}):  # fmt: skip
        for _ in range(5):
            assert makespan(p, random_topological_order(p, rng), **options) >= floor - 1e-9


T = "tensor<64xf32>"


def _op(name: str, us: float, arg: str = "%x") -> str:
    return f'%{name} = "test.op"({arg}) {{lancet.time_us = {us} : f64}} : ({T}) -> {T}'


FLOORED = f"""
func.func @f(%x: {T}) -> {T} {{
  %lb = arith.constant 0 : index
  %ub = arith.constant 2 : index
  %st = arith.constant 1 : index
  {_op("g", 1.0)}
  %a = comm.all_to_all %g split 0 {{lancet.time_us = 30.0 : f64}} : ({T}) -> {T}
  {_op("u", 2.0, "%a")}
  {_op("v", 3.0, "%a")}
  %r = comm.allreduce %u {{lancet.time_us = 50.0 : f64}} : ({T}) -> {T}
  {_op("w", 1.0, "%r")}
  scf.for %k = %lb to %ub step %st {{
    {_op("i", 4.0)}
  }}
  func.return %w : {T}
}}
"""


def test_a_module_block_floor_counts_bodies_and_no_all_reduce() -> None:
    """`ModuleSimulation.order_floor_us`: the loop counts its bodies' compute (2 trips of 4 µs)
    and the all-reduce 0 (fusion may merge it with another), so the floor is the head bound of
    u, v and w, which wait for the all-to-all: 1 + 30 + (2 + 3 + 1) = 37 µs (the compute alone:
    15; counting the all-reduce, the critical path would say 84; the input order, loop last,
    takes 92)."""
    sim = ModuleSimulation(parse(FLOORED), CostModel.from_config(CostConfig()))
    block = sim.items[0].block
    assert sim.compute_floor_us(block) == 15.0
    assert sim.order_floor_us(block) == 37.0
    assert sim.result(block).summary.makespan_us == 92.0


PARTS_MODULE = f"""
func.func @f(%x: {T}) -> {T} {{
  {_op("g", 1.0)}
  %a1 = comm.all_to_all %g split 0 {{lancet.time_us = 10.0 : f64}} : ({T}) -> {T}
  %a2 = comm.all_to_all %g split 0 {{lancet.time_us = 10.0 : f64}} : ({T}) -> {T}
  {_op("e1", 2.0, "%a1")}
  {_op("e2", 2.0, "%a2")}
  %h = "test.op"(%e1, %e2) {{lancet.time_us = 1.0 : f64}} : ({T}, {T}) -> {T}
  func.return %h : {T}
}}
"""


def test_a_module_block_floor_counts_the_windows_on_one_comm_stream_only() -> None:
    """PARTS as a module: 22 us with one comm stream (the windows floor); with two the
    all-to-alls may run at once (the input order takes 1 + 10 + 2 + 2 + 1 = 16 us), so only
    the release bounds (16) are claimed."""
    one = ModuleSimulation(parse(PARTS_MODULE), CostModel.from_config(CostConfig()))
    assert one.order_floor_us(one.items[0].block) == 22.0
    two = ModuleSimulation(
        parse(PARTS_MODULE), CostModel.from_config(CostConfig()), SimOptions(num_comm_streams=2)
    )
    block = two.items[0].block
    assert two.order_floor_us(block) == 16.0
    assert two.result(block).summary.makespan_us == 16.0
