"""Timeline simulator on tiny DAGs with hand-computed schedules (lancet_mlir.sim.timeline)."""

from __future__ import annotations

import pytest

from lancet_mlir.graph.core import Problem
from lancet_mlir.sim import (
    busy_time,
    critical_path,
    evaluate_fixed_order,
    exposed_comm_us,
    list_schedule,
    longest_data_path_us,
    lower_bound_us,
    overlap_us,
    summarize,
    weight_update_first,
)
from lancet_mlir.sim.engine import _fixed_order_events


def two_branches() -> tuple[Problem, list[float]]:
    """a(3) -> allreduce r(5) -> update u(2);  b(6) -> c(1) -> allreduce r2(5).

    Nodes: a=0, r=1, u=2, b=3, c=4, r2=5.
    """
    g = Problem.from_edges(6, [(0, 1), (1, 2), (3, 4), (4, 5)], comm=[1, 5])
    return g, [3.0, 5.0, 2.0, 6.0, 1.0, 5.0]


def brief_example() -> tuple[Problem, list[float]]:
    """a(3) -> allreduce r(5) -> update u(2), and an independent compute b(4)."""
    g = Problem.from_edges(4, [(0, 1), (1, 2)], comm=[1])
    return g, [3.0, 5.0, 2.0, 4.0]


# ---- fixed order -----------------------------------------------------------------------------
def test_fixed_order_brief_example() -> None:
    # block order a, r, u, b: a [0,3]; r waits for a: [3,8]; u waits for r: [8,10];
    # b is behind u on the compute stream: [10,14].
    g, d = brief_example()
    tl = evaluate_fixed_order(g, d)
    assert tl.start == [0.0, 3.0, 8.0, 10.0]
    assert tl.end == [3.0, 8.0, 10.0, 14.0]
    assert tl.stream == [0, 1, 0, 0]
    assert tl.makespan_us == 14.0
    assert tl.chains == [[0, 2, 3], [1]]
    assert tl.order == [0, 1, 2, 3]


def test_fixed_order_other_order() -> None:
    # order a, b, r, u: b runs while r communicates: a [0,3], b [3,7], r [3,8], u [8,10].
    g, d = brief_example()
    tl = evaluate_fixed_order(g, d, order=[0, 3, 1, 2])
    assert tl.start == [0.0, 3.0, 8.0, 3.0]
    assert tl.end == [3.0, 8.0, 10.0, 7.0]
    assert tl.makespan_us == 10.0
    # equal start 3: compute b before comm r
    assert tl.order == [0, 3, 1, 2]


def test_fixed_order_critical_path_is_makespan() -> None:
    # everything serializes: a[0,3] r[3,8] u[8,10] b[10,16] c[16,17] r2[17,22]
    g, d = two_branches()
    tl = evaluate_fixed_order(g, d)
    assert tl.end == [3.0, 8.0, 10.0, 16.0, 17.0, 22.0]
    # r2 <- c <- b <- (stream order) u <- r <- a
    assert critical_path(g, d, tl) == [0, 1, 2, 3, 4, 5]


def test_fixed_order_rejects_use_before_def() -> None:
    g, d = brief_example()
    with pytest.raises(ValueError, match="before its producer"):
        evaluate_fixed_order(g, d, order=[1, 0, 2, 3])
    with pytest.raises(ValueError, match="permutation"):
        evaluate_fixed_order(g, d, order=[0, 1, 2])


@pytest.mark.parametrize(
    ("durations", "kwargs", "message"),
    [
        ([1.0, 2.0], {}, "durations for a graph"),
        ([1.0, -1.0, 1.0, 1.0], {}, "finite and >= 0"),
        ([1.0, 1.0, 1.0, 1.0], {"overlap_slowdown": 0.5}, "overlap_slowdown"),
        ([1.0, 1.0, 1.0, 1.0], {"num_comm_streams": 0}, "num_comm_streams"),
    ],
)
def test_bad_inputs(durations: list[float], kwargs: dict, message: str) -> None:
    g, _ = brief_example()
    with pytest.raises(ValueError, match=message):
        evaluate_fixed_order(g, durations, **kwargs)
    with pytest.raises(ValueError, match=message):
        list_schedule(g, durations, **kwargs)


# ---- list scheduling ---------------------------------------------------------------------------
def test_list_schedule_brief_example() -> None:
    # t=0: a and b ready, tie on readiness -> lower index a [0,3]. t=3: r [3,8] on comm,
    # b [3,7] on compute. t=8: u (consumes the allreduce) is held; nothing else runs, so it
    # is released at once: u [8,10].
    g, d = brief_example()
    tl = list_schedule(g, d)
    assert tl.start == [0.0, 3.0, 8.0, 3.0]
    assert tl.end == [3.0, 8.0, 10.0, 7.0]
    assert tl.makespan_us == 10.0
    assert tl.order == [0, 3, 1, 2]  # at t=3 compute (b) before comm (r)


