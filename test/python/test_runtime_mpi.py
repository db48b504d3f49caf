"""Multi-rank execution under mpiexec: same numbers as simulated ranks, faults never hang.

Every MPI test starts `mpiexec` in a subprocess with a 60 s timeout: a run that would hang
(a rank waiting in a collective for a rank that failed) fails the test instead of the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lancet_mlir.runtime import execute
from lancet_mlir.runtime.executor import select_function
from lancet_mlir.runtime.loader import load_module
from lancet_mlir.runtime.results import save_npz
from lancet_mlir.runtime.values import make_inputs
from lancet_mlir.support.mpi_util import mpiexec_argv

DATA = Path(__file__).resolve().parents[1] / "data" / "runtime"
BIN = Path(sys.executable).parent
TIMEOUT = 60

pytestmark = [pytest.mark.timeout(300), pytest.mark.serial]


def _env() -> dict[str, str]:
    # a clean launcher environment even if pytest itself runs under mpiexec
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI_LOCAL"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def mpirun(n: int, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`mpiexec -n n python -m lancet_mlir.tools.lancet_run args...`."""
    argv = [*mpiexec_argv(n), sys.executable, "-m", "lancet_mlir.tools.lancet_run", *args]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=TIMEOUT, env=_env(), cwd=cwd
    )


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("lancet-run: error:")]


@pytest.mark.parametrize(
    ("n", "name"),
    [(2, "collectives_w2.mlir"), (4, "collectives_w4.mlir"), (4, "moe_step_w4.mlir")],
)
def test_mpi_run_equals_simulated_ranks(tmp_path: Path, n: int, name: str) -> None:
    path = DATA / name
    sim = tmp_path / "sim.npz"
    save_npz(str(sim), execute(load_module(str(path)).module, ranks=n, seed=5).flat())
    proc = mpirun(n, str(path), "--seed", "5", "--save", str(tmp_path / "mpi.npz"))
    assert proc.returncode == 0, proc.stderr
    with np.load(sim) as a, np.load(tmp_path / "mpi.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        assert f"rank{n - 1}/0" in a.files
        for key in a.files:
            assert a[key].dtype == b[key].dtype, key
            if a[key].dtype.kind in "iub":
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            else:  # MPI's reduction order may differ from the simulated left-to-right sum
                np.testing.assert_allclose(
                    a[key],
                    b[key],
                    rtol=2e-3 if a[key].dtype == np.float16 else 1e-5,
                    atol=1e-6,
                    err_msg=key,
                )


def _inputs_npz(
    path: Path, module_path: Path, n: int, seed: int = 0
) -> dict[int, list[np.ndarray]]:
    func = select_function(load_module(str(module_path)).module)
    types, attrs = list(func.function_type.inputs.data), list(func.arg_attrs.data)
    values = {r: make_inputs(types, attrs, seed=seed, rank=r) for r in range(n)}
    return values


def _save_inputs(path: Path, values: dict[int, list[np.ndarray]]) -> None:
    save_npz(str(path), {f"rank{r}/{i}": v for r, vs in values.items() for i, v in enumerate(vs)})


def test_bad_input_on_one_rank_fails_every_rank_without_hanging(tmp_path: Path) -> None:
    module = DATA / "collectives_w4.mlir"
    values = _inputs_npz(tmp_path, module, 4)
    values[2][0] = values[2][0][:, :3]  # wrong shape on rank 2 only
    _save_inputs(tmp_path / "in.npz", values)
    proc = mpirun(4, str(module), "--inputs", str(tmp_path / "in.npz"))
    assert proc.returncode != 0
    assert error_lines(proc.stderr) == [
        "lancet-run: error: rank 2: input #0 of rank 2: shape (4, 3) does not match the type "
        "tensor<4x8xf32>"
    ]


EMBED = """builtin.module attributes {lancet.world_size = 4 : i64} {
  func.func @main(%x: tensor<3x2xf32>, %ids: tensor<2xi64>) -> tensor<8x2xf32> {
    %t = comm.allreduce %x : (tensor<3x2xf32>) -> tensor<3x2xf32>
    %e = comp.embedding %t, %ids : (tensor<3x2xf32>, tensor<2xi64>) -> tensor<2x2xf32>
    %g = comm.allgather %e : (tensor<2x2xf32>) -> tensor<8x2xf32>
    func.return %g : tensor<8x2xf32>
  }
}
"""


def test_kernel_failure_after_a_collective_names_the_rank(tmp_path: Path) -> None:
    module = tmp_path / "embed.mlir"
    module.write_text(EMBED)
    values = {r: [np.ones((3, 2), np.float32), np.array([0, 2])] for r in range(4)}
    values[1][1] = np.array([0, 7])  # out of range on rank 1: the others wait in the allgather
    _save_inputs(tmp_path / "in.npz", values)
    proc = mpirun(4, str(module), "--inputs", str(tmp_path / "in.npz"))
    assert proc.returncode != 0
    lines = error_lines(proc.stderr)
    assert len(lines) == 1
    assert lines[0].startswith("lancet-run: error: rank 1: comp.embedding %e: ")
    # the good inputs run fine and every rank gets the gathered rows
    values[1][1] = np.array([1, 2])
    _save_inputs(tmp_path / "in.npz", values)
    proc = mpirun(
        4, str(module), "--inputs", str(tmp_path / "in.npz"), "--save", str(tmp_path / "o.npz")
    )
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "o.npz") as out:
        np.testing.assert_array_equal(out["rank3/0"], np.full((8, 2), 4.0, np.float32))


