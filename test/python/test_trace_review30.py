"""Trace inputs from session 30's review of the trace front-end: each variant of the small
two-step trace (test/data/traces/two_steps.json) either replays as the original does or is
refused with one line that says why (before, they were misread: stdin read twice, PyTorch
1.8's categories, two GPUs' streams merged, duplicate or broken step annotations, an
activity before its launch, 64-bit overflows, a closed or full stdout)."""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
TWO = DATA / "two_steps.json"
SUMMARY = ("rank 0 step 2: measured 200.0 us, predicted 200.0 us (+0.00 %), start error p50 "
           "0.0 us, GPU-only 60.0 us\n")  # fmt: skip


def _trace(
    args: list[str], stdin: bytes | None = None, stdout: int | None = subprocess.PIPE
) -> subprocess.CompletedProcess[bytes]:
    argv = [sys.executable, "-m", "lancet_mlir.tools.lancet_trace", *args]
    return subprocess.run(argv, input=stdin, stdout=stdout, stderr=subprocess.PIPE, timeout=120)


def _doc() -> dict:
    return json.loads(TWO.read_text())


def _write(tmp_path: Path, doc: dict, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _error(proc: subprocess.CompletedProcess[bytes]) -> str:
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout in (b"", None)
    return proc.stderr.decode()


@pytest.mark.parametrize("packed", [False, True])
def test_a_trace_on_stdin_replays_as_the_file_does(packed: bool) -> None:
    data = TWO.read_bytes()
    proc = _trace(["replay", "-"], gzip.compress(data, mtime=0) if packed else data)
    assert (proc.returncode, proc.stdout.decode()) == (0, SUMMARY), proc.stderr


def test_pytorch_1_8_categories_are_read() -> None:
    doc = _doc()
    old = {"user_annotation": "Operator", "cpu_op": "Operator", "cuda_runtime": "Runtime",
           "kernel": "Kernel"}  # fmt: skip
    for e in doc["traceEvents"]:
        e["cat"] = old[e["cat"]]
    with_old = _trace(["replay", "-"], json.dumps(doc).encode())
    assert (with_old.returncode, with_old.stdout.decode()) == (0, SUMMARY), with_old.stderr


def test_one_step_number_twice_is_refused(tmp_path: Path) -> None:
    doc = _doc()
    doc["traceEvents"][0]["name"] = "ProfilerStep#2"
    path = _write(tmp_path, doc)
    assert _error(_trace(["replay", str(path)])) == (
        f"lancet-trace: error: {path}: ProfilerStep#2 appears twice (at ts 0 and 200): "
        "which one is step 2?\n"
    )


@pytest.mark.parametrize(
    ("dur", "why"),
    [(-10, "dur must be >= 0, got -10"),
     (None, "no dur (a step without a duration cannot be replayed)")],
)  # fmt: skip
def test_a_step_annotation_without_a_valid_duration_is_refused(
    tmp_path: Path, dur: int | None, why: str
) -> None:
    # it was dropped, and step 1 replayed in its place
    doc = _doc()
    step = doc["traceEvents"][10]
    assert step["name"] == "ProfilerStep#2"
    if dur is None:
        del step["dur"]
    else:
        step["dur"] = dur
    path = _write(tmp_path, doc)
    assert _error(_trace(["replay", str(path)])) == (
        f"lancet-trace: error: {path}: step annotation 'ProfilerStep#2' at ts 200: {why}\n"
    )


def test_activities_of_two_gpus_are_refused(tmp_path: Path) -> None:
    # their stream numbers are per device: merged, stream 7 of both became one FIFO
    doc = _doc()
    for e in list(doc["traceEvents"]):
        if e["cat"] == "kernel":
            twin = copy.deepcopy(e)
            twin["pid"], twin["name"] = 1, e["name"] + "_gpu1"
            doc["traceEvents"].append(twin)
    path = _write(tmp_path, doc)
    assert _error(_trace(["replay", str(path)])) == (
        f"lancet-trace: error: {path}: GPU activities of 2 devices (pid 0: 'gemm' at ts 20; "
        "pid 1: 'gemm_gpu1' at ts 20): a trace is one rank on one GPU; profile one process "
        "per GPU\n"
    )


def test_an_activity_before_its_launch_is_refused(tmp_path: Path) -> None:
    doc = _doc()
    add = doc["traceEvents"][-1]
    assert (add["name"], add["args"]["correlation"]) == ("add", 6)
    add["ts"] = 205  # its launch is at 301; replayed it moved the step by +36.7 %
    path = _write(tmp_path, doc)
    assert _error(_trace(["replay", str(path)])) == (
        f"lancet-trace: error: {path}: kernel 'add' at ts 205 starts before its launch call "
        "'cudaLaunchKernel' at ts 301 (correlation 6): the trace's host and GPU clocks "
        "disagree\n"
    )


def test_a_last_step_without_gpu_work_names_the_steps_that_have_some(tmp_path: Path) -> None:
    doc = _doc()
    doc["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3",
                               "pid": 1, "tid": 1, "ts": 400, "dur": 49, "args": {}})  # fmt: skip
    path = _write(tmp_path, doc)
    assert _error(_trace(["replay", str(path)])) == (
        f"lancet-trace: error: {path}: ProfilerStep#3 launches no GPU activity (steps that "
        "do: 1, 2; choose one with --step)\n"
    )
    ok = _trace(["replay", str(path), "--step", "2"])
    assert (ok.returncode, ok.stdout.decode()) == (0, SUMMARY)


