"""Robust CPU measurements and progress (issue #12 items 5 and 6): outlier rejection,
rounds and the run-to-run spread, pinned BLAS threads, --max-seconds, the up-front plan line,
a progress bar on a terminal only."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import BIN, REPO, run_tool

from lancet_mlir.measure.measure import measure_with_stats, round_sizes
from lancet_mlir.measure.numpy_backend import NumpyBackend
from lancet_mlir.measure.robust import reject_outliers, robust_summary, round_spread
from lancet_mlir.runtime.loader import parse_module_text

THREE_MATMULS = """func.func @f(%a: tensor<160x160xf32>, %b: tensor<96x96xf32>, %c: tensor<128x128xf32>) -> (tensor<160x160xf32>, tensor<96x96xf32>, tensor<128x128xf32>) {
  %x = comp.matmul %a, %a : (tensor<160x160xf32>, tensor<160x160xf32>) -> tensor<160x160xf32>
  %y = comp.matmul %b, %b : (tensor<96x96xf32>, tensor<96x96xf32>) -> tensor<96x96xf32>
  %z = comp.matmul %c, %c : (tensor<128x128xf32>, tensor<128x128xf32>) -> tensor<128x128xf32>
  func.return %x, %y, %z : tensor<160x160xf32>, tensor<96x96xf32>, tensor<128x128xf32>
}
"""
AGREEMENT = 0.5
"""Documented tolerance (docs/runtime.md, "Robust measurements"): two measurements of the
same module on a busy machine agree on the iteration total (sum of the keys' medians) within
50% (the issue's two runs differed 2.5x)."""


def test_outliers_are_rejected_by_scaled_mad() -> None:
    # median 100, MAD 1 -> scaled 1.4826: 3.5 * 1.4826 = 5.19 keeps 95..105, drops 9847
    samples = [99.0, 100.0, 101.0, 100.0, 98.0, 102.0, 9847.0, 100.0]
    assert reject_outliers(samples) == [99.0, 100.0, 101.0, 100.0, 98.0, 102.0, 100.0]
    stats = robust_summary(samples)
    assert stats.rejected == 1
    assert stats.median_us == 100.0
    assert stats.entry.count == 7
    assert stats.entry.max_us == 102.0
    assert stats.entry.mean_us == pytest.approx(700.0 / 7)
    # with MAD = 0 only the samples equal to the median stay
    assert reject_outliers([5.0, 5.0, 5.0, 80.0]) == [5.0, 5.0, 5.0]
    assert reject_outliers([1.0, 50.0]) == [1.0, 50.0]  # too few samples to judge


def test_rounds_and_spread() -> None:
    assert round_sizes(20, 3, budget=False) == [7, 7, 6]
    assert round_sizes(2, 3, budget=False) == [1, 1]
    assert round_sizes(20, 3, budget=True) == [1, 10, 9]  # every key once, early
    assert round_spread([10.0, 12.0, 11.0]) == pytest.approx(2.0 / 11.0)
    assert round_spread([10.0]) == 0.0


def test_measure_records_rounds_statistic_and_threads() -> None:
    module = parse_module_text(THREE_MATMULS).module
    seen: list[tuple[int, int]] = []
    db, _, stats = measure_with_stats(module, NumpyBackend(), warmup=1, iters=6, rounds=3,
                                      progress=lambda d, t, k: seen.append((d, t)))  # fmt: skip
    assert seen == [(n, 9) for n in range(1, 10)]  # 3 keys x 3 rounds
    assert stats.rounds == 3
    assert db.metadata["rounds"] == 3
    assert db.metadata["blas_threads"] == 1
    assert db.metadata["statistic"].startswith("mean after rejecting samples beyond 3.5")
    for key, entry in db.entries.items():
        extra = db.metadata["key_stats"][key]
        assert entry.count + extra["rejected"] == 6
        assert entry.min_us <= extra["median_us"] <= entry.max_us


@pytest.mark.serial  # measures time: run alone
def test_max_seconds_times_every_key_once_before_more_rounds() -> None:
    module = parse_module_text(THREE_MATMULS).module
    # 10^5 runs of each key take far longer than the budget on any machine (three tiny
    # matmuls ran 500 times each in 0.13 s on an idle one), so the budget always ends it
    db, _, stats = measure_with_stats(module, NumpyBackend(), warmup=0, iters=100_000,
                                      max_seconds=0.5)  # fmt: skip
    assert len(db.entries) == 3
    assert all(1 <= e.count < 100_000 for e in db.entries.values())
    assert stats.budget_hit
    assert db.metadata["budget_exhausted"] is True


def _total(path: Path) -> float:
    """The iteration total of a profile: the sum of its keys' medians."""
    stats = json.loads(path.read_text())["metadata"]["key_stats"]
    return sum(k["median_us"] for k in stats.values())


@pytest.mark.serial  # measures time: run alone
def test_two_measurements_agree_under_a_busy_process(tmp_path: Path) -> None:
    src = tmp_path / "m.mlir"
    src.write_text(THREE_MATMULS)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])

    def pair(tag: str) -> list[float]:
        totals = []
        for k in range(2):
            out = tmp_path / f"p{tag}{k}.json"
            res = run_tool(["lancet-profile", "measure", str(src), "--iters", "15",
                            "--warmup", "3", "-o", str(out)])  # fmt: skip
            assert res.returncode == 0, res.stderr
            totals.append(_total(out))
        return sorted(totals)

    def agree(totals: list[float]) -> bool:
        return totals[1] <= totals[0] * (1 + AGREEMENT)

    try:
        # On 2 cores a process left over by an earlier test of the suite can take the other
        # core for a moment (seen once: 248 vs 469 us); a second pair is measured then. An
        # unstable measurement disagrees in both pairs.
        first = pair("a")
        second = first if agree(first) else pair("b")
    finally:
        busy.kill()
        busy.wait()
    assert agree(second), (first, second)


