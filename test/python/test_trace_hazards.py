"""Orders an imported trace's reorderings must keep (review 20 of issue #19, findings 2 and 6).

* Finding 2: the execution trace's tensor dependencies include write after read (an in-place
  `add_` on a weight after the matmul that read it) and write after write, besides read after
  write, so `whatif --pipeline` cannot move an in-place update ahead of a reader of the old value.
* Finding 6: NCCL kernels outside the four `comm` kinds (broadcast, send/recv, ...) run on a
  communication stream in the module, as the replay runs them on their own CUDA stream.

test/data/traces/war.json (+ war_et.json) is whatif_scale.json with its first two ops renamed:
stream 7 runs aten::mm's gemm_fwd 16-46 (reads W = storage 10 and storage 11, writes Y = 21),
aten::add_'s sgd_update 46-86 (reads 10 and 13, writes W in place), the all-reduce of W on
stream 20 86-126, then aten::add's add 126-136 (reads W and Y). bcast.json (+ bcast_et.json) is
whatif_scale.json with its all-reduce turned into a broadcast, same times and streams.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from xdsl.dialects.builtin import ModuleOp

from lancet_mlir.dialects.trace import KernelOp, PayloadOp
from lancet_mlir.graph.buckets import fusion_key
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.importers.traces import load_steps
from lancet_mlir.importers.traces.build import build_module
from lancet_mlir.sim.engine import evaluate_fixed_order
from lancet_mlir.tools import lancet_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
NCCL_AR = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _named_preds(module: ModuleOp) -> list[tuple[str, list[str]]]:
    """(op, its operands' ops) in block order, kernels and collectives by name, the payload of
    a collective as `payload`."""
    fn = next(iter(module.body.block.ops))
    graph = DataflowGraph.from_block(fn.regions[0].blocks[0])
    names = [
        "payload" if isinstance(op, PayloadOp) else op.attributes["name"].data  # type: ignore[union-attr]
        for op in graph.ops
    ]
    return [(names[i], [names[p] for p in graph.preds[i]]) for i in range(len(names))]


def _whatif(tmp_path: Path, trace: Path, et: Path, *flags: str) -> dict:
    report = tmp_path / "r.json"
    argv = ["whatif", str(trace), "--et", str(et), "--pipeline", "lancet-schedule", *flags]
    with pytest.raises(SystemExit) as info:
        lancet_trace.main([*argv, "--report", str(report)])
    assert info.value.code == 0
    return json.loads(report.read_text())


def _waw_et(tmp_path: Path) -> Path:
    """war_et.json where aten::mm writes W (storage 10: an `out=` variant) as well as Y and
    reads only storage 11, and aten::add_ overwrites W without reading it (reads 13 only):
    no read of W between the two writes, so only a write-after-write edge orders them."""
    doc = json.loads((DATA / "war_et.json").read_text())
    by_name = {n["name"]: n for n in doc["nodes"]}
    mm, upd = by_name["aten::mm"], by_name["aten::add_"]
    w = mm["inputs"][0]
    mm["inputs"] = [mm["inputs"][1]]
    mm["outputs"] = [w, *mm["outputs"]]
    upd["inputs"] = [upd["inputs"][1]]
    path = tmp_path / "waw_et.json"
    path.write_text(json.dumps(doc))
    return path


WAR_CHAIN = [
    ("gemm_fwd", []),
    ("sgd_update", ["gemm_fwd"]),
    ("payload", ["sgd_update"]),
    (NCCL_AR, ["payload"]),
    ("add", ["gemm_fwd", NCCL_AR]),
]
"""The producers of war.json's ops in the data-only module: the update after the gemm that
read the old W (write after read), the all-reduce after the update, the add after both."""


def test_in_place_write_waits_for_the_earlier_reader() -> None:
    steps = load_steps([str(DATA / "war.json")], et=[str(DATA / "war_et.json")])
    # read after write: all-reduce <- sgd_update (W), add <- gemm_fwd (Y) (add <- all-reduce
    # is the trace's cudaStreamWaitEvent already, not counted); write after read: sgd_update
    # <- gemm_fwd (it read the old W). Each kept: the later op starts when the earlier ends
    # (46 >= 46, 86 >= 86, 126 >= 46). Read after write only, it was 2 edges
    assert steps[0].data_deps == 3
    assert _named_preds(build_module(steps, data_only=True)) == WAR_CHAIN


@pytest.mark.parametrize("et", ["war", "waw"])
def test_pipeline_keeps_the_in_place_update_after_the_read(tmp_path: Path, et: str) -> None:
    # gemm 30 -> update 40 -> all-reduce 40 -> add 10 is one chain in either case: the
    # simulated period stays 30 + 40 + 40 + 10 = 120 and nothing is saved. (With read-after-
    # write edges only, the update ran first and its all-reduce overlapped the gemm: 90.)
    path = DATA / "war_et.json" if et == "war" else _waw_et(tmp_path)
    data = _whatif(tmp_path, DATA / "war.json", path)
    assert data["data_dependencies"] == 3  # WAR (or WAW) gemm -> update, 2 RAW as above
    pipe = data["pipeline"]
    assert (pipe["simulated_before_us"], pipe["simulated_after_us"]) == (120.0, 120.0)
    assert (pipe["saved_us"], pipe["predicted_period_us"]) == (0.0, 136.0)


def test_readers_since_the_last_write_only(tmp_path: Path) -> None:
    # a reader before an earlier write is ordered through that write, not by an edge of its
    # own: war_et.json with the add_ also reading nothing but 13 and the all-reduce (which
    # writes W) as the second writer. gemm_fwd reads W; sgd_update writes W: WAR edge
    # gemm_fwd -> sgd_update; the all-reduce writes W: WAW from sgd_update only (readers of W
    # since sgd_update's write: none), no edge from gemm_fwd
    doc = json.loads((DATA / "war_et.json").read_text())
    by_name = {n["name"]: n for n in doc["nodes"]}
    upd = by_name["aten::add_"]
    upd["inputs"] = [upd["inputs"][1]]
    ar = by_name["c10d::allreduce_"]
    ar["inputs"] = []
    path = tmp_path / "et.json"
    path.write_text(json.dumps(doc))
    steps = load_steps([str(DATA / "war.json")], et=[str(path)])
    assert _named_preds(build_module(steps, data_only=True)) == WAR_CHAIN
    assert steps[0].data_deps == 3  # WAR, WAW, RAW gemm_fwd -> add


def test_a_reader_on_two_streams_is_done_when_both_are(tmp_path: Path) -> None:
    # war.json with aten::mm also launching gemm_side (launched at 12, after gemm_fwd) on
    # stream 9, 16-40. The update must wait for both of mm's kernels: the last one mm launched
    # on each stream (gemm_fwd ends 46, gemm_side 40; sgd_update starts 46). Edges: WAR
    # gemm_fwd, gemm_side -> sgd_update; RAW sgd_update -> all-reduce; RAW (Y) gemm_fwd,
    # gemm_side -> add: 5. From mm's last-launched kernel alone (gemm_side) gemm_fwd and the
    # update, two ATen ops on stream 7, were unordered in the data-only module.
    doc = json.loads((DATA / "war.json").read_text())
    doc["traceEvents"] += [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 12, "dur": 1, "args": {"correlation": 6, "External id": 51}},
        {"ph": "X", "cat": "kernel", "name": "gemm_side", "pid": 0, "tid": 9, "ts": 16,
         "dur": 24, "args": {"stream": 9, "correlation": 6, "device": 0, "External id": 51}},
    ]  # fmt: skip
    path = tmp_path / "two_streams.json"
    path.write_text(json.dumps(doc))
    steps = load_steps([str(path)], et=[str(DATA / "war_et.json")])
    assert steps[0].data_deps == 5
    preds = dict(_named_preds(build_module(steps, data_only=True)))
    assert preds["sgd_update"] == ["gemm_fwd", "gemm_side"]
    assert preds["add"] == ["gemm_fwd", "gemm_side", NCCL_AR]
    data = _whatif(tmp_path, path, DATA / "war_et.json")
    # one compute stream in the simulator: gemm_fwd 0-30, gemm_side 30-54, update 54-94,
    # all-reduce 94-134, add 134-144, one chain: 144 -> 144. (Ordered after gemm_side alone,
    # the update ran second and the all-reduce beside gemm_fwd: 24 + 40 + 40 + 10 = 114.)
    pipe = data["pipeline"]
    assert (pipe["simulated_before_us"], pipe["simulated_after_us"]) == (144.0, 144.0)


BCAST = "ncclKernel_Broadcast_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _comm_trace(tmp_path: Path, kind: str) -> Path:
    """bcast.json, or the same step with its broadcast turned into a send (same times)."""
    if kind == "broadcast":
        return DATA / "bcast.json"
    doc = json.loads((DATA / "bcast.json").read_text())
    for e in doc["traceEvents"]:
        if e.get("name") == BCAST:
            e["name"] = "ncclKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
            e["args"]["Collective name"] = "send"
    path = tmp_path / "send.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("kind", ["broadcast", "sendrecv"])
def test_opaque_nccl_kernel_runs_on_a_comm_stream(tmp_path: Path, kind: str) -> None:
    trace = _comm_trace(tmp_path, kind)
    steps = load_steps([str(trace)], et=[str(DATA / "bcast_et.json")])
    fn = next(iter(build_module(steps, data_only=True).body.block.ops))
    graph = DataflowGraph.from_block(fn.regions[0].blocks[0])
    # relu, gemm, the NCCL kernel (a trace.kernel: the comm dialect has no op for it), add
    assert [type(op) for op in graph.ops] == [KernelOp] * 4
    assert graph.is_comm == [False, False, True, False]
    assert graph.comm_kind == [None, None, f"trace:{kind}", None]
    assert graph.payload_bytes == [0, 0, 16777216 * 4, 0]  # In msg nelems x 4-byte floats
    assert fusion_key(graph.ops[2]) is None  # never bucketed or fused
    # simulated: relu 0-30 and gemm 30-70 on the compute stream, the NCCL kernel 70-110 on
    # communication stream 1, add 110-120
    timeline = evaluate_fixed_order(graph, [30.0, 40.0, 40.0, 10.0])
    assert list(timeline.stream) == [0, 0, 1, 0]
    assert list(timeline.end) == [30.0, 70.0, 110.0, 120.0]


@pytest.mark.parametrize("kind", ["broadcast", "sendrecv"])
def test_pipeline_overlaps_an_opaque_nccl_kernel(tmp_path: Path, kind: str) -> None:
    # as with the all-reduce (test_trace_deps.py): the GEMM first, 0-40; relu 40-70 beside the
    # NCCL kernel 40-80 on its stream; add 80-90: 120 -> 90, off the replay's 136: 106. On the
    # compute stream it was 120 -> 120 (the kernel serialized with relu). The replay is as
    # before: 136.0 (it always ran the kernel on its own CUDA stream, 20)
    data = _whatif(tmp_path, _comm_trace(tmp_path, kind), DATA / "bcast_et.json")
    assert data["predicted_period_us"] == 136.0
    pipe = data["pipeline"]
    assert (pipe["simulated_before_us"], pipe["simulated_after_us"]) == (120.0, 90.0)
    assert pipe["predicted_period_us"] == 106.0


def test_chakra_broadcasts_no_longer_serialize_with_compute(tmp_path: Path) -> None:
    # the Chakra feeder trace's 2 broadcasts (COMM_COLL nodes of no comm-op kind): on the
    # communication stream the data-only module simulates to the replay's 292828 µs, as the
    # replay runs them on their own stream; charged to the compute stream it was 292861
    report = tmp_path / "r.json"
    argv = ["whatif", str(DATA / "chakra_feeder.0.et.gz"), "--pipeline", "lancet-schedule"]
    with pytest.raises(SystemExit) as info:
        lancet_trace.main([*argv, "--report", str(report)])
    assert info.value.code == 0
    data = json.loads(report.read_text())
    assert data["predicted_period_us"] == 292828.0
    assert data["pipeline"]["simulated_before_us"] == 292828.0