def test_numbers_beyond_64_bits(tmp_path: Path) -> None:
    doc = _doc()
    doc["distributedInfo"]["world_size"] = 2**70
    path = _write(tmp_path, doc)
    assert _error(_trace(["replay", str(path)])) == (
        f"lancet-trace: error: {path}: distributedInfo.world_size must be an integer >= 1, "
        f"got {2**70}\n"
    )
    doc = _doc()
    doc["traceEvents"][10]["name"] = "ProfilerStep#" + "9" * 26
    path = _write(tmp_path, doc)
    assert _error(_trace(["import", str(path)])) == (
        f"lancet-trace: error: {path}: ProfilerStep#{'9' * 26}: the step number is out of range\n"
    )
    doc = _doc()
    for e in doc["traceEvents"]:
        if e["cat"] == "kernel":
            e["args"]["stream"] = 2**64  # unreadable: the thread id stands for the stream
    path = _write(tmp_path, doc)
    proc = _trace(["import", str(path)])
    assert proc.returncode == 0, proc.stderr  # was: an i64 range error without the file


def test_a_closed_or_full_stdout_is_one_line() -> None:
    full = open("/dev/full", "wb")  # noqa: SIM115 - handed to the child
    try:
        proc = _trace(["import", str(TWO)], stdout=full.fileno())
    finally:
        full.close()
    assert (proc.returncode, proc.stderr.decode()) == (
        1, "lancet-trace: error: -: standard output: No space left on device\n"
    )  # fmt: skip
    closed = subprocess.run(
        f"'{sys.executable}' -m lancet_mlir.tools.lancet_trace replay '{TWO}' >&-",
        shell=True, capture_output=True, timeout=120,
    )  # fmt: skip
    assert (closed.returncode, closed.stderr.decode()) == (
        1, "lancet-trace: error: -: standard output is closed (give the output a file)\n"
    )  # fmt: skip


def test_pipeline_takes_xdsl_passes_too_and_names_itself_in_errors() -> None:
    traces = sorted(str(p) for p in (DATA / "dlrm").glob("worker0*"))
    et = str(DATA / "dlrm" / "dlrm_eg_0.json.gz")
    ok = _trace(["whatif", *traces, "--et", et, "--pipeline", "canonicalize"])
    assert ok.returncode == 0, ok.stderr
    assert (
        "\npipeline canonicalize: 6278.0 -> 6278.0 us simulated step period" in ok.stdout.decode()
    )
    bad = _trace(["whatif", *traces, "--et", et, "--pipeline", "lancet-schedule{"])
    assert _error(bad).startswith("lancet-trace: error: --pipeline: bad pass pipeline ")


def test_a_launch_blocked_by_a_full_queue_is_flagged(tmp_path: Path) -> None:
    # step 2's gemm runs 500 us; the relu's launch returns 2 us after it ends (the queue was
    # full): the replay keeps those 440 us of host time, which a faster GPU would not spend
    doc = _doc()
    events = doc["traceEvents"]
    by_corr = {e["args"].get("correlation"): e for e in events if e["cat"] == "kernel"}
    calls = {e["args"]["correlation"]: e for e in events if e["cat"] == "cuda_runtime"}
    by_corr[4]["dur"] = 500  # gemm 220 -> 720
    calls[5]["dur"] = 441  # relu's launch 281 -> 722
    by_corr[5]["ts"] = 725
    for corr, shift in ((6, 430),):
        calls[corr]["ts"] += shift
        by_corr[corr]["ts"] += shift
    for e in events:
        if e["cat"] == "cpu_op" and e["ts"] >= 300:
            e["ts"] += 430
    events[10]["dur"] = 600  # ProfilerStep#2: 200 -> 800 (period: last ends 115 -> 745)
    path = _write(tmp_path, doc)
    proc = _trace(["replay", str(path), "--report", "-"])
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    flags = [f for f in report["flags"] if f.startswith("launch_queue_full")]
    assert flags == [
        "launch_queue_full: 1 launch calls spent 440 us of the 630 us step blocked until a GPU "
        "op ended (the launch queue was full: the GPU ran behind the host); the replay keeps "
        "that host time, so a what-if that speeds up the GPU (--compute-scale < 1) "
        "under-predicts its gain"
    ]
    plain = json.loads(_trace(["replay", str(TWO), "--report", "-"]).stdout)
    assert not any(f.startswith("launch_queue_full") for f in plain["flags"])
