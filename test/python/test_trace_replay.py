"""lancet-trace: hand-written tiny traces with replays computed by hand, the real DLRM traces
(8 V100 ranks, param's test data) and determinism of the imported module (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lancet_mlir.importers.traces import load_steps
from lancet_mlir.importers.traces.report import WhatIf, replay_steps
from lancet_mlir.tools import lancet_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


def _replay(*names: str, what: WhatIf | None = None) -> dict:
    return replay_steps(load_steps([str(DATA / n) for n in names]), what)


def test_host_bound_step() -> None:
    # launches at 10, 40, 70 (5 us each), kernels of 10 us start 5 us after their launch:
    # the host paces the step; the GPU alone would need 3 x 10 us
    r = _replay("host_bound.json")
    assert r["measured_period_us"] == 85.0
    assert r["predicted_period_us"] == 85.0
    assert r["start_error_p50_us"] == 0.0
    assert r["gpu_only_period_us"] == 30.0
    assert r["launch_lag_us"] == 5.0


def test_gpu_bound_step() -> None:
    # three 30 us kernels launched back to back at 10, 12, 14: the stream paces the step;
    # no op started on an idle stream, so the lag is the default 5 us: 15 + 3 x 30 = 105
    r = _replay("gpu_bound.json")
    assert (r["measured_period_us"], r["predicted_period_us"]) == (105.0, 105.0)
    assert r["gpu_only_period_us"] == 90.0


def test_event_wait_across_streams() -> None:
    # k2 (stream 20, launched at 14) waits for k1 (stream 7, 15..35): it starts at 35, not 19.
    # k0 (stream 30, launched last before the wait) ends at 116 > 35: rejected as the source
    r = _replay("event_wait.json")
    assert r["event_waits_kept"] == 1
    assert r["event_wait_candidates_rejected"] == 1
    assert r["predicted_period_us"] == r["measured_period_us"] == 116.0
    steps = load_steps([str(DATA / "event_wait.json")])
    ops = steps[0].graph.ops
    k1, k2 = (next(j for j, o in enumerate(ops) if o.name == n) for n in ("k1", "k2"))
    assert ops[k2].deps == [k1]


def test_host_sync_blocks_the_host() -> None:
    # the sync (12..67) waits for k1 (15..65) and returns 2 us after it; k2 is launched 3 us
    # after the sync returns (70) and starts at 75, ends at 85
    r = _replay("host_sync.json")
    assert r["host_syncs"] == 1
    assert r["predicted_period_us"] == 85.0
    # half the compute: k1 ends at 40, the sync at 42, k2's launch at 45, k2 runs 50..55
    faster = _replay("host_sync.json", what=WhatIf(compute_scale=0.5))
    assert faster["predicted_period_us"] == 55.0


def test_two_ranks_with_a_straggler() -> None:
    # rank 0's all-reduce starts at 15, rank 1's at 45 (after its 30 us kernel); both end at 60:
    # wire = 60 - 45 = 15 us, rank 0 waited 30 us, rank 1 is the straggler
    r = _replay("two_rank0.json", "two_rank1.json")
    coll = r["collectives"]
    assert coll["count"] == 1
    assert coll["straggler_rank"] == 1
    row = coll["per_collective"][0]
    assert row["kind"] == "allreduce"
    assert row["wire_us"] == 15.0
    assert row["waiting_us"] == {0: 30.0, 1: 0.0}
    assert [x["predicted_period_us"] for x in r["ranks"]] == [60.0, 60.0]
    # a network twice as fast halves the wire time only: both ranks end at 45 + 7.5
    fast = _replay("two_rank0.json", "two_rank1.json", what=WhatIf(network_scale=0.5))
    assert [x["predicted_period_us"] for x in fast["ranks"]] == [52.5, 52.5]


def test_dlrm_eight_ranks_replay_within_targets() -> None:
    paths = sorted(str(p) for p in (DATA / "dlrm").glob("worker*.json.gz"))
    r = replay_steps(load_steps(paths))
    assert len(r["ranks"]) == 8
    for rank in r["ranks"]:
        assert abs(rank["period_error"]) <= 0.01
        assert rank["start_error_p50_pct"] <= 1.0
        assert rank["gpu_only_period_us"] <= rank["measured_period_us"]
    coll = r["collectives"]
    assert coll["count"] == 8
    assert coll["end_error_p50_us"] <= 5.0
    assert 0.9 < coll["waiting_share"] < 1.0  # most NCCL time is waiting for peers


def test_dlrm_single_rank_host_model_vs_gpu_only() -> None:
    r = replay_steps(load_steps([str(DATA / "dlrm" / "worker0.pt.trace.json.gz")]))
    assert abs(r["period_error"]) <= 0.02
    assert r["gpu_only_period_us"] < 0.75 * r["measured_period_us"]  # host-paced
    assert r["comm_overlap_measured"] is not None
    assert abs(r["comm_overlap_measured"] - r["comm_overlap_predicted"]) <= 0.05


def test_import_is_deterministic_and_has_comm_ops(tmp_path: Path) -> None:
    out1, out2 = tmp_path / "a.mlir", tmp_path / "b.mlir"
    src = str(DATA / "two_rank1.json")
    for out in (out1, out2):
        with pytest.raises(SystemExit) as info:
            lancet_trace.main(["import", src, "-o", str(out)])
        assert info.value.code == 0
    text = out1.read_text()
    assert text == out2.read_text()
    assert "comm.allreduce" in text
    assert "tensor<4096xi8>" in text  # 1024 floats from the nccl:all_reduce annotation
    assert "lancet.time_us = 3.000000e+01 : f64" in text


def test_replay_report_file_and_pipeline_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "r.json"
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(["replay", str(DATA / "host_bound.json"), "--report", str(report)])
    assert info.value.code == 0
    assert json.loads(report.read_text())["predicted_period_us"] == 85.0
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(
            ["whatif", str(DATA / "host_bound.json"), "--pipeline", "lancet-schedule"]
        )
    assert info.value.code == 1
    assert "reordering is refused" in capsys.readouterr().err


def test_gpu_idle_with_work_queued_is_flagged() -> None:
    # k2 is launched at 12 onto a stream free from 20, yet starts at 100 with nothing running:
    # 80 of the 105 us step are unexplained (ready at 12 + 5 lag + the 2 us allowance = 22)
    r = _replay("idle_queued.json")
    assert r["idle_with_work_queued_us"] == 78.0
    assert r["flags"][0].startswith("gpu_idle_with_work_queued")


def test_import_is_byte_identical_across_hash_seeds(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    outs = []
    for seed in ("0", "12345"):
        out = tmp_path / f"m{seed}.mlir"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "lancet_mlir.tools.lancet_trace",
                "import",
                str(DATA / "event_wait.json"),
                "-o",
                str(out),
            ],
            check=True,
            env=env,
        )
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_launch_lag_models_op_and_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--lags op` (default) vs `--lags stream` (review 20, finding 3) on lags.json: one host
    thread launches k1 (call 100 -> start 105, 10 us), a pinned HtoD copy m1 (110 -> 114,
    5 us), k2 (130 -> 137), m2 (140 -> 155) and k3 (150 -> 158), kernels on stream 7, copies
    on stream 21; the step window is 0..168. Every op but each stream's first starts on an idle
    stream, so k2, m2 and k3 keep their own lags (7, 15, 8) under `op` and the replay is the
    measurement. A stream's one lag is its least launch-to-start time: stream 7 min(5, 7, 8) =
    5, stream 21 min(4, 15) = 4. Under `stream`: k1 105, m1 114, k2 130 + 5 = 135 (error 2)
    ending 145, m2 140 + 4 = 144 (error 11), k3 150 + 5 = 155 (error 3) ending 165: period 165
    (-3 / 168 = -1.7857 %), start errors [0, 0, 2, 3, 11]: p50 2, p90 11 (nearest rank)."""
    op = _replay("lags.json")
    assert (op["lags"], op["predicted_period_us"], op["period_error"]) == ("op", 168.0, 0.0)
    assert (op["start_error_p50_us"], op["start_error_p90_us"]) == (0.0, 0.0)
    steps = load_steps([str(DATA / "lags.json")])
    g = steps[0].graph
    assert [o.lag_us for o in g.ops] == [None, None, 7.0, 15.0, 8.0]
    assert [o.stream for o in g.ops] == [0, 1, 0, 1, 0]  # stream indices: 7 -> 0, 21 -> 1
    assert g.stream_lag_us == {0: 5.0, 1: 4.0}
    st = replay_steps(steps, lags="stream")
    assert st["lags"] == "stream"
    assert st["measured_period_us"] == 168.0
    assert st["predicted_period_us"] == 165.0
    assert st["period_error"] == -0.017857
    assert (st["start_error_p50_us"], st["start_error_p90_us"]) == (2.0, 11.0)
    # the replay left the step's own lags alone: the default replay is unchanged after it
    assert replay_steps(steps)["predicted_period_us"] == 168.0
    report = tmp_path / "r.json"
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(
            ["replay", str(DATA / "lags.json"), "--lags", "stream", "--report", str(report)]
        )
    assert info.value.code == 0
    assert json.loads(report.read_text())["predicted_period_us"] == 165.0
    assert capsys.readouterr().out == (
        "rank 0 step 1: measured 168.0 us, predicted 165.0 us (-1.79 %), start error p50 2.0 "
        "us, GPU-only 30.0 us; one launch lag per stream; flags: single_step\n"
    )


