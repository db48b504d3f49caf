"""Bad values in Kineto traces (issue 19/20 review): overlapping kernels on one stream warn once
per trace, beyond a clock-rounding tolerance; the errors themselves are cases of
test/data/bad/cases.txt."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.importers.traces.kineto import OVERLAP_TOLERANCE_US, load_json, parse_kineto
from lancet_mlir.tools import lancet_trace

ROOT = Path(__file__).resolve().parents[1] / "data"
BASE: dict[str, Any] = json.loads((ROOT / "bad" / "trace_ok.json").read_text())
"""gemm_a 15..25, add_b 45..55, add_c 75..85, all on stream 7."""


def _trace(durs: dict[str, float]) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    for e in doc["traceEvents"]:
        if e["name"] in durs:
            e["dur"] = durs[e["name"]]
    return doc


def test_overlap_warns_once_and_replay_still_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_trace({"gemm_a": 35})))  # 15..50: add_b (45) starts 5 us early
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(["replay", str(path)])
    assert info.value.code == 0
    err = capsys.readouterr().err
    assert err == (
        f"lancet-trace: warning: {path}: stream 7: kernel 'add_b' at ts 45 starts before "
        "'gemm_a' ends (overlap 5 us)\n"
    )


def test_many_overlaps_are_one_line_with_a_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps(_trace({"gemm_a": 35, "add_b": 40.5}))
    )  # add_b 45..85.5 past add_c (75)
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(["import", str(path), "-o", str(tmp_path / "t.mlir")])
    assert info.value.code == 0
    assert "trace.kernel" in (tmp_path / "t.mlir").read_text()
    err = capsys.readouterr().err
    assert err == (
        f"lancet-trace: warning: {path}: stream 7: kernel 'add_b' at ts 45 starts before "
        "'gemm_a' ends (overlap 5 us); 2 overlaps beyond 1 us in the trace\n"
    )


@settings(max_examples=30, deadline=None)
@given(st.floats(min_value=-20.0, max_value=40.0, allow_nan=False))
def test_warning_iff_overlap_beyond_tolerance(shift: float) -> None:
    # gemm_a ends at 25 + shift; add_b starts at 45
    raw = parse_kineto(_trace({"gemm_a": 30 + shift}), "t.json")
    overlap = 15 + (30 + shift) - 45  # as the reader computes it
    if overlap > OVERLAP_TOLERANCE_US:
        assert raw.overlap_warning is not None
        assert raw.overlap_warning.startswith(
            "t.json: stream 7: kernel 'add_b' at ts 45 starts before 'gemm_a' ends (overlap "
        )
    else:
        assert raw.overlap_warning is None


def test_bundled_dlrm_traces_do_not_warn() -> None:
    paths = sorted((ROOT / "traces" / "dlrm").glob("worker*.pt.trace.json.gz"))
    assert len(paths) == 8
    assert [parse_kineto(load_json(str(p)), str(p)).overlap_warning for p in paths] == [None] * 8


def test_a_first_op_that_waited_for_unseen_work_is_flagged(tmp_path) -> None:
    """One kernel launched at 10 us (a 1 us call) started at 150: nothing in the window explains
    the 140 us wait (work before it: a previous step's kernels, another process), and as its
    stream's first op its wait is no launch lag either. The replay starts it at 10 + 5 (the
    default lag), ends it at 35 against 170 measured (-79.4 %), and says why: the first op of
    stream 7 started 150 - 15 = 135 us later than its launch explains (over 10 % of the step,
    and the period misses by over 2 %). Seen on HTA's call_stack/backward_thread.json."""
    import json

    from lancet_mlir.importers.traces import load_steps
    from lancet_mlir.importers.traces.report import replay_steps

    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 200, "args": {}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 10, "dur": 1, "args": {"correlation": 1, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 150, "dur": 20,
         "args": {"stream": 7, "correlation": 1, "External id": 1, "device": 0}},
    ]  # fmt: skip
    path = tmp_path / "late_first.json"
    path.write_text(json.dumps({
        "schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-32GB"}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "traceEvents": events,
    }))  # fmt: skip
    report = replay_steps(load_steps([str(path)]))
    assert report["measured_period_us"] == 170.0
    assert report["predicted_period_us"] == 35.0
    assert report["flags"][0] == (
        "first_op_waits_unseen: the first op of stream 7 in the window started 135 us later "
        "than its launch explains (work before the window: a previous step's kernels, another "
        "process?): the replay starts it at its launch"
    )
