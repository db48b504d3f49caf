"""Fault injection under `mpiexec -n 2`: a rank failing at any phase, or interrupted, or
killed, ends every rank non-zero within a bounded time, and the one error line names the rank.

`LANCET_FAULT=R:PHASE[:ACTION]` (support/mpi_job.py) makes rank R fail at PHASE. Every run is
bounded by a subprocess timeout that fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lancet_mlir.support.mpi_util import mpiexec_argv

DATA = Path(__file__).resolve().parents[1] / "data" / "runtime"
MODULE = str(DATA / "collectives_w2.mlir")
TIMEOUT = 60

pytestmark = [pytest.mark.timeout(300), pytest.mark.serial]


def _env(fault: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI_LOCAL"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("LANCET_FAULT", None)
    if fault:
        env["LANCET_FAULT"] = fault
    return env


def mpiexec(
    tool: str, *ranks: list[str], fault: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """One rank per argument list (MPMD `: -n 1 ...`), each `python -m lancet_mlir.tools.<tool>`."""
    argv = mpiexec_argv(1)
    for k, args in enumerate(ranks):
        if k:
            argv += [":", "-n", "1"]
        argv += [sys.executable, "-m", f"lancet_mlir.tools.{tool}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT,
                          env=_env(fault), cwd=cwd)  # fmt: skip


def errors(proc: subprocess.CompletedProcess[str], tool: str) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith(f"{tool}: error:")]


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("1:args", "lancet-run: error: rank 1: injected fault at args"),
        ("1:read", "lancet-run: error: rank 1: injected fault at read"),
        ("0:verify", f"lancet-run: error: rank 0: {MODULE}: injected fault at verify"),
        ("1:collective", "lancet-run: error: rank 1: injected fault at collective"),
        ("1:write", "lancet-run: error: rank 1: injected fault at write"),
        ("0:write", "lancet-run: error: rank 0: injected fault at write"),
    ],
)
def test_lancet_run_rank_failing_at_each_phase(tmp_path: Path, fault: str, expected: str) -> None:
    out = tmp_path / "out.npz"
    proc = mpiexec(
        "lancet_run", [MODULE, "--save", str(out)], [MODULE, "--save", str(out)], fault=fault
    )
    assert proc.returncode == 1, proc.stderr
    assert errors(proc, "lancet-run") == [expected]
    assert not out.exists()  # all-or-nothing: rank 0 commits only after every rank agreed
    assert list(tmp_path.iterdir()) == []


def test_bad_argument_on_one_rank_only() -> None:
    proc = mpiexec("lancet_run", [MODULE], [MODULE, "--seed", "-1"])
    assert proc.returncode == 1
    assert errors(proc, "lancet-run") == [
        "lancet-run: error: rank 1: argument --seed: must be >= 0, got -1"
    ]


def test_lancet_opt_bad_pass_or_different_options_on_one_rank() -> None:
    proc = mpiexec("lancet_opt", ["--mpi", MODULE], ["--mpi", MODULE, "-p", "no-such-pass"])
    assert proc.returncode == 1
    assert errors(proc, "lancet-opt") == [
        "lancet-opt: error: rank 1: Unrecognized passes: ['no-such-pass']"
    ]
    proc = mpiexec("lancet_opt", ["--mpi", MODULE], [MODULE])
    assert proc.returncode == 1
    assert errors(proc, "lancet-opt") == [
        "lancet-opt: error: rank 1: options differ from rank 0's; every rank must be given the "
        "same command line"
    ]


def test_lancet_profile_measure_bad_iters_on_one_rank(tmp_path: Path) -> None:
    args = ["measure", MODULE, "-o", str(tmp_path / "p.json")]
    proc = mpiexec("lancet_profile", args, [*args, "--iters", "0"])
    assert proc.returncode == 1
    assert errors(proc, "lancet-profile") == [
        "lancet-profile: error: rank 1: argument --iters: must be >= 1, got 0"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("tool", "phase"), [("lancet_run", "collective"), ("lancet_opt", "args")])
def test_ctrl_c_on_one_rank_aborts_the_job(tool: str, phase: str) -> None:
    args = [MODULE] if tool == "lancet_run" else ["--mpi", MODULE]
    proc = mpiexec(tool, args, args, fault=f"1:{phase}:sigint")
    assert proc.returncode == 130
    name = tool.replace("_", "-")
    assert errors(proc, name) == [f"{name}: error: rank 1: interrupted"]
    assert proc.stdout == ""


def test_sigkill_of_one_rank_ends_the_job() -> None:
    proc = mpiexec("lancet_run", [MODULE], [MODULE], fault="1:collective:sigkill")
    assert proc.returncode != 0
    # the launcher names the killed process (on stdout) and ends the others
    assert "EXIT CODE: 9" in proc.stdout + proc.stderr
    assert "@collectives" not in proc.stdout  # no rank got as far as printing results


def test_huge_tensors_fail_before_allocating_on_every_rank() -> None:
    huge = str(Path(__file__).resolve().parents[1] / "data" / "bad" / "huge_tensors.mlir")
    proc = mpiexec("lancet_run", [huge], [huge])
    assert proc.returncode == 1
    lines = errors(proc, "lancet-run")
    assert len(lines) == 1
    # the 2 ranks of this machine hold 2 x (argument + result + one temporary) = 43.7 TiB
    assert lines[0].startswith(f"lancet-run: error: rank 0: running @f of {huge} on 2 rank(s) "
                               "needs about 43.7 TiB of memory but only ")  # fmt: skip


def test_profile_sync_read_fault_on_one_rank(tmp_path: Path) -> None:
    from lancet_mlir.cost.profile_db import ProfileDB, ProfileEntry

    for rank in range(2):
        ProfileDB({"k": ProfileEntry(1.0 + rank)}).save(tmp_path / f"p.{rank}.json")
    args = ["sync", str(tmp_path / "p.{rank}.json"), "-o", str(tmp_path / "out.json")]
    proc = mpiexec("lancet_profile", args, args, fault="1:read")
    assert proc.returncode == 1
    assert errors(proc, "lancet-profile") == [
        "lancet-profile: error: rank 1: injected fault at read"
    ]
    assert not (tmp_path / "out.json").exists()
    proc = mpiexec("lancet_profile", args, args)  # without the fault: the mean of 1 and 2
    assert proc.returncode == 0, proc.stderr
    assert ProfileDB.load(tmp_path / "out.json").entries["k"].mean_us == 1.5


def test_lancet_run_refuses_stdin_under_mpiexec() -> None:
    """Only rank 0 gets stdin: rank 1 would wait on it forever (it hung before the fix)."""
    argv = [*mpiexec_argv(2), sys.executable, "-m", "lancet_mlir.tools.lancet_run", "-"]
    with open(MODULE) as module:
        proc = subprocess.run(argv, stdin=module, capture_output=True, text=True, timeout=TIMEOUT,
                              env=_env(None))  # fmt: skip
    assert proc.returncode == 1
    assert errors(proc, "lancet-run") == [
        "lancet-run: error: rank 0: under mpiexec pass the module and --inputs as files "
        "(stdin reaches rank 0 only)"
    ]
    assert proc.stdout == ""


def test_profile_sync_error_is_printed_once(tmp_path: Path) -> None:
    from lancet_mlir.cost.profile_db import ProfileDB, ProfileEntry

    out = tmp_path / "s.json"
    missing = ["sync", str(tmp_path / "nosuch.{rank}.json"), "-o", str(out)]
    proc = mpiexec("lancet_profile", missing, missing)
    assert proc.returncode == 1
    assert errors(proc, "lancet-profile") == [  # was printed by both ranks
        f"lancet-profile: error: rank 0: {tmp_path / 'nosuch.0.json'}: no such file "
        "(and 1 more rank(s) failed)"
    ]
    for rank in range(2):
        path = tmp_path / f"p.{rank}.json"
        ProfileDB({"k": ProfileEntry(1.0)}).save(path)
        path.write_text(path.read_text().replace('"version": 1,', '"version": 99,'))
    old = ["sync", str(tmp_path / "p.{rank}.json"), "-o", str(out)]
    proc = mpiexec("lancet_profile", old, old)
    assert proc.returncode == 1
    assert errors(proc, "lancet-profile") == [
        f"lancet-profile: error: rank 0: {tmp_path / 'p.0.json'}: unsupported profile version 99 "
        "(this tool reads version 1) (and 1 more rank(s) failed)"
    ]
    assert not out.exists()


def test_compare_of_modules_with_other_arguments_is_one_line_under_mpiexec(
    tmp_path: Path,
) -> None:
    """Every rank found the mismatch alone and printed it (then aborted); now they agree on
    it and rank 0 prints it once, exit 1."""
    other = tmp_path / "other.mlir"
    other.write_text(
        "builtin.module attributes {lancet.world_size = 2 : i64} {\n"
        "  func.func @collectives(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {\n"
        "    %s = comm.allreduce %x : (tensor<4x4xf32>) -> tensor<4x4xf32>\n"
        "    func.return %s : tensor<4x4xf32>\n  }\n}\n"
    )
    args = ["--compare", MODULE, str(other)]
    proc = mpiexec("lancet_run", args, args)
    assert proc.returncode == 1
    assert errors(proc, "lancet-run") == [
        f"lancet-run: error: rank 0: @collectives of {MODULE} and @collectives of {other} take "
        "different arguments, so they cannot run on the same inputs: 7 arguments vs 1"
    ]
    assert proc.stdout == ""


def test_lancet_opt_under_mpiexec_without_mpi_warns_once(tmp_path: Path) -> None:
    args = [MODULE, "-o", os.devnull]
    proc = mpiexec("lancet_opt", args, args)
    assert (proc.returncode, proc.stdout) == (0, "")
    warning = ("lancet-opt: warning: 2 MPI ranks each run the whole pipeline and write every "
               "output; add --mpi to optimize on rank 0 and write once")  # fmt: skip
    assert [ln for ln in proc.stderr.splitlines() if "warning" in ln] == [warning]
    proc = mpiexec("lancet_opt", [*args, "--mpi"], [*args, "--mpi"])
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_staged_outputs_an_aborted_rank_left_are_swept_by_the_next_run(tmp_path: Path) -> None:
    # rank 1 interrupted while writing: MPI_Abort ends rank 0 with its outputs staged, and
    # nothing can remove them then; the next run into the folder does (once they are stale)
    out, report = tmp_path / "out.mlir", tmp_path / "r.json"
    args = ["--mpi", MODULE, "-o", str(out), "--report", str(report)]
    proc = mpiexec("lancet_opt", args, args, fault="1:write:sigint")
    assert proc.returncode != 0
    assert errors(proc, "lancet-opt") == ["lancet-opt: error: rank 1: interrupted"]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left
    assert all(name.startswith(".lancet-") and "@" in name for name in left), left
    for name in left:  # as old as a stale file: a younger one may belong to a live run
        os.utime(tmp_path / name, (1_000_000_000, 1_000_000_000))
    ok = subprocess.run([sys.executable, "-m", "lancet_mlir.tools.lancet_opt", MODULE, "-o",
                         str(out)], capture_output=True, text=True, timeout=TIMEOUT,
                        env=_env(None))  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mlir"], (left, ok.stderr)
