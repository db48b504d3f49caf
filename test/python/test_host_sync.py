"""Host syncs in the general simulator (sim/engine.py "Host syncs"): a `trace.host_sync` takes
no stream; with a launch overhead L > 0 the host stops at it until the awaited ops end, so the
GPU drains. Hand-computed start times on every engine path, on an imported trace and on IR."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import parse, run_tool
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import IntegerAttr

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.dialects.trace import HostSyncOp
from lancet_mlir.graph.core import Problem
from lancet_mlir.sim.blocks import simulate_module
from lancet_mlir.sim.engine import _fixed_order_events, evaluate_fixed_order, list_schedule
from lancet_mlir.sim.model import HOST_STREAM
from lancet_mlir.sim.options import SimOptions

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


def _problem(preds: list[list[int]], kinds: list[str | None], durations: list[float]) -> Problem:
    succs: list[list[int]] = [[] for _ in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    return Problem(preds, succs, kinds, durations)


# 0: allreduce (20 us); 1: host sync on it; 2: kernel c (5 us), independent of both;
# 3: kernel d (5 us) after the sync
DRAIN = _problem([[], [0], [], [1]], ["allreduce", None, None, None], [20.0, 0.0, 5.0, 5.0])
SYNC = [False, True, False, False]


def test_a_sync_without_launch_overhead_is_just_its_edges() -> None:
    tl = evaluate_fixed_order(DRAIN, DRAIN.durations, host_syncs=SYNC)
    # allreduce 0-20, the sync at 20 on no stream, c 0-5 (it does not wait for the sync:
    # a sync on the compute stream would have held it until 20), d 20-25
    assert (tl.start, tl.end) == ([0.0, 20.0, 0.0, 20.0], [20.0, 20.0, 5.0, 25.0])
    assert tl.stream == [1, HOST_STREAM, 0, 0]
    assert tl.chains == [[2, 3], [0]]
    assert tl.makespan_us == 25.0


def test_with_launch_overhead_the_gpu_drains_at_a_sync() -> None:
    tl = evaluate_fixed_order(DRAIN, DRAIN.durations, host_syncs=SYNC, launch_overhead_us=2.0)
    # the allreduce's launch ends at 2: 2-22. The host reaches the sync at 2 and waits until
    # 22; c is launched after it: 22 + 2 = 24 -> 24-29 (it depends on nothing), d's launch
    # ends at 26 but the compute stream frees at 29: 29-34
    assert (tl.start, tl.end) == ([2.0, 22.0, 24.0, 29.0], [22.0, 22.0, 29.0, 34.0])
    assert tl.makespan_us == 34.0
    # without the sync flag node 1 is a zero-time compute op: c launched at 6 waits for it
    # on the compute stream (22), d after c
    plain = evaluate_fixed_order(DRAIN, DRAIN.durations, launch_overhead_us=2.0)
    assert plain.start == [2.0, 22.0, 22.0, 27.0]


def test_the_event_path_honours_the_sync() -> None:
    # 0: kernel a (10), 1: allreduce r (10), 2: sync on a, 3: kernel b (10) after the sync.
    # Overlap slowdown 2, L = 1: a starts at 1 (alone 1-2: 1 us of work), r 2-12 slows a to
    # half (5 us of work by 12), a's last 4 us run at full speed: a ends at 16. The host has
    # launched 2 ops (clock 2) and waits for a: the sync at 16, b's launch ends at 17: 17-27
    p = _problem([[], [], [0], [2]], [None, "allreduce", None, None], [10.0, 10.0, 0.0, 10.0])
    syncs = [False, False, True, False]
    tl = evaluate_fixed_order(
        p, p.durations, overlap_slowdown=2.0, launch_overhead_us=1.0, host_syncs=syncs
    )
    assert (tl.start, tl.end) == ([1.0, 2.0, 16.0, 17.0], [16.0, 12.0, 16.0, 27.0])
    assert tl.stream == [0, 1, HOST_STREAM, 0]
    # L = 0: a 0-15 (half speed while r runs 0-10), the sync at 15, b 15-25: its edges only
    free = evaluate_fixed_order(p, p.durations, overlap_slowdown=2.0, host_syncs=syncs)
    assert (free.start, free.end) == ([0.0, 0.0, 15.0, 15.0], [15.0, 10.0, 15.0, 25.0])


@pytest.mark.parametrize("overhead", [0.0, 2.0])
def test_event_path_equals_the_formula_with_two_comm_streams(overhead: float) -> None:
    plain = evaluate_fixed_order(
        DRAIN, DRAIN.durations, num_comm_streams=2, launch_overhead_us=overhead, host_syncs=SYNC
    )
    events = _fixed_order_events(DRAIN, DRAIN.durations, [0, 1, 2, 3], 2, 1.0, overhead, None, SYNC)
    assert (events.start, events.end, events.stream) == (plain.start, plain.end, plain.stream)
    assert events.makespan_us == (34.0 if overhead else 25.0)


def test_later_syncs_wait_for_the_host_to_pass_the_earlier_ones() -> None:
    # 0: kernel a (10); 1: sync on a; 2: kernel b (1); 3: sync on nothing; 4: kernel c (1).
    # L = 1, slowdown 2 (event path): a 1-11, sync 1 at 11, b 12-13; the host reaches sync 2
    # at 12 (it awaits nothing: the host does not wait), c's launch ends at 13: 13-14
    p = _problem([[], [0], [1], [], [3]], [None] * 5, [10.0, 0.0, 1.0, 0.0, 1.0])
    syncs = [False, True, False, True, False]
    for f in (1.0, 2.0):
        tl = evaluate_fixed_order(
            p, p.durations, overlap_slowdown=f, launch_overhead_us=1.0, host_syncs=syncs
        )
        assert (tl.start, tl.end) == ([1.0, 11.0, 12.0, 12.0, 13.0], [11.0, 11.0, 13.0, 12.0, 14.0])


def test_list_scheduling_takes_a_sync_when_its_producers_end() -> None:
    tl = list_schedule(DRAIN, DRAIN.durations, host_syncs=SYNC, delayed=[], launch_overhead_us=2.0)
    # the host launches c first (compute before comm): 2-7, then the allreduce: 4-24. The
    # sync happens at 24 (the host's clock is 4); d is launched after it: 26-31
    assert (tl.start, tl.end) == ([4.0, 24.0, 2.0, 26.0], [24.0, 24.0, 7.0, 31.0])
    assert tl.makespan_us == 31.0
    free = list_schedule(DRAIN, DRAIN.durations, host_syncs=SYNC, delayed=[])
    assert (free.start, free.end) == ([0.0, 20.0, 0.0, 20.0], [20.0, 20.0, 5.0, 25.0])


def test_bad_host_sync_flags_are_refused() -> None:
    with pytest.raises(ValueError, match="3 host-sync flags for a graph of 4 ops"):
        evaluate_fixed_order(DRAIN, DRAIN.durations, host_syncs=[False, True, False])
    with pytest.raises(ValueError, match="node 0: a host sync cannot be a collective"):
        evaluate_fixed_order(DRAIN, DRAIN.durations, host_syncs=[True, False, False, False])


@st.composite
def _graphs_with_a_sync(draw: st.DrawFn) -> tuple[Problem, int]:
    n = draw(st.integers(min_value=2, max_value=9))
    preds = [
        sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(n)
    ]
    kinds = [draw(st.sampled_from([None, None, "allreduce"])) for _ in range(n)]
    durations = [draw(st.integers(0, 12)) * 0.5 for _ in range(n)]
    sync = draw(st.integers(0, n - 1))
    kinds[sync] = None
    durations[sync] = 0.0
    return _problem(preds, kinds, durations), sync


@settings(max_examples=60, deadline=None)
@given(_graphs_with_a_sync(), st.sampled_from([1.0, 2.0]), st.sampled_from([1, 2]))
def test_without_launch_overhead_a_sync_equals_its_edges(
    case: tuple[Problem, int], f: float, k: int
) -> None:
    """L = 0: replacing the sync by edges from its producers to its consumers (and taking it
    out) leaves every other op's times unchanged."""
    p, s = case
    n = len(p.preds)
    syncs = [i == s for i in range(n)]
    tl = evaluate_fixed_order(
        p, p.durations, overlap_slowdown=f, num_comm_streams=k, host_syncs=syncs
    )
    keep = [i for i in range(n) if i != s]
    new = {old: j for j, old in enumerate(keep)}
    preds = []
    for i in keep:
        ps = {q for q in p.preds[i] if q != s}
        if s in p.preds[i]:
            ps.update(p.preds[s])
        preds.append(sorted(new[q] for q in ps))
    q = _problem(preds, [p.comm_kind[i] for i in keep], [p.durations[i] for i in keep])
    ref = evaluate_fixed_order(q, q.durations, overlap_slowdown=f, num_comm_streams=k)
    assert [tl.start[i] for i in keep] == ref.start
    assert [tl.end[i] for i in keep] == ref.end
    assert tl.stream[s] == HOST_STREAM
    assert tl.start[s] == max((tl.end[x] for x in p.preds[s]), default=0.0)