def test_list_schedule_delays_weight_update_until_idle() -> None:
    # a [0,3]; t=3: r [3,8], b [3,9]; t=8: u held; t=9: c [9,10]; t=10: r2 [10,15];
    # t=15: nothing runs -> release u [15,17].
    g, d = two_branches()
    assert weight_update_first(g) == [2]
    tl = list_schedule(g, d)
    assert tl.start == [0.0, 3.0, 15.0, 3.0, 9.0, 10.0]
    assert tl.end == [3.0, 8.0, 17.0, 9.0, 10.0, 15.0]
    assert tl.makespan_us == 17.0
    assert tl.order == [0, 3, 1, 4, 5, 2]
    assert tl.chains == [[0, 3, 4, 2], [1, 5]]


def test_list_schedule_without_delay_uses_readiness_then_priority() -> None:
    g, d = two_branches()
    # no delay, equal priorities: at t=9 u (ready at 8) beats c (ready at 9):
    # u [9,11], c [11,12], r2 [12,17]
    tl = list_schedule(g, d, delayed=[])
    assert tl.start == [0.0, 3.0, 9.0, 3.0, 11.0, 12.0]
    assert tl.makespan_us == 17.0
    # priority 0 for u: c [9,10] first, r2 [10,15] overlaps u [10,12]
    tl = list_schedule(g, d, delayed=[], priorities=[1, 1, 0, 1, 1, 1])
    assert tl.start == [0.0, 3.0, 10.0, 3.0, 9.0, 10.0]
    assert tl.makespan_us == 15.0
    assert tl.order == [0, 3, 1, 4, 2, 5]


def test_list_schedule_detects_cycles() -> None:
    g = Problem.from_edges(2, [(0, 1), (1, 0)])
    with pytest.raises(ValueError, match="never ran"):
        list_schedule(g, [1.0, 1.0])


# ---- accounting --------------------------------------------------------------------------------
def test_exposed_comm_overlap_and_lower_bound() -> None:
    # the delayed list schedule above: compute a[0,3] b[3,9] c[9,10] u[15,17];
    # comm r[3,8] r2[10,15]. r hides behind b (5 µs overlap), r2 is fully exposed (5 µs).
    g, d = two_branches()
    tl = list_schedule(g, d)
    assert exposed_comm_us(tl) == 5.0
    assert overlap_us(tl) == 5.0
    assert busy_time(tl) == [12.0, 10.0]
    # compute 3+2+6+1 = 12, comm 10, longest data path b->c->r2 = 12
    assert longest_data_path_us(g, d) == 12.0
    assert lower_bound_us(g, d) == 12.0
    summary = summarize(g, d, tl)
    assert summary.makespan_us == 17.0
    assert summary.compute_us == 12.0
    assert summary.comm_us == 10.0
    assert summary.exposed_comm_us == 5.0
    assert summary.overlap_us == 5.0
    assert summary.lower_bound_us == 12.0
    assert summary.num_ops == 6
    assert summary.num_collectives == 2
    # a -> b (stream) -> c -> r2: 3 + 6 + 1 + 5 = 15 (u's wait is idle time, not on a path)
    assert critical_path(g, d, tl) == [0, 3, 4, 5]
    assert summary.critical_path_len == 4
    assert summary.critical_path_us == 15.0


def test_exposed_comm_with_two_streams_counts_the_union() -> None:
    # two independent 4 µs collectives on two streams, a 1 µs compute: comm union [0,4],
    # compute [0,1] -> exposed 3
    g = Problem.from_edges(3, [], comm=[1, 2])
    tl = evaluate_fixed_order(g, [1.0, 4.0, 4.0], num_comm_streams=2)
    assert tl.stream == [0, 1, 2]
    assert exposed_comm_us(tl) == 3.0
    assert overlap_us(tl) == 1.0
    # lower bound: comm 8 / 2 streams = 4
    assert lower_bound_us(g, [1.0, 4.0, 4.0], 2) == 4.0


