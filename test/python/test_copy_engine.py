"""The copy-engine streams of the general simulator (sim/engine.py "Copy engines"): memcpy /
memset ops overlap kernels, and copies of opposite directions overlap each other;
hand-computed makespans on every engine path and on IR."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import parse
from xdsl.dialects.builtin import IntegerAttr

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.dialects.vocab import CopyQueue
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
        # gemm 0-10, memcpy 0-8 (the HtoD engine), relu 10-15, memset after both 15-17 (the
        # queue of the rest): one stream per queue used, in queue order (rest 2, HtoD 3)
        (SimOptions(), 17.0, [0, 3, 0, 2]),
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


# ---- one copy queue per direction ----------------------------------------------------------
# a DtoH copy (20 us) launched before an independent HtoD copy (8 us)
OPPOSITE = _problem([[], []], [None, None], [20.0, 8.0])
DIRECTIONS = [CopyQueue.DTOH, CopyQueue.HTOD]


def test_copies_of_opposite_directions_run_in_parallel() -> None:
    # an outside review: the HtoD copy waited behind the DtoH one, 28 us instead of 20
    for tl in (
        evaluate_fixed_order(OPPOSITE, OPPOSITE.durations, copies=DIRECTIONS),
        evaluate_fixed_order(OPPOSITE, OPPOSITE.durations, copies=DIRECTIONS, overlap_slowdown=2.0),
        list_schedule(OPPOSITE, OPPOSITE.durations, copies=DIRECTIONS, delayed=[]),
    ):
        assert (tl.start, tl.end) == ([0.0, 0.0], [20.0, 8.0])
        # one stream per queue used, in queue order: HtoD k + 1 = 2, DtoH 3
        assert tl.stream == [3, 2]
        assert (tl.copy_stream, tl.copy_queues) == (2, (CopyQueue.HTOD, CopyQueue.DTOH))
        assert [tl.stream_label(s) for s in range(4)] == [
            "compute", "comm 1", "copy HtoD", "copy DtoH"
        ]  # fmt: skip
        assert tl.makespan_us == 20.0
    # one queue for both (a bool list): 0-20, then 20-28
    one = evaluate_fixed_order(OPPOSITE, OPPOSITE.durations, copies=[True, True])
    assert one.end == [20.0, 28.0]
    assert lower_bound_us(OPPOSITE, OPPOSITE.durations, 1, DIRECTIONS) == 20.0
    assert lower_bound_us(OPPOSITE, OPPOSITE.durations, 1, [True, True]) == 28.0


def test_copies_of_one_direction_serialise() -> None:
    same = [CopyQueue.HTOD, CopyQueue.HTOD]
    for tl in (
        evaluate_fixed_order(OPPOSITE, OPPOSITE.durations, copies=same),
        evaluate_fixed_order(OPPOSITE, OPPOSITE.durations, copies=same, overlap_slowdown=2.0),
        list_schedule(OPPOSITE, OPPOSITE.durations, copies=same, delayed=[], priorities=[1, 0]),
    ):
        assert (tl.start, tl.end) == ([0.0, 20.0], [20.0, 28.0])
        assert tl.stream == [2, 2]
        assert tl.copy_queues == (CopyQueue.HTOD,)


def test_bad_copy_queue_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"copy queue of node 1 must be a CopyQueue \(0..3\), got 7"
    ):
        evaluate_fixed_order(OPPOSITE, OPPOSITE.durations, copies=[1, 7])


DIRECTED = """
func.func @step() {
  %d = trace.kernel {name = "Memcpy DtoH (Device -> Pinned)", lancet.time_us = 20.0 : f64, lancet.trace_kind = "memcpy"} : () -> !trace.token
  %h = trace.kernel {name = "Memcpy HtoD (Pageable -> Device)", lancet.time_us = 8.0 : f64, lancet.trace_kind = "memcpy"} : () -> !trace.token
  %p = trace.kernel {name = "Memcpy DtoD (Device -> Device)", lancet.time_us = 3.0 : f64, lancet.trace_kind = "memcpy"} : () -> !trace.token
  %z = trace.kernel {name = "Memset (Device)", lancet.time_us = 2.0 : f64, lancet.trace_kind = "memset"} : () -> !trace.token
  func.return
}
"""


def test_imported_copies_take_the_queue_of_their_direction() -> None:
    from lancet_mlir.sim.trace import chrome_trace

    module = parse(DIRECTED)
    (result,) = simulate_module(module, CostModel.from_config(CostConfig()), SimOptions())
    graph, tl = result.graph, result.timeline
    assert graph.copy_queue == [CopyQueue.DTOH, CopyQueue.HTOD, CopyQueue.OTHER, CopyQueue.OTHER]
    # DtoH 0-20, HtoD 0-8, DtoD 0-3 then memset 3-5 on the queue of the rest
    assert (tl.start, tl.end) == ([0.0, 0.0, 0.0, 3.0], [20.0, 8.0, 3.0, 5.0])
    assert tl.stream == [4, 3, 2, 2]
    assert result.summary.makespan_us == 20.0
    assert result.summary.lower_bound_us == 20.0
    doc = chrome_trace(graph, result.durations, tl)
    threads = {
        e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"
    }
    assert threads == {0: "compute", 1: "comm 1", 2: "copy", 3: "copy HtoD", 4: "copy DtoH"}


@pytest.mark.parametrize(
    ("name", "queue", "known"),
    [
        ("Memcpy HtoD (Pinned -> Device)", CopyQueue.HTOD, True),
        ("Memcpy HtoA (Pageable -> Array)", CopyQueue.HTOD, True),  # host to a CUDA array
        ("Memcpy DtoH (Device -> Pageable)", CopyQueue.DTOH, True),
        ("Memcpy AtoH (Array -> Pinned)", CopyQueue.DTOH, True),
        ("Memcpy DtoD (Device -> Device)", CopyQueue.OTHER, True),
        ("Memcpy PtoP (Device -> Device)", CopyQueue.OTHER, True),
        ("Memset (Unknown)", CopyQueue.OTHER, True),  # HTA's TorchRec trace: still a memset
        ("Memcpy", CopyQueue.OTHER, False),
        ("cudaMemcpy2D", CopyQueue.OTHER, False),
    ],
)
def test_copy_names_and_their_queues(name: str, queue: CopyQueue, known: bool) -> None:
    """Which queue a copy's Kineto name picks, and whether the name says its direction (the
    import flags those that do not: review of #19, finding 7)."""
    from lancet_mlir.dialects.trace import copy_direction_known, copy_queue

    module = parse(
        "func.func @step() {\n"
        f'  %c = trace.kernel {{name = "{name}", lancet.time_us = 1.0 : f64, '
        'lancet.trace_kind = "memcpy"} : () -> !trace.token\n  func.return\n}\n'
    )
    op = next(o for o in module.walk() if o.name == "trace.kernel")
    assert copy_queue(op) == queue
    assert copy_direction_known(name) is known
