"""MPI jobs that real use broke (issue 20 item 6), with the pip mpich's `mpiexec`: the ranks of
`lancet-opt --mpi` agree on their input's sha256 as on their options, and Ctrl-C to mpiexec
ends the job with one line of ours (no MPICH `Abort(130) ...` line) and no lingering rank.
Each test failed before the fix (exit 0 with a missing file on rank 1; two error lines and
MPICH's abort line)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lancet_mlir.support.mpi_util import mpiexec_argv

DATA = Path(__file__).resolve().parents[1] / "data" / "runtime"
MODULE = str(DATA / "collectives_w2.mlir")
TIMEOUT = 90
pytestmark = [pytest.mark.timeout(300), pytest.mark.serial]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "MPI_LOCAL", "LANCET_FAULT", "MPIR_CVAR"))}  # fmt: skip
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _opt_mpmd(*inputs: str) -> subprocess.CompletedProcess[str]:
    argv = mpiexec_argv(1)
    for k, path in enumerate(inputs):
        if k:
            argv += [":", "-n", "1"]
        argv += [sys.executable, "-m", "lancet_mlir.tools.lancet_opt", "--mpi", path]
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=_env())


def _errors(text: str, tool: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith(f"{tool}: error:")]


def test_lancet_opt_mpi_ranks_agree_on_the_input(tmp_path: Path) -> None:
    proc = _opt_mpmd(MODULE, str(tmp_path / "nosuch.mlir"))
    assert proc.returncode == 1  # was 0: rank 1 never read its input
    assert _errors(proc.stderr, "lancet-opt") == [
        f"lancet-opt: error: rank 1: {tmp_path / 'nosuch.mlir'}: no such file"
    ]
    other = tmp_path / "other.mlir"
    other.write_text(Path(MODULE).read_text() + "\n// another module\n")
    proc = _opt_mpmd(MODULE, str(other))
    assert proc.returncode == 1
    (line,) = _errors(proc.stderr, "lancet-opt")
    assert line.startswith("lancet-opt: error: rank 1: its input differs from rank 0's (sha256 ")
    assert line.endswith("); every rank must be given the same module")
    binary = tmp_path / "binary.mlir"
    binary.write_bytes(b"func.func @f() \xff\xfe\n")
    proc = _opt_mpmd(str(binary), MODULE)  # rank 0 cannot read its input: that is the line
    assert proc.returncode == 1
    assert _errors(proc.stderr, "lancet-opt") == [
        f"lancet-opt: error: rank 0: {binary}: not UTF-8 text (byte 15)"
    ]
    same = _opt_mpmd(MODULE, MODULE)
    assert same.returncode == 0, same.stderr


LONG = (
    """func.func @f(%x: tensor<256x256xf32>) -> tensor<256x256xf32> {
"""
    + "".join(
        f"  %m{i} = comp.matmul {'%x' if i == 0 else f'%m{i - 1}'}, %x : "
        "(tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>\n"
        for i in range(40)
    )
    + "  func.return %m39 : tensor<256x256xf32>\n}\n"
)


def test_ctrl_c_under_mpiexec_ends_with_one_line_and_no_lingering_rank(tmp_path: Path) -> None:
    src = tmp_path / "long.mlir"
    src.write_text(LONG)
    argv = [*mpiexec_argv(2), sys.executable, "-m", "lancet_mlir.tools.lancet_profile", "measure",
            str(src), "--iters", "100000", "--rounds", "1", "-o", str(tmp_path / "p.json")]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(), start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the plan line: the ranks are measuring
        assert first.startswith("lancet-profile: measuring"), first
        assert time.monotonic() < deadline
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGINT)  # what Ctrl-C sends mpiexec
        out, err = proc.communicate(timeout=TIMEOUT)
        ended = time.monotonic()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    assert _errors(err, "lancet-profile") == ["lancet-profile: error: rank 0: interrupted"]
    assert "Abort(" not in err + out  # MPICH's own abort line used to follow ours
    assert not (tmp_path / "p.json").exists()
    # no rank outlives mpiexec by more than a moment
    while time.monotonic() < ended + 2.0 and _ranks_alive(str(src)):
        time.sleep(0.1)
    assert not _ranks_alive(str(src))


def _ranks_alive(marker: str) -> bool:
    res = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False)
    return bool(res.stdout.strip())
