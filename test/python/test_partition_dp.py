"""The range DP (§8.3) against brute force, and the phased pipeline simulator (§5.3) on
hand-computed pipelines."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.partition.dp import best_ranges
from lancet_mlir.partition.phased import ARBITRARY, EPILOGUE, PRELUDE, phased_simulate


def segmentations(k: int, window: int) -> list[list[tuple[int, int]]]:
    """Every cut of groups [0, k) into consecutive ranges of at most `window` groups."""
    if k == 0:
        return [[]]
    out = []
    for first in range(1, min(window, k) + 1):
        for rest in segmentations(k - first, window):
            out.append([(0, first)] + [(j + first, i + first) for j, i in rest])
    return out


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_dp_equals_brute_force(data: st.DataObject) -> None:
    k = data.draw(st.integers(0, 7))
    window = data.draw(st.integers(1, 8))
    table = {
        (j, i): data.draw(st.integers(0, 50))
        for i in range(1, k + 1)
        for j in range(max(0, i - window), i)
    }
    calls: list[tuple[int, int]] = []

    def local(j: int, i: int) -> float:
        calls.append((j, i))
        return float(table[(j, i)])

    plan = best_ranges(k, window, local)
    brute = min(sum(table[r] for r in seg) for seg in segmentations(k, window))
    assert plan.cost == brute
    assert sum(table[r] for r in plan.ranges) == plan.cost
    bounds = [0] + [i for _, i in plan.ranges]
    assert plan.ranges == list(zip(bounds, bounds[1:], strict=False))
    assert bounds[-1] == k
    assert all(0 < i - j <= window for j, i in plan.ranges)
    assert sorted(calls) == sorted(set(calls)) == sorted(table)  # each range costed once


def test_dp_prefers_partitioning_the_long_range() -> None:
    # groups 0..3; partitioning groups [1, 3) together saves time, any other range costs its size
    def local(j: int, i: int) -> float:
        return 5.0 if (j, i) == (1, 3) else 4.0 * (i - j)

    plan = best_ranges(4, 3, local)
    assert plan.ranges == [(0, 1), (1, 3), (3, 4)]
    assert plan.cost == 13.0


def test_dp_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="window >= 1"):
        best_ranges(3, 0, lambda j, i: 0.0)


def tutel_pipeline(n: int) -> tuple[list[list[int]], list[bool], list[float], list[int]]:
    """Per part k: a2a in (10 µs) -> expert (20 µs) -> a2a out (10 µs), phase k + 1."""
    preds: list[list[int]] = []
    is_comm: list[bool] = []
    durations: list[float] = []
    phases: list[int] = []
    for k in range(n):
        base = 3 * k
        preds += [[], [base], [base + 1]]
        is_comm += [True, False, True]
        durations += [10.0, 20.0, 10.0]
        phases += [k + 1] * 3
    return preds, is_comm, durations, phases


def test_phased_pipeline_of_two_parts() -> None:
    res = phased_simulate(*tutel_pipeline(2))
    # in0 [0,10]; expert0 [10,30] while in1 [10,20]; out0 [30,40] while expert1 [30,50];
    # out1 [50,60]
    assert res.start == [0.0, 10.0, 30.0, 10.0, 30.0, 50.0]
    assert res.makespan_us == 60.0
    assert res.order == [0, 1, 3, 4, 2, 5]  # compute first at equal start


def test_phased_pipeline_of_four_parts() -> None:
    res = phased_simulate(*tutel_pipeline(4))
    # compute is the bottleneck after the first a2a: 10 + 4 x 20 + last out 10
    assert res.makespan_us == 100.0
    assert res.start[1::3] == [10.0, 30.0, 50.0, 70.0]


def test_a_stream_stays_in_its_phase_then_rotates() -> None:
    # three independent compute ops: phase 2 (ready first), phase 1, phase 2
    res = phased_simulate([[], [], []], [False] * 3, [5.0, 3.0, 1.0], [2, 1, 2])
    assert res.order == [1, 0, 2]  # phase 1 first (pointer 0 -> 1), then phase 2 in FIFO order
    assert res.start == [3.0, 0.0, 8.0]


def test_arbitrary_then_epilogue_after_pipeline_work() -> None:
    phases = [EPILOGUE, ARBITRARY, PRELUDE, 1]
    res = phased_simulate([[], [], [], []], [False] * 4, [1.0] * 4, phases)
    assert res.order == [2, 3, 1, 0]


def test_priorities_break_ties_within_a_phase() -> None:
    res = phased_simulate([[], []], [False, False], [1.0, 1.0], [1, 1], priorities=[0.0, 1.0])
    assert res.order == [1, 0]


def test_zero_time_ops_keep_a_topological_order() -> None:
    # a zero-time comm op feeding a compute op: both start at 0, producer listed first
    res = phased_simulate([[], [0]], [True, False], [0.0, 2.0], [1, 1])
    assert res.order == [0, 1]


def test_cycle_is_rejected() -> None:
    with pytest.raises(ValueError, match="cycle"):
        phased_simulate([[1], [0]], [False, False], [1.0, 1.0], [0, 0])
