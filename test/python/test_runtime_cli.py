"""lancet-run on one process: summaries, --save, --inputs, --compare and one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lancet_mlir.runtime import compare_modules, execute
from lancet_mlir.runtime.loader import load_module
from lancet_mlir.tools.lancet_run import main

DATA = Path(__file__).resolve().parents[1] / "data" / "runtime"

SCALE = """func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = comp.scale %x {alpha = ALPHA : f64} : (tensor<3xf32>) -> tensor<3xf32>
  func.return %y : tensor<3xf32>
}
"""


def cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


def test_save_holds_every_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.npz"
    code, _, err = cli(str(DATA / "collectives_w4.mlir"), "--ranks", "4", "--seed", "3",
                       "--save", str(out), capsys=capsys)  # fmt: skip
    assert code == 0, err
    expected = execute(load_module(str(DATA / "collectives_w4.mlir")).module, ranks=4, seed=3)
    with np.load(out) as saved:
        assert sorted(saved.files) == sorted(expected.flat())
        for key, value in expected.flat().items():
            np.testing.assert_array_equal(saved[key], value)
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]  # no temporary file left


def test_summary_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "s.mlir"
    src.write_text(SCALE.replace("ALPHA", "2.0"))
    ins = tmp_path / "in.npz"
    np.savez(ins, **{"rank0/0": np.array([1.0, -2.0, 4.0], np.float32)})
    code, out, _ = cli(str(src), "--inputs", str(ins), capsys=capsys)
    assert code == 0
    assert "@main: 1 rank(s), seed 0" in out
    # 2 * [1, -2, 4]: sum 6, abs sum 14
    row = next(ln for ln in out.splitlines() if "float32" in ln)
    assert [c.strip() for c in row.strip("│ ").split("│")] == ["0", "0", "3", "float32", "6", "14"]


def test_an_overflowing_step_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 70000 is beyond f16: the scaled output is inf; numpy's RuntimeWarning lines leaked before
    src = tmp_path / "s.mlir"
    src.write_text(SCALE.replace("ALPHA", "1.0e5").replace("f32", "f16"))
    code, out, err = cli(str(src), capsys=capsys)
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == (
        "warning: 1 of 1 outputs hold NaN or infinite values (first: rank 0 result 0): the step "
        "overflows or divides by zero in its dtype"
    )
    src.write_text(SCALE.replace("ALPHA", "2.0"))  # finite: no warning
    code, out, err = cli(str(src), capsys=capsys)
    assert (code, err) == (0, "")
    assert "warning" not in out


def test_compare_same_and_different(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, c = (tmp_path / n for n in ("a.mlir", "b.mlir", "c.mlir"))
    a.write_text(SCALE.replace("ALPHA", "2.0"))
    b.write_text(SCALE.replace("ALPHA", "2.0").replace("%y", "%z"))
    c.write_text(SCALE.replace("ALPHA", "2.5"))
    code, out, _ = cli("--compare", str(a), str(b), capsys=capsys)
    assert code == 0
    assert ": same (tolerances by dtype: float32 rtol=0.0001 atol=1e-05)" in out
    code, out, err = cli("--compare", str(a), str(c), "--ranks", "2", capsys=capsys)
    assert code == 1
    assert ": DIFFERENT" in out
    expected = compare_modules(str(a), str(c), ranks=2)
    assert expected.max_abs_err > 0.1
    assert err.strip() == (
        "lancet-run: error: 2 of 2 outputs differ beyond tolerance "
        f"(max abs err {expected.max_abs_err:.3g}, tolerances by dtype: float32 rtol=0.0001 "
        "atol=1e-05); they differ in f64 too: not only the order of sums"
    )
    # a loose enough tolerance accepts the difference
    code, _, _ = cli("--compare", str(a), str(c), "--rtol", "0.25", capsys=capsys)
    assert code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give a module to run, or --compare A B"),
        (["missing.mlir"], "missing.mlir: no such file"),
        (
            ["DATA/collectives_w4.mlir"],
            "--ranks: runs 1 rank, but the module declares lancet.world_size = 4",
        ),
        (
            ["DATA/moe_step_w1.mlir", "--func", "nope"],
            "no function @nope in the module (functions: @train_step)",
        ),
        (
            ["DATA/moe_step_w1.mlir", "--save", "/nonexistent/dir/o.npz"],
            "/nonexistent/dir/o.npz: folder does not exist",
        ),
        (
            ["--compare", "DATA/moe_step_w1.mlir", "DATA/collectives_w2.mlir"],
            "take different arguments",
        ),
    ],
)
def test_errors_are_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [a.replace("DATA", str(DATA)) for a in args]
    code, _, err = cli(*args, capsys=capsys)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("lancet-run: error: ")
    assert message in lines[0]


def test_parse_error_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @f( {\n")
    code, _, err = cli(str(bad), capsys=capsys)
    assert code == 1
    assert err.startswith(f"lancet-run: error: {bad}:")


def test_console_script_runs(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "lancet-run"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI_LOCAL"))}
    proc = subprocess.run([str(exe), str(DATA / "moe_step_w1.mlir"), "--save", str(tmp_path / "o.npz")],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "o.npz") as out:
        assert len(out.files) == 9
        assert out["rank0/0"].shape == ()


def test_compare_prints_a_summary_and_rows_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, c = tmp_path / "a.mlir", tmp_path / "c.mlir"
    a.write_text(SCALE.replace("ALPHA", "2.0"))
    c.write_text(SCALE.replace("ALPHA", "2.5"))
    ins = tmp_path / "in.npz"
    x = {r: np.array([1.0, -2.0, 4.0 * (r + 1)], np.float32) for r in range(3)}
    np.savez(ins, **{f"rank{r}/0": v for r, v in x.items()})
    # same module: one line, no table
    code, out, _ = cli("--compare", str(a), str(a), "--ranks", "3", "--inputs", str(ins),
                       capsys=capsys)  # fmt: skip
    assert code == 0
    assert out.splitlines() == [
        f"{a} vs {a}: same (tolerances by dtype: float32 rtol=0.0001 atol=1e-05): 3 outputs "
        "compared on 3 ranks; "
        "worst abs err 0 (rank 0 result 0), worst rel err 0"
    ]
    # 2.0x vs 2.5x: the worst error is 0.5 * 12 = 6 on rank 2; relative 6 / 30 = 0.2
    code, out, _ = cli("--compare", str(a), str(c), "--ranks", "3", "--inputs", str(ins),
                       capsys=capsys)  # fmt: skip
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == (
        f"{a} vs {c}: DIFFERENT (tolerances by dtype: float32 rtol=0.0001 atol=1e-05): 3 outputs "
        "compared on 3 ranks, "
        "3 beyond tolerance; worst abs err 6 (rank 2 result 0), worst rel err 0.2"
    )
    failing_rows = [ln for ln in lines if "NO" in ln]
    assert len(failing_rows) == 3  # failures are listed even without --verbose
    # --verbose lists every output, passing ones included
    code, out, _ = cli("--compare", str(a), str(a), "--ranks", "3", "--inputs", str(ins),
                       "--verbose", capsys=capsys)  # fmt: skip
    rows = [ln for ln in out.splitlines() if "float32" in ln and "│" in ln]
    assert [ln.split("│")[1].strip() for ln in rows] == ["0", "1", "2"]
    assert all(ln.rstrip("│ ").endswith("yes") for ln in rows)


REPLICATED = """func.func @main(%w: tensor<4xf32> {lancet.replicated}, %x: tensor<4xf32>) -> tensor<4xf32> {
  %y = comp.add %w, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
"""


def test_compare_draws_replicated_inputs_once_per_run(tmp_path: Path) -> None:
    from lancet_mlir.runtime.executor import all_rank_inputs, function_inputs, select_function

    src = tmp_path / "r.mlir"
    src.write_text(REPLICATED)
    func = select_function(load_module(str(src)).module, None)
    shared = all_rank_inputs(func, range(3), seed=5)
    for r in range(3):
        alone = function_inputs(func, seed=5, rank=r)  # no cache: drawn for this rank alone
        for x, y in zip(shared[r], alone, strict=True):
            np.testing.assert_array_equal(x, y)  # the cache changes no value
    # the replicated %w is equal on every rank, yet each rank has its own array
    assert shared[0][0] is not shared[1][0]
    np.testing.assert_array_equal(shared[0][0], shared[2][0])
    assert not np.array_equal(shared[0][1], shared[1][1])  # %x differs per rank
