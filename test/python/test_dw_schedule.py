"""dw-schedule (lancet-algorithms.md §6.2-6.3): labelling, placement, gap filling, the pass."""

from __future__ import annotations

import pytest
from helpers import parse, run_pipeline, run_tool, to_text
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.graph.core import Problem
from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.optimize.dw import dw_schedule, fifo_list_schedule, fill_allreduce_gaps, label_dw
from lancet_mlir.sim import evaluate_fixed_order
from lancet_mlir.sim.blocks import simulate_module

T = "tensor<64xf32>"


def backward_with_allreduces() -> Problem:
    """c0(2) -> A1(6) -> e(3) -> A2(6) -> g(2): the dX chain with two all-to-alls;
    w0(4) independent dW -> r0(3) -> u0(1); w1(5) expert dW after A1 -> r1(2) -> u1(1)."""
    names = ["c0", "w0", "r0", "A1", "e", "w1", "r1", "A2", "g", "u0", "u1"]
    dur = [2, 4, 3, 6, 3, 5, 2, 6, 2, 1, 1]
    edges = [(0, 3), (1, 2), (3, 4), (3, 5), (5, 6), (4, 7), (7, 8), (2, 9), (6, 10)]
    comm = {2: "allreduce", 3: "all_to_all", 6: "allreduce", 7: "all_to_all"}
    assert len(names) == len(dur)
    return Problem.from_edges(dur, edges, comm)


def test_labels_on_a_backward_graph() -> None:
    p = backward_with_allreduces()
    labels = label_dw(p, list(range(len(p))))
    assert labels.windows == [3, 7]
    assert labels.candidates == [1, 5]  # w0 (both windows), w1 (after A1: only A2)
    assert labels.overlappable == {1: [0, 1], 5: [1]}
    assert labels.updates == (1 << 9) | (1 << 10)  # u0, u1 consume all-reduces


def test_dw_schedule_hand_computed() -> None:
    p = backward_with_allreduces()
    # program order: c0 [0,2] w0 [2,6] r0 [6,9] A1 [9,15] e [15,18] w1 [18,23] r1 [23,25]
    # A2 [25,31] g [31,33] u0 [33,34] u1 [34,35]
    assert evaluate_fixed_order(p, p.durations).makespan_us == 35.0
    s = dw_schedule(p)
    assert s.placed == [[1], [5]]  # w0 fills A1's window, w1 fills A2's
    # c0 [0,2]; A1 [2,8] || w0 [2,6]; e [8,11] || r0 [8,11] (fits the gap before A2);
    # A2 [11,17] || w1 [11,16]; g [17,19] || r1 [17,19]; u0 [19,20]; u1 [20,21]
    assert s.makespan_us == 21.0
    assert evaluate_fixed_order(p, p.durations, order=s.order).makespan_us == 21.0
    comm = [v for v in s.order if p.is_comm[v]]
    assert comm == [3, 2, 7, 6]


def test_best_fit_beats_fifo() -> None:
    # c0(2) -> A1(6) -> e(3) -> A2(6) -> g(2); independent dWs w0(10), w2(5)
    p = Problem.from_edges(
        [2, 10, 5, 6, 3, 6, 2], [(0, 3), (3, 4), (4, 5), (5, 6)], {3: "all_to_all", 5: "all_to_all"}
    )
    # FIFO runs w0 in A1's window: e waits until 12, w2 until 17: 28 µs (= program order)
    assert fifo_list_schedule(p).makespan_us == 28.0
    s = dw_schedule(p)
    # best fit puts w2 (5) into A1's 6 µs window and w0 into A2's: c0 [0,2] w2 [2,7]
    # e [8,11] w0 [11,21] g [21,23]; 23 = compute 22 + the idle [7,8]: optimal
    assert s.placed == [[2], [1]]
    assert s.makespan_us == 23.0


def test_fill_gaps_largest_fitting_first() -> None:
    # c0(2) -> A1(1); c0 -> x(10) -> A2(1): comm gaps [0,2) and [3,12)
    # fillers f2, f3, f4, f6 (all ready at 0)
    p = Problem.from_edges(
        [2, 1, 10, 1, 2, 3, 4, 6],
        [(0, 1), (0, 2), (2, 3)],
        {
            1: "all_to_all",
            3: "all_to_all",
            4: "allreduce",
            5: "allreduce",
            6: "allreduce",
            7: "allreduce",
        },
    )
    comm = fill_allreduce_gaps(p, [[0, 2], [1, 3]], [4, 5, 6, 7])
    # [0,2): f2; [3,12): f6 [3,9], then f3 [9,12]; f4 waits for A2
    assert comm == [4, 1, 7, 5, 3, 6]


