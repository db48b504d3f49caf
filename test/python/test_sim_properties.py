"""Property tests of the timeline simulator on random DAGs (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.graph.core import Problem
from lancet_mlir.sim import (
    Timeline,
    critical_path,
    evaluate_fixed_order,
    exposed_comm_us,
    list_schedule,
    lower_bound_us,
    overlap_us,
)
from lancet_mlir.sim.engine import _fixed_order_events

# Durations are multiples of 0.5 so sums are exact in binary floating point.
DURATIONS = st.integers(min_value=0, max_value=12).map(lambda k: k * 0.5)
POSITIVE = st.integers(min_value=1, max_value=12).map(lambda k: k * 0.5)


@st.composite
def dags(draw: st.DrawFn, positive: bool = False) -> tuple[Problem, list[float]]:
    """A random DAG whose node order is topological (edges go from lower to higher index)."""
    n = draw(st.integers(min_value=1, max_value=12))
    pairs = [(p, c) for c in range(n) for p in range(c)]
    edges = draw(st.lists(st.sampled_from(pairs), max_size=2 * n, unique=True)) if pairs else []
    comm = [i for i in range(n) if draw(st.booleans())]
    durations = [draw(POSITIVE if positive else DURATIONS) for _ in range(n)]
    return Problem.from_edges(n, edges, comm), durations


def longest_path_with_stream_edges(g: Problem, d: list[float]) -> float:
    """Independent reference: one comm stream, both streams in node order; every edge
    (data or stream order) goes forward in node order, so one forward DP is exact."""
    n = len(g)
    finish = [0.0] * n
    last = {False: -1, True: -1}
    for i in range(n):
        incoming = list(g.preds[i])
        if last[g.is_comm[i]] >= 0:
            incoming.append(last[g.is_comm[i]])
        finish[i] = max((finish[p] for p in incoming), default=0.0) + d[i]
        last[g.is_comm[i]] = i
    return max(finish, default=0.0)


def check_valid(g: Problem, tl: Timeline, d: list[float], slowdown: float = 1.0) -> None:
    """Dependencies, stream kinds, stream exclusivity and durations of a timeline."""
    n = len(g)
    for c in range(n):
        for p in g.preds[c]:
            assert tl.start[c] >= tl.end[p]
        assert (tl.stream[c] > 0) == g.is_comm[c]
        length = tl.end[c] - tl.start[c]
        if slowdown == 1.0:
            assert length == d[c]
        elif g.is_comm[c]:  # start times are no longer multiples of 0.5: allow rounding
            assert abs(length - d[c]) <= 1e-9
        else:
            assert d[c] - 1e-9 <= length <= d[c] * slowdown + 1e-9
    for chain in tl.chains:
        for a, b in zip(chain, chain[1:], strict=False):
            assert tl.start[b] >= tl.end[a]
    assert sorted(i for chain in tl.chains for i in chain) == list(range(n))
    assert tl.makespan_us == max(tl.end, default=0.0)
    order = tl.order
    position = {i: k for k, i in enumerate(order)}
    assert all(position[p] < position[c] for c in range(n) for p in g.preds[c])


@settings(max_examples=150, deadline=None)
@given(dags())
def test_fixed_order_is_longest_path_over_data_and_stream_edges(case) -> None:
    g, d = case
    tl = evaluate_fixed_order(g, d)
    assert tl.makespan_us == longest_path_with_stream_edges(g, d)
    check_valid(g, tl, d)
    path = critical_path(g, d, tl)
    assert sum(d[i] for i in path) == tl.makespan_us


@settings(max_examples=100, deadline=None)
@given(dags(), st.sampled_from([1, 2, 3]))
def test_event_simulation_at_slowdown_one_equals_formula(case, k: int) -> None:
    g, d = case
    if k > 1:  # ties of zero-length collectives may pick another stream (documented)
        d = [x if x > 0 else 0.5 for x in d]
    plain = evaluate_fixed_order(g, d, num_comm_streams=k)
    events = _fixed_order_events(g, d, list(range(len(g))), k, 1.0)
    assert events.start == plain.start
    assert events.end == plain.end
    assert events.stream == plain.stream


@settings(max_examples=100, deadline=None)
@given(dags(), st.sampled_from([1, 2]), st.sampled_from([1.0, 1.5, 2.0]))
def test_list_schedule_is_valid_and_deterministic(case, k: int, f: float) -> None:
    g, d = case
    a = list_schedule(g, d, num_comm_streams=k, overlap_slowdown=f)
    b = list_schedule(g, d, num_comm_streams=k, overlap_slowdown=f)
    assert a == b
    assert a.order == b.order
    check_valid(g, a, d, f)
    assert a.makespan_us >= lower_bound_us(g, d, k)


@settings(max_examples=100, deadline=None)
@given(dags())
def test_replaying_the_list_order_is_never_slower(case) -> None:
    # The fixed-order evaluation of the launch order starts every op as early as the
    # chains and data edges allow, so it cannot end later than the list schedule.
    g, d = case
    lst = list_schedule(g, d)
    replay = evaluate_fixed_order(g, d, order=lst.order)
    assert replay.makespan_us <= lst.makespan_us
    assert replay.chains == lst.chains


@settings(max_examples=100, deadline=None)
@given(dags(), st.sampled_from([1.25, 1.5, 3.0]))
def test_slowdown_is_bounded_by_stretched_compute(case, f: float) -> None:
    # Each compute op runs between d and f*d, so the fixed-order makespan lies between the
    # evaluation with nominal durations and the one with every compute op stretched by f.
    g, d = case
    slow = evaluate_fixed_order(g, d, overlap_slowdown=f)
    check_valid(g, slow, d, f)
    stretched = [x if c else x * f for x, c in zip(d, g.is_comm, strict=True)]
    assert evaluate_fixed_order(g, d).makespan_us - 1e-9 <= slow.makespan_us
    assert slow.makespan_us <= evaluate_fixed_order(g, stretched).makespan_us + 1e-9


@settings(max_examples=100, deadline=None)
@given(dags(), st.sampled_from([1, 2]))
def test_exposed_plus_overlap_is_the_comm_union(case, k: int) -> None:
    g, d = case
    tl = evaluate_fixed_order(g, d, num_comm_streams=k)
    # measure the union of comm intervals on a 0.5 µs grid (all times are multiples of 0.5)
    ticks = int(tl.makespan_us * 2)
    comm_ticks = comp_ticks = both = 0
    for t in range(ticks):
        mid = t * 0.5 + 0.25
        on_comm = any(tl.start[i] < mid < tl.end[i] for i in range(len(g)) if g.is_comm[i])
        on_comp = any(tl.start[i] < mid < tl.end[i] for i in range(len(g)) if not g.is_comm[i])
        comm_ticks += on_comm
        comp_ticks += on_comp
        both += on_comm and on_comp
    assert overlap_us(tl) == both * 0.5
    assert exposed_comm_us(tl) == (comm_ticks - both) * 0.5
