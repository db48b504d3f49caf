"""Dependencies of imported traces (review of issue #19, findings 2, 3 and 6).

* The data-only module (`build_module(data_only=True)`, what `lancet-trace whatif --pipeline`
  rewrites) keeps the kernels of one ATen op call in their stream order (a split-K GEMM and its
  `splitKreduce` share workspace memory no trace shows) and keeps every op a host thread launches
  after a sync after that sync (the syncs of a thread chained; one token per op).
* A host sync feeds only ops its own thread launches, in both modules.
* `--pipeline` composes with `--network-scale`, `--compute-scale`, `--launch-overhead-us`: the
  pipeline's module carries the what-if durations and launch overhead, and the baseline is the
  what-if replay.

Hand-written traces test/data/traces/split_k.json, thread_sync.json, whatif_scale.json (+ its
execution trace); hand-computed graphs and periods. The DLRM rank 0 trace (+ its ET) checks the
invariants on a real two-thread step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from xdsl.dialects.builtin import ModuleOp

from lancet_mlir.dialects.trace import HostSyncOp, PayloadOp
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.importers.traces import load_steps
from lancet_mlir.importers.traces.build import build_module
from lancet_mlir.importers.traces.report import WhatIf
from lancet_mlir.importers.traces.step import StepTrace
from lancet_mlir.tools import lancet_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


def _graph(module: ModuleOp) -> DataflowGraph:
    fn = next(iter(module.body.block.ops))
    return DataflowGraph.from_block(fn.regions[0].blocks[0])


def _named_preds(path: Path, data_only: bool) -> list[tuple[str, list[str]]]:
    """(op, its operands' ops) in block order; kernels by name, host syncs as sync1, sync2, ..."""
    graph = _graph(build_module(load_steps([str(path)]), data_only=data_only))
    names: list[str] = []
    for op in graph.ops:
        if isinstance(op, HostSyncOp):
            names.append(f"sync{sum(1 for n in names if n.startswith('sync')) + 1}")
        else:
            names.append(op.attributes["name"].data)  # type: ignore[union-attr]
    return [(names[i], [names[p] for p in graph.preds[i]]) for i in range(len(names))]


GEMM = "volta_sgemm_128x32_sliced1x4_nn_splitK"
REDUCE = "void cublasLt::splitKreduce_kernel<float>"


def test_kernels_of_one_aten_op_keep_their_order() -> None:
    # stream 7: aten::mm's split-K GEMM and its splitKreduce, aten::relu, a memset no ATen op
    # launched, aten::add. Data-only: the reduction stays after its GEMM (same aten::mm call);
    # relu is free; the memset (launcher unknown) stays after relu and before add
    assert _named_preds(DATA / "split_k.json", data_only=True) == [
        (GEMM, []),
        (REDUCE, [GEMM]),
        ("relu", []),
        ("Memset (Device)", ["relu"]),
        ("add", ["Memset (Device)"]),
    ]
    # the full module: the stream order
    assert _named_preds(DATA / "split_k.json", data_only=False) == [
        (GEMM, []),
        (REDUCE, [GEMM]),
        ("relu", [REDUCE]),
        ("Memset (Device)", ["relu"]),
        ("add", ["Memset (Device)"]),
    ]


def test_every_op_after_a_sync_of_its_thread_stays_after_it() -> None:
    # thread 1: k1 (stream 7), sync 1 on k1 (returns at 67), k2, k3 (stream 7), sync 2 on k3
    # (returns at 96), k6. Thread 2: k4 (stream 8, launched at 30, during sync 1) and k5
    # (stream 8, launched at 74, after sync 1 returned: thread 2 was never blocked).
    # Data-only: k2 and k3 each take sync 1's token (before the fix only k2, the next op of
    # the stream, did: k3 could move before the sync); sync 2 is chained to sync 1; k6 takes
    # sync 2's; thread 2's k5 takes none (before the fix it took sync 1's)
    assert _named_preds(DATA / "thread_sync.json", data_only=True) == [
        ("k1", []),
        ("k4", []),
        ("sync1", ["k1"]),
        ("k2", ["sync1"]),
        ("k3", ["sync1"]),
        ("k5", []),
        ("sync2", ["sync1", "k3"]),
        ("k6", ["sync2"]),
    ]
    # the full module: the first op per stream of the sync's thread; the stream order does the
    # rest (k3 after k2); k5 only after k4, its stream's previous op
    assert _named_preds(DATA / "thread_sync.json", data_only=False) == [
        ("k1", []),
        ("k4", []),
        ("sync1", ["k1"]),
        ("k2", ["k1", "sync1"]),
        ("k3", ["k2"]),
        ("k5", ["k4"]),
        ("sync2", ["sync1", "k3"]),
        ("k6", ["k3", "sync2"]),
    ]


def _reaches(graph: DataflowGraph, src: int) -> set[int]:
    seen = {src}
    todo = [src]
    while todo:
        for s in graph.succs[todo.pop()]:
            if s not in seen:
                seen.add(s)
                todo.append(s)
    return seen


@pytest.fixture(scope="module")
def dlrm0() -> StepTrace:
    return load_steps(
        [str(DATA / "dlrm" / "worker0.pt.trace.json.gz")],
        et=[str(DATA / "dlrm" / "dlrm_eg_0.json.gz")],
    )[0]


@pytest.mark.parametrize("data_only", [True, False])
def test_dlrm_module_keeps_syncs_and_aten_op_order(dlrm0: StepTrace, data_only: bool) -> None:
    """DLRM rank 0 (two launching threads, 10 host syncs, 12 ATen op calls launching several
    kernels on one stream): in both modules every op a thread launches after one of its syncs
    is reachable from that sync, no op takes another thread's sync token, and the edges stay
    O(n); in the data-only module each ATen op call's kernels on one stream form a chain."""
    st = dlrm0
    ops, info, calls = st.graph.ops, st.info, st.graph.calls
    assert len(st.thread_index) == 2
    syncs = sorted((c.ts + c.dur, c.thread) for c in calls if c.waits)
    assert len(syncs) == 10
    assert {t for _, t in syncs} == {0, 1}
    graph = _graph(build_module([st], data_only=data_only))
    kernel_ops = [i for i, op in enumerate(graph.ops) if "lancet.launch_us" in op.attributes]
    # block position of each trace op: ops appear in launch order (ties by start, index)
    order = sorted(range(len(ops)), key=lambda j: (info[j].launch_ts, ops[j].ts, j))
    node = dict(zip(order, kernel_ops, strict=True))
    sync_nodes = [i for i, op in enumerate(graph.ops) if isinstance(op, HostSyncOp)]
    assert len(sync_nodes) == 10
    # the block's syncs are the trace's, in time order: match them by position
    thread_of = {j: calls[o.launch].thread for j, o in enumerate(ops) if o.launch >= 0}
    after = 0
    for (t, thread), s in zip(syncs, sync_nodes, strict=True):
        reach = _reaches(graph, s)
        for j, o in enumerate(ops):
            if thread_of.get(j) == thread and info[j].launch_ts >= t:
                assert node[j] in reach, (o.name, t)
                after += 1
        # the token feeds nothing launched by another thread (a collective through its payload)
        for succ in graph.succs[s]:
            if isinstance(graph.ops[succ], PayloadOp):
                (succ,) = graph.succs[succ]
            if succ in kernel_ops:
                assert thread_of.get(order[kernel_ops.index(succ)]) == thread
    assert after > 0
    # O(n): at most one sync token per op, one chain edge per sync
    sync_set = set(sync_nodes)
    assert all(sum(1 for p in graph.preds[i] if p in sync_set) <= 1 for i in kernel_ops)
    assert all(sum(1 for p in graph.preds[s] if p in sync_set) <= 1 for s in sync_nodes)
    if not data_only:
        return
    # each ATen op call's kernels on one stream: a chain in launch order
    groups: dict[tuple[int, int], list[int]] = {}
    for j in order:
        if info[j].cpu_op is not None:
            groups.setdefault((id(info[j].cpu_op), ops[j].stream), []).append(j)
    multi = [g for g in groups.values() if len(g) > 1]
    assert len(multi) == 12
    for g in multi:
        for a, b in zip(g, g[1:], strict=False):
            assert node[a] in graph.preds[node[b]]


def _data_only_text(names: list[str], seed: str) -> str:
    code = (
        "import sys\n"
        "from xdsl.printer import Printer\n"
        "from lancet_mlir.importers.traces import load_steps\n"
        "from lancet_mlir.importers.traces.build import build_module\n"
        "for p in sys.argv[1:]:\n"
        "    Printer(stream=sys.stdout).print_op(build_module(load_steps([p]), data_only=True))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED=seed)
    paths = [str(DATA / n) for n in names]
    return subprocess.run(
        [sys.executable, "-c", code, *paths], check=True, env=env, capture_output=True, text=True
    ).stdout


def test_data_only_module_is_byte_identical_across_hash_seeds() -> None:
    names = ["split_k.json", "thread_sync.json", "whatif_scale.json", "comm_sync_mix.json"]
    a, b = _data_only_text(names, "0"), _data_only_text(names, "4242")
    assert a == b
    assert a.count("trace.host_sync") == 3  # thread_sync's two, comm_sync_mix's one


# ---- --pipeline with what-ifs (finding 3) ------------------------------------------------------
# whatif_scale.json, launched in this order: relu (30 us), gemm (40), its all-reduce (40 us
# measured, 64 MiB over 2 V100s: all of it wire, the comm table needs far more), add (10) after
# relu and the all-reduce. Measured (= replayed): relu 16-46, gemm 46-86, all-reduce 86-126, add
# 126-136: 136 us. The data-only module in block order: relu 0-30, gemm 30-70, all-reduce 70-110,
# add 110-120: 120 us; lancet-schedule runs the gemm first: gemm 0-40, relu 40-70, all-reduce
# 40-80, add 80-90: 90 us, 30 saved.
PERIODS = {
    # flags: (simulated before, after, the what-if replay, the pipeline's prediction)
    (): (120.0, 90.0, 136.0, 106.0),
    # wire x 0.5 = 20 us. Replay: all-reduce 86-106, add 106-116: 116. Module: relu 0-30,
    # gemm 30-70, all-reduce 70-90, add 90-100: 100; scheduled: gemm 0-40, all-reduce 40-60,
    # relu 40-70, add 70-80: 80 (before the fix: 120 -> 90 against the unscaled 136)
    ("--network-scale", "0.5"): (100.0, 80.0, 116.0, 96.0),
    # compute x 0.5: relu 15, gemm 20, add 5. Replay: relu 16-31, gemm 31-51, all-reduce
    # 51-91, add 91-96: 96. Module: 0-15, 15-35, 35-75, 75-80: 80; scheduled: gemm 0-20,
    # all-reduce 20-60, relu 20-35, add 60-65: 65
    ("--compute-scale", "0.5"): (80.0, 65.0, 96.0, 81.0),
    # 2 us per launch. Replay: the launch calls take 2 us instead of 1, the host is not on the
    # critical path: 136. Module (the host launches relu, gemm, all-reduce, add: ends at 2, 4,
    # 6, 8; the payload takes no launch): relu 2-32, gemm 32-72, all-reduce 72-112, add
    # 112-122: 122; scheduled: gemm 2-42, relu 42-72, all-reduce 42-82, add 82-92: 92
    ("--launch-overhead-us", "2"): (122.0, 92.0, 136.0, 106.0),
}


def _pipeline(tmp_path: Path, *flags: str) -> dict:
    report = tmp_path / "r.json"
    argv = ["whatif", str(DATA / "whatif_scale.json"), "--et", str(DATA / "whatif_scale_et.json")]
    with pytest.raises(SystemExit) as info:
        lancet_trace.main([*argv, "--pipeline", "lancet-schedule", *flags, "--report", str(report)])
    assert info.value.code == 0
    return json.loads(report.read_text())


@pytest.mark.parametrize("flags", list(PERIODS))
def test_pipeline_composes_with_the_what_if(tmp_path: Path, flags: tuple[str, ...]) -> None:
    data = _pipeline(tmp_path, *flags)
    pipe = data["pipeline"]
    before, after, replayed, predicted = PERIODS[flags]
    assert pipe["simulated_before_us"] == before
    assert pipe["simulated_after_us"] == after
    assert pipe["saved_us"] == before - after
    # the baseline is the what-if replay, not the plain one
    assert pipe["replayed_period_us"] == data["predicted_period_us"] == replayed
    assert pipe["predicted_period_us"] == predicted
    assert "notes" not in pipe  # one host thread


def test_all_three_what_ifs_compose(tmp_path: Path) -> None:
    # wire 20, compute halved, 2 us launches. Replay: relu 16-31, gemm 31-51, all-reduce
    # 51-71, add 71-76: 76. Module: relu 2-17, gemm 17-37, all-reduce 37-57, add 57-62: 62;
    # scheduled: gemm 2-22, relu 22-37, all-reduce 22-42, add 42-47: 47
    flags = ["--network-scale", "0.5", "--compute-scale", "0.5", "--launch-overhead-us", "2"]
    pipe = _pipeline(tmp_path, *flags)["pipeline"]
    assert (pipe["simulated_before_us"], pipe["simulated_after_us"]) == (62.0, 47.0)
    assert (pipe["replayed_period_us"], pipe["predicted_period_us"]) == (76.0, 61.0)


def test_pipeline_module_carries_the_what_if() -> None:
    steps = load_steps([str(DATA / "whatif_scale.json")], et=[str(DATA / "whatif_scale_et.json")])
    durs = [[15.0, 20.0, 20.0, 5.0]]  # relu, gemm, all-reduce, add
    graph = _graph(build_module(steps, data_only=True, durations=durs))
    times = [op.attributes["lancet.time_us"].value.data for op in graph.ops]  # type: ignore[union-attr]
    assert times == [15.0, 20.0, 0.0, 20.0, 5.0]  # the payload costs nothing
    with pytest.raises(ValueError, match="2 duration lists for 1 steps"):
        build_module(steps, durations=durs * 2)


def test_one_host_note_with_launch_overhead_on_several_threads() -> None:
    # thread_sync.json has two launching threads: with a launch overhead the simulator's single
    # host serializes their launches and stalls all of them at a sync; the report says so
    steps = load_steps([str(DATA / "thread_sync.json")])
    report = {"predicted_period_us": 108.0}
    pipe = lancet_trace._run_pipeline(
        steps, "lancet-schedule", "v100", report, WhatIf(launch_overhead_us=2.0), None, None
    )
    assert [n.split(":")[0] for n in pipe["notes"]] == ["one_host"]
    rank = {"rank": 0, "measured_period_us": None, "predicted_period_us": 108.0, "gpu_ops": 6}
    assert lancet_trace._summary({**rank, "pipeline": pipe}).endswith("; notes: one_host\n")
    free = lancet_trace._run_pipeline(
        steps, "lancet-schedule", "v100", report, WhatIf(launch_overhead_us=0.0), None, None
    )
    assert "notes" not in free  # at 0 a sync is only its edges, per thread
    module = build_module(steps, data_only=True)
    assert "lancet.launch_overhead_us" not in module.attributes


def test_launch_lags_are_measured_after_the_execution_trace_deps() -> None:
    """et_lag.json is whatif_scale.json without its cudaStreamWaitEvent: the add (launched at
    23 µs, started at 126) waits for the all-reduce (ends at 126) only through the ET's data
    dependency. Measured before that dependency was known, the add looked launched onto an idle
    stream 7 with a 103 µs lag (126 - 23), which became the window's lag and delayed the
    all-reduce (launched at 19, the first op of its stream) to 19 + 103 = 122 instead of 86:
    172 µs predicted against 136. Measured after it, no op's start is left unexplained, so the
    default 5 µs lag stands and the replay is exact: relu 16-46, gemm 46-86, all-reduce
    86-126 (waits for the gemm, its ET input), add 126-136."""
    steps = load_steps([str(DATA / "et_lag.json")], et=[str(DATA / "whatif_scale_et.json")])
    graph = steps[0].graph
    assert graph.lag_us == 5.0  # step.DEFAULT_LAG_US: no op's start is unexplained
    assert all(o.lag_us is None for o in graph.ops)
    out = subprocess.run(
        [sys.executable, "-m", "lancet_mlir.tools.lancet_trace", "replay",
         str(DATA / "et_lag.json"), "--et", str(DATA / "whatif_scale_et.json")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "measured 136.0 us, predicted 136.0 us (+0.00 %)" in out.stdout