# ---- the trace importer and lancet-opt ---------------------------------------------------------
def test_import_places_a_host_sync_and_simulate_drains(tmp_path: Path) -> None:
    """host_sync.json: k1 (50 us) launched at 10, cudaStreamSynchronize 12-67, k2 (10 us)
    launched at 70. The import has a trace.host_sync on k1 that k2 takes."""
    out = tmp_path / "step.mlir"
    done = run_tool(["lancet-trace", "import", str(DATA / "host_sync.json"), "-o", str(out)])
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert re.search(r"%1 = trace\.host_sync %0 \{lancet\.time_us = 0\.000000e\+00 : f64\}", text)
    assert re.search(r"%2 = trace\.kernel %0, %1 \{lancet\.time_us = 1\.000000e\+01", text)
    # L = 5: k1's launch ends at 5: 5-55; the host waits until 55; k2's launch ends at 60:
    # 60-70. Without the host k2 would follow k1 at 55 (65).
    sim = run_tool(["lancet-opt", str(out), "--launch-overhead-us", "5", "-p", "simulate"])
    assert sim.returncode == 0, sim.stderr
    assert "lancet.makespan_us = 7.000000e+01 : f64" in sim.stdout
    assert re.search(r"trace\.host_sync %0 \{[^}]*lancet\.start_us = 5\.500000e\+01[^}]*"
                     r"lancet\.stream = -1 : i64", sim.stdout)  # fmt: skip
    free = run_tool(["lancet-opt", str(out), "-p", "simulate"])
    assert "lancet.makespan_us = 6.000000e+01 : f64" in free.stdout  # k1 0-50, k2 50-60


