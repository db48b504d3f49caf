"""The copy-engine stream of the general simulator (sim/engine.py "Copy engine"): memcpy /
memset ops overlap kernels; hand-computed makespans on every engine path and on IR."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import parse
from xdsl.dialects.builtin import IntegerAttr

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.graph.core import Problem
from lancet_mlir.sim.blocks import simulate_module
from lancet_mlir.sim.engine import evaluate_fixed_order, list_schedule
from lancet_mlir.sim.metrics import lower_bound_us, summarize
from lancet_mlir.sim.options import SimOptions


def _problem(preds: list[list[int]], kinds: list[str | None], durations: list[float]) -> Problem:
    succs: list[list[int]] = [[] for _ in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    return Problem(preds, succs, kinds, durations)


# A kernel (10 us), an independent memcpy (8 us), a second kernel (5 us)
INDEPENDENT = _problem([[], [], []], [None, None, None], [10.0, 8.0, 5.0])
COPY = [False, True, False]


def test_memcpy_overlaps_a_kernel() -> None:
    tl = evaluate_fixed_order(INDEPENDENT, INDEPENDENT.durations, copies=COPY)
    # kernel 0-10 on stream 0, memcpy 0-8 on the copy engine (stream k + 1 = 2), kernel 10-15
    assert (tl.start, tl.end) == ([0.0, 0.0, 10.0], [10.0, 8.0, 15.0])
    assert tl.stream == [0, 2, 0]
    assert tl.copy_stream == 2
    assert tl.chains == [[0, 2], [], [1]]
    assert tl.makespan_us == 15.0
    # without the copy engine the memcpy queues on the compute stream: 10 + 8 + 5
    old = evaluate_fixed_order(INDEPENDENT, INDEPENDENT.durations)
    assert old.makespan_us == 23.0
    assert old.copy_stream is None
    assert old.chains == [[0, 1, 2], []]


def test_dependencies_still_order_copies() -> None:
    # kernel -> memcpy -> kernel: 0-10, 10-18, 18-23
    p = _problem([[], [0], [1]], [None, None, None], [10.0, 8.0, 5.0])
    tl = evaluate_fixed_order(p, p.durations, copies=COPY)
    assert tl.end == [10.0, 18.0, 23.0]
    assert tl.makespan_us == 23.0


def test_copies_run_one_at_a_time_in_launch_order() -> None:
    # memcpy 4, memset 4, kernel 10: copies 0-4 and 4-8 on the copy engine beside the kernel
    p = _problem([[], [], []], [None, None, None], [4.0, 4.0, 10.0])
    tl = evaluate_fixed_order(p, p.durations, copies=[True, True, False], order=[1, 0, 2])
    assert (tl.start, tl.end) == ([4.0, 0.0, 0.0], [8.0, 4.0, 10.0])
    assert tl.chains[tl.copy_stream or 0] == [1, 0]
    assert tl.makespan_us == 10.0


def test_event_path_copies_are_not_slowed_and_do_not_slow_compute() -> None:
    # overlap slowdown 2: a collective (10 us) slows the kernel (10 us) to rate 1/2 while it
    # runs: 5 us of work by t = 10, the other 5 by t = 15. The memcpy (6 us) is neither slowed
    # nor counted as communication.
    p = _problem([[], [], []], ["allreduce", None, None], [10.0, 10.0, 6.0])
    tl = evaluate_fixed_order(p, p.durations, overlap_slowdown=2.0, copies=[False, False, True])
    assert tl.end == [10.0, 15.0, 6.0]
    assert tl.stream == [1, 0, 2]
    # kernel and memcpy alone at f = 2: no collective runs, the kernel ends at 10
    q = _problem([[], []], [None, None], [10.0, 6.0])
    tl = evaluate_fixed_order(q, q.durations, overlap_slowdown=2.0, copies=[False, True])
    assert tl.end == [10.0, 6.0]
    assert tl.makespan_us == 10.0


def test_event_path_equals_plain_path_at_rate_one_with_launch_overhead() -> None:
    # launches every 1 us: kernel at 1-11, memcpy at 2-10, kernel 11-16 (the plain formula);
    # the event path (list scheduling in the same order) gives the same times
    plain = evaluate_fixed_order(
        INDEPENDENT, INDEPENDENT.durations, copies=COPY, launch_overhead_us=1.0
    )
    assert plain.end == [11.0, 10.0, 16.0]
    listed = list_schedule(
        INDEPENDENT,
        INDEPENDENT.durations,
        copies=COPY,
        delayed=[],
        launch_overhead_us=1.0,
        priorities=[3.0, 2.0, 1.0],
    )
    assert (listed.start, listed.end) == (plain.start, plain.end)


def test_list_schedule_fills_the_copy_engine() -> None:
    tl = list_schedule(INDEPENDENT, INDEPENDENT.durations, copies=COPY, delayed=[])
    assert tl.end == [10.0, 8.0, 15.0]
    assert tl.stream == [0, 2, 0]


def test_no_copies_means_no_copy_stream() -> None:
    tl = evaluate_fixed_order(INDEPENDENT, INDEPENDENT.durations, copies=[False] * 3)
    assert tl.copy_stream is None
    assert tl == evaluate_fixed_order(INDEPENDENT, INDEPENDENT.durations)


def test_bad_copy_flags_are_refused() -> None:
    with pytest.raises(ValueError, match="2 copy flags for a graph of 3 ops"):
        evaluate_fixed_order(INDEPENDENT, INDEPENDENT.durations, copies=[True, False])
    p = _problem([[]], ["allreduce"], [1.0])
    with pytest.raises(ValueError, match="a collective cannot be a copy"):
        evaluate_fixed_order(p, p.durations, copies=[True])


def test_summary_and_lower_bound_count_copies_apart() -> None:
    tl = evaluate_fixed_order(INDEPENDENT, INDEPENDENT.durations, copies=COPY)
    # compute 15 (kernels), copies 8, longest path 10: the bound is 15, not 23
    assert lower_bound_us(INDEPENDENT, INDEPENDENT.durations, 1, COPY) == 15.0
    assert lower_bound_us(INDEPENDENT, INDEPENDENT.durations, 1) == 23.0
    s = summarize(INDEPENDENT, INDEPENDENT.durations, tl)
    assert (s.compute_us, s.comm_us, s.exposed_comm_us) == (15.0, 0.0, 0.0)


STEP = """
func.func @step() {
  %a = trace.kernel {name = "gemm", lancet.time_us = 10.0 : f64, lancet.trace_kind = "kernel"} : () -> !trace.token
  %m = trace.kernel {name = "Memcpy HtoD", lancet.time_us = 8.0 : f64, lancet.trace_kind = "memcpy"} : () -> !trace.token
  %b = trace.kernel %a {name = "relu", lancet.time_us = 5.0 : f64, lancet.trace_kind = "kernel"} : (!trace.token) -> !trace.token
  %z = trace.kernel %m, %b {name = "Memset", lancet.time_us = 2.0 : f64, lancet.trace_kind = "memset"} : (!trace.token, !trace.token) -> !trace.token
  func.return
}
"""


@pytest.mark.parametrize(
    ("options", "makespan", "streams"),
    [
        # gemm 0-10, memcpy 0-8 (copy engine), relu 10-15, memset after both 15-17
        (SimOptions(), 17.0, [0, 2, 0, 2]),
        # without the copy engine: 10 + 8 + 5 + 2 in order on the compute stream
        (SimOptions(copy_stream=False), 25.0, [0, 0, 0, 0]),
    ],
)
def test_imported_step_uses_the_copy_engine(
    options: SimOptions, makespan: float, streams: list[int]
) -> None:
    module = parse(STEP)
    (result,) = simulate_module(module, CostModel.from_config(CostConfig()), options, annotate=True)
    assert result.summary.makespan_us == makespan
    assert result.timeline.stream == streams
    assert result.graph.is_copy == [False, True, False, True]
    stamped = [op.attributes["lancet.stream"] for op in result.graph.ops]
    assert all(isinstance(a, IntegerAttr) for a in stamped)
    assert [a.value.data for a in stamped if isinstance(a, IntegerAttr)] == streams


def test_dlrm_rank0_data_dependency_step_overlaps_its_copies() -> None:
    """The module `lancet-trace whatif --pipeline` simulates (DLRM rank 0 with its execution
    trace's data dependencies): its memcpy / memset ops now run beside the kernels, 5 us less."""
    from lancet_mlir.importers.traces import load_steps
    from lancet_mlir.importers.traces.build import build_module

    data = Path(__file__).resolve().parents[1] / "data" / "traces" / "dlrm"
    steps = load_steps(
        [str(data / "worker0.pt.trace.json.gz")], et=[str(data / "dlrm_eg_0.json.gz")]
    )
    model = CostModel.build(CostConfig(device="v100"))
    spans = []
    for options in (SimOptions(), SimOptions(copy_stream=False)):
        results = simulate_module(build_module(steps, data_only=True), model, options)
        spans.append(sum(r.summary.makespan_us for r in results if r.top_level))
    assert spans == [6278.0, 6283.0]


def test_chrome_trace_shows_the_copy_engine() -> None:
    from lancet_mlir.sim.trace import chrome_trace

    tl = evaluate_fixed_order(INDEPENDENT, INDEPENDENT.durations, copies=COPY)
    doc = chrome_trace(INDEPENDENT, INDEPENDENT.durations, tl)
    threads = {
        e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"
    }
    assert threads == {0: "compute", 1: "comm 1", 2: "copy"}
    assert [e["tid"] for e in doc["traceEvents"] if e["ph"] == "X"] == [0, 2, 0]


def test_a_collective_tagged_as_a_copy_stays_a_collective() -> None:
    # an outside review: a comm op carrying lancet.trace_kind = "memcpy" made `simulate`
    # fail ("a collective cannot be a copy", no location) while the schedulers accepted it
    from lancet_mlir.graph.dataflow import is_copy

    module = parse(
        """builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @f(%x: tensor<64xf32>) -> tensor<64xf32> {
    %c = comp.gelu %x {lancet.trace_kind = "memcpy"} : (tensor<64xf32>) -> tensor<64xf32>
    %r = comm.allreduce %c {reduction = "sum", lancet.trace_kind = "memcpy"} : (tensor<64xf32>) -> tensor<64xf32>
    func.return %r : tensor<64xf32>
  }
}"""
    )
    ops = [op for op in module.walk() if op.name in ("comp.gelu", "comm.allreduce")]
    assert [is_copy(op) for op in ops] == [True, False]
