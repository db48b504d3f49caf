"""The makespan floor (`sim/makespan_floor.py`): hand-computed floors, no order of random
small graphs beating it (the exact optimum included), and what `ModuleSimulation` feeds it."""

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
from lancet_mlir.sim.makespan_floor import heads_and_tails, release_floor_us


def floor_of(p: Problem) -> float:
    """The floor of a problem with its own durations, its compute stream as `on_compute`."""
    return release_floor_us(p.preds, p.succs, p.durations, [p.is_compute(v) for v in range(len(p))])


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