def test_allreduces_without_all_to_all() -> None:
    # w0(4) -> r0(3) -> u0(1); w1(5) -> r1(2) -> u1(1); c0(2) -> c1(3)
    p = Problem.from_edges(
        [4, 3, 1, 5, 2, 1, 2, 3],
        [(0, 1), (1, 2), (3, 4), (4, 5), (6, 7)],
        {1: "allreduce", 4: "allreduce"},
    )
    assert evaluate_fixed_order(p, p.durations).makespan_us == 21.0
    s = dw_schedule(p)
    assert s.labels.windows == []
    assert s.placed == []
    # w0 [0,4] w1 [4,9] c0 [9,11] c1 [11,14]; r0 [4,7] r1 [9,11]; u0 [14,15] u1 [15,16]
    assert s.makespan_us == 16.0


def test_no_collectives_is_a_no_op_in_the_pass() -> None:
    text = f"""
func.func @f(%x: {T}) -> {T} {{
  %b = "test.op"(%x) {{lancet.time_us = 4.0 : f64}} : ({T}) -> {T}
  %a = "test.op"(%x) {{lancet.time_us = 1.0 : f64}} : ({T}) -> {T}
  %c = "test.op"(%a, %b) {{lancet.time_us = 1.0 : f64}} : ({T}, {T}) -> {T}
  func.return %c : {T}
}}
"""
    assert to_text(run_pipeline(parse(text), "dw-schedule")) == to_text(parse(text))


def test_role_attribute_is_honoured() -> None:
    p = backward_with_allreduces()
    p.role[1] = "dx"  # w0 declared a dX op: not a dW candidate
    assert label_dw(p, list(range(len(p)))).candidates == [5]


BACKWARD = f"""
func.func @step(%x: {T}, %h: {T}) -> ({T}, {T}, {T}) {{
  %c0 = "test.op"(%x) {{lancet.time_us = 2.0 : f64}} : ({T}) -> {T}
  %w0 = "test.op"(%h) {{lancet.time_us = 4.0 : f64}} : ({T}) -> {T}
  %r0 = comm.allreduce %w0 {{lancet.time_us = 3.0 : f64}} : ({T}) -> {T}
  %a1 = comm.all_to_all %c0 {{lancet.time_us = 6.0 : f64}} : ({T}) -> {T}
  %e = "test.op"(%a1) {{lancet.time_us = 3.0 : f64}} : ({T}) -> {T}
  %w1 = "test.op"(%a1) {{lancet.time_us = 5.0 : f64}} : ({T}) -> {T}
  %r1 = comm.allreduce %w1 {{lancet.time_us = 2.0 : f64}} : ({T}) -> {T}
  %a2 = comm.all_to_all %e {{lancet.time_us = 6.0 : f64}} : ({T}) -> {T}
  %g = "test.op"(%a2) {{lancet.time_us = 2.0 : f64}} : ({T}) -> {T}
  %u0 = "test.op"(%r0) {{lancet.time_us = 1.0 : f64}} : ({T}) -> {T}
  %u1 = "test.op"(%r1) {{lancet.time_us = 1.0 : f64}} : ({T}) -> {T}
  func.return %g, %u0, %u1 : {T}, {T}, {T}
}}
"""


def makespan(module) -> float:
    model = CostModel.from_config(CostConfig())
    return sum(r.summary.makespan_us for r in simulate_module(module, model) if r.top_level)


def test_pass_on_the_backward_graph() -> None:
    module = run_pipeline(parse(BACKWARD), "dw-schedule")
    assert makespan(parse(BACKWARD)) == 35.0
    assert makespan(module) == 21.0
    names = [line.split("=")[0].strip() for line in to_text(module).splitlines() if " = " in line]
    assert names == ["%c0", "%w0", "%a1", "%e", "%r0", "%w1", "%a2", "%g", "%r1", "%u0", "%u1"]


def test_pass_is_deterministic_across_hash_seeds(tmp_path) -> None:
    src = tmp_path / "in.mlir"
    src.write_text(BACKWARD)
    outs = []
    for seed in ("0", "12345"):
        res = run_tool(["lancet-opt", str(src), "-p", "dw-schedule"], env={"PYTHONHASHSEED": seed})
        assert res.returncode == 0, res.stderr
        outs.append(res.stdout)
    assert outs[0] == outs[1]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("dw-schedule{comm-streams=0}", "dw-schedule: comm-streams must be >= 1, got 0"),
        (
            "dw-schedule{overlap-slowdown=abc}",
            "dw-schedule: option overlap-slowdown expects a number, got 'abc'",
        ),
        (
            "dw-schedule{window=3}",
            "dw-schedule: unknown option window; options: device, cluster, profile, comm-table, "
            "gpus-per-node, network-gbps, comm-streams, overlap-slowdown",
        ),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path, spec: str, message: str) -> None:
    src = tmp_path / "in.mlir"
    src.write_text(BACKWARD)
    res = run_tool(["lancet-opt", str(src), "-p", spec, "-o", str(tmp_path / "out.mlir")])
    assert res.returncode == 1
    assert len(res.stderr.strip().splitlines()) == 1
    assert message in res.stderr
    assert not (tmp_path / "out.mlir").exists()