def test_progress_on_a_terminal_only(tmp_path: Path) -> None:
    src = tmp_path / "m.mlir"
    src.write_text(THREE_MATMULS)
    argv = [str(BIN / "lancet-profile"), "measure", str(src), "--iters", "6", "--warmup", "0"]
    # a pipe: the plan and the summary, no bar
    piped = run_tool(["lancet-profile", "measure", str(src), "--iters", "6", "--warmup", "0",
                      "-o", str(tmp_path / "a.json")])  # fmt: skip
    lines = piped.stderr.splitlines()
    assert lines[0] == ("lancet-profile: measuring 3 op keys on cpu: 0 warm-up + 6 timed runs "
                        "each in 3 rounds; BLAS threads pinned to 1")  # fmt: skip
    assert lines[1].startswith("lancet-profile: measured 3 of 3 op keys in ")
    assert "run-to-run spread of the iteration total" in lines[1]
    assert "━" not in piped.stderr
    # a pseudo-terminal: the bar is drawn on stderr
    seen = _stderr_on_a_terminal([*argv, "-o", str(tmp_path / "b.json")])
    assert "measuring" in seen
    assert "━" in seen
    assert "/9" in seen  # "done/total" of 3 keys x 3 rounds


def _stderr_on_a_terminal(argv: list[str]) -> str:
    """Run `argv` with stderr on a pseudo-terminal (stdout discarded); what it drew there."""
    master, slave = pty.openpty()
    try:
        env = dict(os.environ, COLUMNS="100", TERM="xterm")
        proc = subprocess.Popen(argv, stderr=slave, stdout=subprocess.DEVNULL, env=env)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # the terminal closed: the process is done
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=120) == 0
    finally:
        os.close(master)
    return b"".join(chunks).decode("utf-8", errors="replace")


def test_lancet_run_compare_progress_on_a_terminal_only(tmp_path: Path) -> None:
    src = tmp_path / "m.mlir"
    src.write_text(THREE_MATMULS)
    argv = ["lancet-run", "--compare", str(src), str(src)]
    piped = run_tool(argv)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""  # nothing drawn into a pipe
    seen = _stderr_on_a_terminal([str(BIN / argv[0]), *argv[1:]])
    assert "comparing" in seen
    assert "8/8" in seen  # 4 ops (3 matmuls and the return) of each of the two runs


def test_bench_progress_on_a_terminal_only(tmp_path: Path) -> None:
    """`make bench` draws a bar over the configurations on a terminal; in a pipe its
    per-configuration lines are the progress."""
    argv = [str(BIN / "python"), str(REPO / "bench" / "run_bench.py"), "--quick",
            "--configs", "tiny_moe*", "--no-timing", "--no-plots"]  # fmt: skip
    piped = subprocess.run([*argv, "--out", str(tmp_path / "a")], capture_output=True,
                           text=True, timeout=300, check=False)  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert "━" not in piped.stderr
    assert piped.stdout.startswith("tiny_moe_g4_h100: best ")
    seen = _stderr_on_a_terminal([*argv, "--out", str(tmp_path / "b")])
    assert "bench" in seen
    assert "0/1" in seen
