"""Smoke test of the benchmark harness: bench/run_bench.py --quick on the smallest config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import run_bench  # noqa: E402 - the harness lives next to the benchmarks, not in the package


@pytest.mark.timeout(300)
def test_quick_run_on_the_smallest_config(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(REPO / "bench" / "run_bench.py"), "--quick",
         "--configs", "tiny_moe_g4_h100", "--out", str(tmp_path)],
        capture_output=True, text=True, check=False, timeout=280,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    payload = json.loads((tmp_path / "bench_results.json").read_text())
    runs = payload["runs"]
    assert [r["config"] for r in runs] == ["tiny_moe_g4_h100"]
    entries = runs[0]["pipelines"]
    assert [e["spec"] for e in entries] == [p.spec for p in run_bench.PIPELINES]
    for e in entries:
        assert e["status"] == "ok", e
        assert e["makespan_us"] > 0
        assert e["lower_bound_us"] <= e["makespan_us"] * (1 + 1e-9)
    reference = next(e for e in entries if e["spec"] == "program-order")
    assert reference["speedup_vs_program_order"] == 1.0
    best_baseline = min((e for e in entries if e["baseline"]), key=lambda e: e["makespan_us"])
    assert best_baseline["speedup_vs_best_baseline"] == 1.0
    assert runs[0]["best_baseline"] == best_baseline["name"]
    timing = payload["lancet_opt_timing"]
    assert all(c["returncode"] == 0 for c in timing["cli"])
    readme = (tmp_path / "README.md").read_text()
    assert "| program order | baseline |" in readme
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == [
        "gantt_moe_layer_tiny_moe_g4_h100.png",
        "iteration_time_gpt2_moe_h100.png",
        "speedup_gpt2_moe_h100.png",
    ]
    assert not list(tmp_path.glob(".bench-*"))
    assert not list(tmp_path.glob(".lancet-*"))


def test_config_selection() -> None:
    quick = [c.name for c in run_bench.all_configs(quick=True)]
    assert quick == ["tiny_moe_g4_h100", "stablehlo_shardy_h100", "stablehlo_gspmd_h100",
                     "stablehlo_xla_cpu_h100"]  # fmt: skip
    full = run_bench.all_configs(quick=False)
    # 5 presets x 3 world sizes x 2 devices + 3 StableHLO files x 2 devices
    assert len(full) == 5 * 3 * 2 + 3 * 2
    picked = run_bench.select(full, ["gpt2_moe_nl12*_g32_a100"])
    assert [c.name for c in picked] == [
        "gpt2_moe_nl12_m768_nh16_sl512_b48_g32_a100",
        "gpt2_moe_nl12_m768_nh16_sl512_b16_g32_a100",
    ]
    assert [c.model.world_size for c in picked] == [32, 32]


@pytest.mark.timeout(300)
def test_optimizer_time_bench_rows_per_jobs(tmp_path: Path) -> None:
    """bench/bench_optimizer_time.py on a 1-layer model with jobs 1 and 2: one row each, the
    ratios the quotients of the figures, and the table and plot written."""
    import bench_optimizer_time

    assert (
        bench_optimizer_time.main(["--layers", "1", "--jobs", "1", "2", "--out", str(tmp_path)])
        == 0
    )
    rows = json.loads((tmp_path / "optimizer_time.json").read_text())
    assert [(r["layers"], r["jobs"]) for r in rows] == [(1, 1), (1, 2)]
    for r in rows:
        # the figures are rounded to 0.01 s after the ratios were taken
        assert r["time_ratio"] == pytest.approx(
            r["lancet_schedule_s"] / r["parse_print_s"], abs=0.05
        )
        assert r["wall_ratio"] == pytest.approx(
            r["lancet_schedule_wall_s"] / r["parse_print_wall_s"], abs=0.05
        )
        assert r["lancet_schedule_mb"] > 0
    table = (tmp_path / "optimizer_time.md").read_text().splitlines()
    assert table[2].startswith(f"| 1 | {rows[0]['ops']} | 1 | ")
    assert (tmp_path / "optimizer_time.png").stat().st_size > 0