# ---- several comm streams ----------------------------------------------------------------------
def test_two_comm_streams_run_collectives_concurrently() -> None:
    # a(1) -> r1(4), r2(4) -> u(1). One stream: r1 [1,5], r2 [5,9], u [9,10].
    # Two streams: r1 [1,5] on 1, r2 [1,5] on 2, u [5,6].
    g = Problem.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)], comm=[1, 2])
    d = [1.0, 4.0, 4.0, 1.0]
    assert evaluate_fixed_order(g, d).makespan_us == 10.0
    tl = evaluate_fixed_order(g, d, num_comm_streams=2)
    assert tl.start == [0.0, 1.0, 1.0, 5.0]
    assert tl.stream == [0, 1, 2, 0]
    assert tl.makespan_us == 6.0
    lst = list_schedule(g, d, num_comm_streams=2, delayed=[])
    assert lst.start == [0.0, 1.0, 1.0, 5.0]
    assert lst.stream == [0, 1, 2, 0]


def test_collective_goes_to_stream_that_frees_earliest() -> None:
    # c1(4), c2(2), c3(1) independent: c1 -> stream 1 [0,4], c2 -> stream 2 [0,2],
    # c3 -> stream 2 (frees at 2 < 4): [2,3]
    g = Problem.from_edges(3, [], comm=[0, 1, 2])
    d = [4.0, 2.0, 1.0]
    for tl in (
        evaluate_fixed_order(g, d, num_comm_streams=2),
        _fixed_order_events(g, d, [0, 1, 2], 2, 1.0),
        list_schedule(g, d, num_comm_streams=2),
    ):
        assert tl.stream == [1, 2, 2]
        assert tl.start == [0.0, 0.0, 2.0]
        assert tl.end == [4.0, 2.0, 3.0]
        assert tl.chains == [[], [0], [1, 2]]


# ---- overlap slowdown --------------------------------------------------------------------------
def test_slowdown_while_collective_runs() -> None:
    # compute a(3) and collective r(2) both start at 0. With f = 1.5, a progresses 2/1.5
    # during r, then the remaining 3 - 4/3 = 5/3 at full speed: a ends at 2 + 5/3 = 11/3.
    g = Problem.from_edges(2, [], comm=[1])
    for tl in (
        evaluate_fixed_order(g, [3.0, 2.0], overlap_slowdown=1.5),
        list_schedule(g, [3.0, 2.0], overlap_slowdown=1.5),
    ):
        assert tl.start == [0.0, 0.0]
        assert tl.end[0] == pytest.approx(11.0 / 3.0, abs=1e-12)
        assert tl.end[1] == 2.0
        assert tl.makespan_us == pytest.approx(11.0 / 3.0, abs=1e-12)


def test_slowdown_collective_starting_mid_compute() -> None:
    # x(1) -> r(2, comm); a(3) after x on the compute stream. a runs [1, ...], r [1,3]:
    # a is slowed over [1,3] (progress 4/3) and finishes 5/3 later: 3 + 5/3 = 14/3.
    g = Problem.from_edges(3, [(0, 2)], comm=[2])
    tl = evaluate_fixed_order(g, [1.0, 3.0, 2.0], overlap_slowdown=1.5)
    assert tl.start == [0.0, 1.0, 1.0]
    assert tl.end[0] == 1.0
    assert tl.end[1] == pytest.approx(14.0 / 3.0, abs=1e-12)
    assert tl.end[2] == 3.0


def test_slowdown_compute_inside_collective() -> None:
    # r(4) and a(2) start together; a runs entirely under r: 2 * 1.5 = 3 < 4.
    g = Problem.from_edges(2, [], comm=[0])
    tl = evaluate_fixed_order(g, [4.0, 2.0], overlap_slowdown=1.5)
    assert tl.end == [4.0, 3.0]
    assert tl.makespan_us == 4.0


def test_slowdown_one_equals_plain_formula_on_hand_graph() -> None:
    g, d = two_branches()
    plain = evaluate_fixed_order(g, d)
    events = _fixed_order_events(g, d, list(range(6)), 1, 1.0)
    assert (events.start, events.end, events.stream) == (plain.start, plain.end, plain.stream)


# ---- launch order with zero-duration ops -------------------------------------------------------
def test_zero_duration_collective_stays_before_its_consumer() -> None:
    # r (comm, 0 µs) -> u (compute): both start at 0; "compute first" would put u before
    # its producer, so the order keeps r first.
    g = Problem.from_edges(2, [(0, 1)], comm=[0])
    tl = evaluate_fixed_order(g, [0.0, 2.0])
    assert tl.start == [0.0, 0.0]
    assert tl.order == [0, 1]
    tl = list_schedule(g, [0.0, 2.0])
    assert tl.order == [0, 1]


def test_empty_graph() -> None:
    g = Problem.from_edges(0, [])
    tl = evaluate_fixed_order(g, [])
    assert tl.makespan_us == 0.0
    assert tl.order == []
    assert list_schedule(g, []).makespan_us == 0.0
    assert critical_path(g, [], tl) == []
    assert summarize(g, [], tl).makespan_us == 0.0