@st.composite
def backward_blocks(draw: st.DrawFn) -> str:
    """A random backward-like block: a dX chain through all-to-alls, dW ops hanging off it
    with all-reduces and update ops."""
    lines, prev, outs = [], "%x", []
    n_chain = draw(st.integers(2, 5))
    for i in range(n_chain):
        t = draw(st.integers(0, 8))
        kind = "comm.all_to_all" if draw(st.booleans()) else None
        if kind:
            lines.append(
                f"  %c{i} = comm.all_to_all {prev} {{lancet.time_us = {t}.0 : f64}} : ({T}) -> {T}"
            )
        else:
            lines.append(
                f'  %c{i} = "test.op"({prev}) {{lancet.time_us = {t}.0 : f64}} : ({T}) -> {T}'
            )
        prev = f"%c{i}"
        if draw(st.booleans()):
            src = draw(st.sampled_from(["%x"] + [f"%c{j}" for j in range(i + 1)]))
            w, r = draw(st.integers(0, 8)), draw(st.integers(0, 8))
            lines.append(
                f'  %w{i} = "test.op"({src}) {{lancet.time_us = {w}.0 : f64}} : ({T}) -> {T}'
            )
            lines.append(
                f"  %r{i} = comm.allreduce %w{i} {{lancet.time_us = {r}.0 : f64}} : ({T}) -> {T}"
            )
            lines.append(
                f'  %u{i} = "test.op"(%r{i}) {{lancet.time_us = 1.0 : f64}} : ({T}) -> {T}'
            )
            outs.append(f"%u{i}")
    outs.append(prev)
    body = "\n".join(lines)
    types = ", ".join([T] * len(outs))
    return f"func.func @g(%x: {T}) -> ({types}) {{\n{body}\n  func.return {', '.join(outs)} : {types}\n}}\n"


@settings(max_examples=30, deadline=None)
@given(backward_blocks())
def test_pass_is_topological_and_never_worse(text: str) -> None:
    before = parse(text)
    after = run_pipeline(parse(text), "dw-schedule")
    check_dominance(after)
    assert makespan(after) <= makespan(before)
    assert sorted(to_text(after).splitlines()) == sorted(to_text(before).splitlines())


def test_zero_duration_filler_stays_after_its_all_to_all() -> None:
    # c0(0) -> A(0) -> w1(0) -> r1(0) -> u1(1): r1 is "ready" at 0 = A's start, but it
    # depends on A, so it cannot fill the gap before A (found by hypothesis)
    p = Problem.from_edges(
        [0, 0, 0, 0, 1], [(0, 1), (1, 2), (2, 3), (3, 4)], {1: "all_to_all", 3: "allreduce"}
    )
    assert fill_allreduce_gaps(p, [[0, 2], [1]], [3]) == [1, 3]
    s = dw_schedule(p)
    assert s.order == [0, 1, 2, 3, 4]
    assert s.makespan_us == 1.0


def test_zero_duration_fillers_respect_each_later_all_to_all() -> None:
    # c0(0); A0(0), A1(0) the fixed chain; r(0) after A1, s(0) free: all "ready" at 0.
    # Before A0: s fits, r does not (it needs A1, later in the chain); before A1: r still
    # needs A1 itself. So [s, A0, A1, r]; placing r before A1 would be a cycle, and the
    # fallback for one ([A0, A1, r, s]) is what an off-by-one in "needs k or later" gives
    p = Problem.from_edges(
        [0, 0, 0, 0, 0],
        [(2, 3)],
        {1: "all_to_all", 2: "all_to_all", 3: "allreduce", 4: "allreduce"},
    )
    assert fill_allreduce_gaps(p, [[0], [1, 2]], [3, 4]) == [4, 1, 2, 3]


def test_an_update_that_feeds_the_body_is_body_work() -> None:
    # an outside review: a (mislabelled) "update" op a(4) feeding an all-to-all A(6) -> c(2)
    # made dw-schedule append a after the body that needs it: "chains form a cycle".
    # Graph: a(4, update) -> A(6) -> c(2); g(3, dw) -> r(5, allreduce) -> u(1, update)
    p = Problem.from_edges(
        [4, 6, 2, 3, 5, 1],
        [(0, 1), (1, 2), (3, 4), (4, 5)],
        {1: "all_to_all", 4: "allreduce"},
        role={0: "update", 3: "dw", 5: "update"},
    )
    labels = label_dw(p, list(range(len(p))))
    assert labels.updates == 1 << 5  # a reaches the body: not on the update side; u is
    result = dw_schedule(p)
    # a, then A with g placed in its window (dW), r fills after; c; u last:
    # compute a 0-4, g 4-7, c 10-12; comm A 4-10, r 10-15; u 15-16
    assert result.makespan_us == 16.0
    assert result.order.index(0) < result.order.index(1) < result.order.index(2)
    assert result.order[-1] == 5