STEP = """
func.func @step() {
  %a = trace.kernel {name = "gemm", lancet.time_us = 10.0 : f64, lancet.trace_kind = "kernel"} : () -> !trace.token
  %m = trace.kernel {name = "Memcpy DtoH (Device -> Pinned)", lancet.time_us = 4.0 : f64, lancet.trace_kind = "memcpy"} : () -> !trace.token
  %s = trace.host_sync %m {lancet.time_us = 0.0 : f64} : (!trace.token) -> !trace.token
  %b = trace.kernel %a {name = "relu", lancet.time_us = 5.0 : f64, lancet.trace_kind = "kernel"} : (!trace.token) -> !trace.token
  func.return
}
"""


def test_simulate_module_reads_host_syncs_from_the_ir() -> None:
    # L = 3: gemm 3-13, the DtoH copy 6-10 on its engine; the host waits for the copy (10),
    # relu's launch ends at 13 and it follows gemm: 13-18. Its stream stamp is -1 (host).
    module = parse(STEP)
    model = CostModel.from_config(CostConfig())
    (result,) = simulate_module(module, model, SimOptions(launch_overhead_us=3.0), annotate=True)
    assert result.graph.is_host_sync == [False, False, True, False]
    assert isinstance(result.graph.ops[2], HostSyncOp)
    assert result.timeline.start == [3.0, 6.0, 10.0, 13.0]
    assert result.summary.makespan_us == 18.0
    stamp = result.graph.ops[2].attributes["lancet.stream"]
    assert isinstance(stamp, IntegerAttr)
    assert stamp.value.data == HOST_STREAM
    # L = 5: gemm 5-15, copy 10-14, the sync at 14, relu launched at 19: 19-24
    (late,) = simulate_module(parse(STEP), model, SimOptions(launch_overhead_us=5.0))
    assert late.timeline.start == [5.0, 10.0, 14.0, 19.0]
    assert late.summary.makespan_us == 24.0


def test_chrome_trace_leaves_host_syncs_out() -> None:
    from lancet_mlir.sim.trace import chrome_trace

    tl = evaluate_fixed_order(DRAIN, DRAIN.durations, host_syncs=SYNC)
    doc = chrome_trace(DRAIN, [20.0, 1.0, 5.0, 5.0], tl)  # even with a duration on the sync
    # launch order: c and the allreduce at 0 (compute first), d; never the sync
    assert [e["args"]["node"] for e in doc["traceEvents"] if e["ph"] == "X"] == [2, 0, 3]


def test_item_in_a_pytorch_graph_is_a_host_sync() -> None:
    import torch

    import lancet_mlir.torch as lt
    from lancet_mlir.graph.dataflow import DataflowGraph

    def step(x: torch.Tensor) -> torch.Tensor:
        n = x.sum().long().item()
        torch._check(n >= 0)
        torch._check(n <= 8)
        return x[:n] * 2

    module = lt.import_graph(lt.capture(step, [torch.ones(8, 4)], world_size=2), world_size=2)
    fn = next(op for op in module.walk() if op.name == "func.func")
    graph = DataflowGraph.from_block(fn.regions[0].blocks[0])
    # sum, _to_copy, _local_scalar_dense (the .item()), slice, mul
    assert graph.is_host_sync == [False, False, True, False, False]
    # simulate: the sync costs nothing and runs on no stream, whatever the roofline says
    (result,) = simulate_module(module, CostModel.from_config(CostConfig()), SimOptions())
    assert result.durations[2] == 0.0
    assert result.timeline.stream[2] == HOST_STREAM
    assert result.timeline.start[2] == result.timeline.end[1]  # when _to_copy ends