def test_stream_idle_with_work_queued_is_flagged() -> None:
    """A missing cross-stream dependency (review 20, finding 12). whatif_scale.json without
    its execution trace: the all-reduce (stream 20, launched at 19) starts at 86, when the gemm
    it reads ends, but only the ET says so. The least launch lag of the trace is relu's 16 - 11
    = 5 us, so the all-reduce is ready at 19 + 5, plus the 2 us allowance: its stream sits idle
    with it queued over 26..86 = 60 us of the 136 us step (44 %, over the 10 % share). The
    compute stream is busy all that time (relu 16..46, gemm 46..86), so the whole-GPU check
    sees 0 us. With the ET the gemm -> all-reduce edge explains the wait: 0 us, no flag."""
    r = _replay("whatif_scale.json")
    assert (r["idle_with_work_queued_us"], r["stream_idle_with_work_queued_us"]) == (0.0, 60.0)
    assert r["period_error"] == round((96.0 - 136.0) / 136.0, 6)
    assert r["flags"][0] == (
        "stream_idle_with_work_queued: 60 us of the 136 us step, stream 20 sat idle with a "
        "launched op whose start no known dependency explains (a missing event wait or data "
        "dependency? pass --et): the replay starts it early"
    )
    steps = load_steps([str(DATA / "whatif_scale.json")], et=[str(DATA / "whatif_scale_et.json")])
    r = replay_steps(steps)
    assert r["stream_idle_with_work_queued_us"] == 0.0
    assert not any(f.startswith("stream_idle") for f in r["flags"])
    # a whole-GPU idle wait is flagged once, by the GPU check (idle_queued.json: 78 us on the
    # one stream, the same 78 us per stream)
    r = _replay("idle_queued.json")
    assert r["stream_idle_with_work_queued_us"] == 78.0
    assert [f.split(":")[0] for f in r["flags"]] == ["gpu_idle_with_work_queued", "single_step"]