def test_different_modules_on_different_ranks_are_detected(tmp_path: Path) -> None:
    a = tmp_path / "a.mlir"
    b = tmp_path / "b.mlir"
    text = (DATA / "collectives_w2.mlir").read_text()
    a.write_text(text)
    b.write_text(
        text.replace("%m1 = comm.allreduce %x reduce max", "%m1 = comm.allreduce %x reduce min")
    )
    run = [sys.executable, "-m", "lancet_mlir.tools.lancet_run"]
    argv = [*mpiexec_argv(1), *run, str(a), ":", "-n", "1", *run, str(b)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=_env())
    assert proc.returncode != 0
    lines = error_lines(proc.stderr)
    assert len(lines) == 1
    assert lines[0].startswith("lancet-run: error: rank 1: module text differs from rank 0's")


def test_world_size_must_match_the_mpi_world() -> None:
    proc = mpirun(2, str(DATA / "collectives_w4.mlir"))
    assert proc.returncode != 0
    assert error_lines(proc.stderr) == [
        "lancet-run: error: rank 0: the module declares lancet.world_size = 4 but the MPI "
        "world gives 2 ranks"
    ]


def test_mpi_summary_is_printed_once_by_rank_0() -> None:
    proc = mpirun(2, str(DATA / "collectives_w2.mlir"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("@collectives: 2 rank(s), seed 0") == 1
    assert "│    1 │     14 │" in proc.stdout  # rank 1's last result, gathered by rank 0


# ---- lancet-opt --mpi -------------------------------------------------------------------------


def _opt(n: int, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [*mpiexec_argv(n), sys.executable, "-m", "lancet_mlir.tools.lancet_opt", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=_env())


def test_lancet_opt_mpi_optimizes_on_rank0(tmp_path: Path) -> None:
    src = str(DATA / "moe_step_w4.mlir")
    ref = subprocess.run(
        [sys.executable, "-m", "lancet_mlir.tools.lancet_opt", "-p", "data-parallel-schedule", src],
        capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
    )  # fmt: skip
    assert ref.returncode == 0, ref.stderr
    out = tmp_path / "out.mlir"
    proc = _opt(2, "--mpi", "-p", "data-parallel-schedule", src, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == ref.stdout
    proc = _opt(2, "--mpi", "-p", "data-parallel-schedule", src)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ref.stdout  # printed once, by rank 0


def test_lancet_opt_mpi_error_on_rank0_ends_every_rank(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @f() {\n  %x = bad.op\n}\n")
    out = tmp_path / "out.mlir"
    proc = _opt(3, "--mpi", str(bad), "-o", str(out))
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("lancet-opt: error:")]
    assert len(lines) == 1
    assert lines[0].startswith("lancet-opt: error: rank 0: ")
    assert not out.exists()


def test_lancet_opt_mpi_pass_error_is_placed_at_its_op(tmp_path: Path) -> None:
    """Rank 0's line under --mpi is the located line of a run without it (issue 20 item 3):
    before, it named no place (`rank 0: moe-partition: 5 parts exceed ...`)."""
    src = Path(__file__).resolve().parents[1] / "data" / "bad" / "moe_layer.mlir"
    proc = _opt(2, "--mpi", str(src), "-p", "moe-partition{parts=5}")
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("lancet-opt: error:")]
    assert lines == [
        f"lancet-opt: error: rank 0: {src}:6:5: %dispatched = comp.moe_dispatch: moe-partition: "
        "5 parts exceed dimension 4 (2 blocks of 2) of 'dispatched': one row per part at least"
    ]
