"""Bad input to lancet-opt: one clear error line, exit code != 0, no traceback, no -o file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import run_tool

GOOD = """func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %r = comm.allreduce %x : (tensor<8xf32>) -> tensor<8xf32>
  func.return %r : tensor<8xf32>
}
"""

CASES = {
    "syntax": (
        "func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n"
        "  %r = comm.allreduce %x : (tensor<8xf32>) ->\n}\n",
        [],
        "bad.mlir:3:1: type expected",
    ),
    "unknown_op": (
        '%x = "foo.bar"() : () -> tensor<8xf32>\n',
        [],
        "Operation foo.bar is not registered",
    ),
    "comm_type_mismatch": (
        '%x = "test.op"() : () -> tensor<8xf32>\n'
        "%r = comm.allreduce %x : (tensor<8xf32>) -> tensor<4xf32>\n",
        [],
        "bad.mlir:2:1: %r = comm.allreduce: result #0 shape [4] must equal operand shape [8]",
    ),
    # the reason is on the verifier message's second line; it used to be cut off
    "comm_memref_operand": (
        '%x = "test.op"() : () -> memref<8xf32>\n'
        '%r = "comm.allreduce"(%x) : (memref<8xf32>) -> memref<8xf32>\n',
        [],
        "bad.mlir:2:1: %r = comm.allreduce: operand 'inputs' at position 0 does not verify: "
        "memref<8xf32> should be of base attribute tensor",
    ),
    "comm_dynamic_shape": (
        '%x = "test.op"() : () -> tensor<?xf32>\n'
        "%r = comm.allreduce %x : (tensor<?xf32>) -> tensor<?xf32>\n",
        [],
        "bad.mlir:2:1: %r = comm.allreduce: operand #0 has a dynamic shape (tensor<?xf32>); "
        "collectives need static shapes",
    ),
    "option_bool_for_int": (
        GOOD,
        ["-p", "ddp-bucket-schedule{bucket-bytes=true}"],
        "lancet-opt: error: ddp-bucket-schedule: option bucket-bytes expects an integer, got true",
    ),
    "unknown_pass": (GOOD, ["-p", "no-such-pass"], "Unrecognized passes: ['no-such-pass']"),
    "bad_option_name": (
        GOOD,
        ["-p", "comm-bucket-fusion{bogus=1}"],
        "comm-bucket-fusion: unknown option bogus; options: bucket-bytes, kinds",
    ),
    "bad_option_value": (
        GOOD,
        ["-p", "comm-bucket-fusion{bucket-bytes=abc}"],
        "comm-bucket-fusion: option bucket-bytes expects an integer, got 'abc'",
    ),
    "bad_option_kind": (GOOD, ["-p", "comm-bucket-fusion{kinds=foo}"], "unknown kind(s) foo"),
    "negative_bucket": (
        GOOD,
        ["-p", "comm-bucket-fusion{bucket-bytes=-1}"],
        "bucket-bytes must be >= 0",
    ),
    "use_before_def": (
        '%y = "test.op"(%x) : (tensor<8xf32>) -> tensor<8xf32>\n'
        '%x = "test.op"() : () -> tensor<8xf32>\n',
        [],
        "'test.op' uses a result of 'test.op' (%x) before its definition",
    ),
    "bad_world_size": (GOOD, ["--world-size", "0"], "--world-size: must be >= 1"),
    "bad_pipeline_syntax": (
        GOOD,
        ["-p", "comm-bucket-fusion{bucket-bytes=8192, kinds=allreduce}"],
        "bad pass pipeline 'comm-bucket-fusion{bucket-bytes=8192, kinds=allreduce}': "
        "Unknown argument value",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_gives_one_error_line(case: str, tmp_path: Path) -> None:
    text, extra, expected = CASES[case]
    src = tmp_path / "bad.mlir"
    src.write_text(text)
    out = tmp_path / "out.mlir"
    res = run_tool(["lancet-opt", str(src), "-o", str(out), *extra])
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    error_lines = [ln for ln in res.stderr.splitlines() if "error:" in ln]
    assert len(error_lines) == 1, res.stderr
    assert expected in error_lines[0]
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [src]  # no temporary file left behind either


def test_an_empty_input_is_an_empty_module(tmp_path: Path) -> None:
    # as mlir-opt reads one (it was "1:1: Could not parse entire input!")
    for text in ("", "\n  \n", "// only a comment\n\n// and another"):
        src = tmp_path / "empty.mlir"
        src.write_text(text)
        res = run_tool(["lancet-opt", str(src), "-p", "lancet-schedule"])
        assert (res.returncode, res.stdout, res.stderr) == (0, "builtin.module {\n}\n\n", "")
    res = run_tool(["lancet-opt", str(src), "--no-implicit-module"])
    assert res.returncode == 1  # without the implicit module there is no op to take
    # so does --verify-diagnostics, of a file and of a chunk holding nothing
    assert run_tool(["lancet-opt", str(src), "--verify-diagnostics"]).returncode == 0
    src.write_text(GOOD + "\n// -----\n// nothing here\n")
    for flags in ([], ["--verify-diagnostics"]):
        res = run_tool(["lancet-opt", str(src), "--split-input-file", *flags, "-o", os.devnull])
        assert (res.returncode, res.stderr) == (0, ""), flags


def test_missing_input_file(tmp_path: Path) -> None:
    res = run_tool(["lancet-opt", str(tmp_path / "nope.mlir")])
    assert res.returncode == 1
    assert res.stderr.strip() == f"lancet-opt: error: {tmp_path / 'nope.mlir'}: no such file"


def test_unregistered_ops_are_allowed_with_the_flag(tmp_path: Path) -> None:
    src = tmp_path / "u.mlir"
    src.write_text('%x = "foo.bar"() : () -> tensor<8xf32>\n')
    res = run_tool(
        ["lancet-opt", str(src), "--allow-unregistered-dialect", "--data-parallel-schedule"]
    )
    assert res.returncode == 0, res.stderr
    assert '"foo.bar"()' in res.stdout


def test_output_file_written_only_on_success(tmp_path: Path) -> None:
    src = tmp_path / "good.mlir"
    src.write_text(GOOD)
    out = tmp_path / "out.mlir"
    out.write_text("previous contents\n")
    res = run_tool(["lancet-opt", str(src), "-p", "no-such-pass", "-o", str(out)])
    assert res.returncode != 0
    assert out.read_text() == "previous contents\n"
    res = run_tool(["lancet-opt", str(src), "--data-parallel-schedule", "-o", str(out)])
    assert res.returncode == 0, res.stderr
    assert "comm.allreduce %x" in out.read_text()


def test_output_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    # /dev/null and /dev/stdout are links or devices: renaming a temp file over them would
    # replace them, so outputs are written through such paths instead
    src = tmp_path / "good.mlir"
    src.write_text(GOOD)
    real = tmp_path / "real.mlir"
    link = tmp_path / "link.mlir"
    link.symlink_to(real)
    res = run_tool(["lancet-opt", str(src), "-o", str(link), "--report", "/dev/null"])
    assert res.returncode == 0, res.stderr
    assert link.is_symlink()
    assert "comm.allreduce %x" in real.read_text()
    assert Path("/dev/null").is_char_device()


def test_outputs_follow_the_umask(tmp_path: Path) -> None:
    import os

    src = tmp_path / "good.mlir"
    src.write_text(GOOD)
    out = tmp_path / "out.mlir"
    old = os.umask(0o022)
    try:
        res = run_tool(["lancet-opt", str(src), "-o", str(out)])
    finally:
        os.umask(old)
    assert res.returncode == 0, res.stderr
    assert out.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("tool", ["lancet-run", "lancet-model", "lancet-profile"])
def test_bad_flags_of_every_tool_give_one_line(tool: str) -> None:
    res = run_tool([tool, "--no-such-flag"])
    assert res.returncode == 1
    assert res.stderr.count("error:") == 1, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--world-size", "0"], "lancet-opt: error: argument --world-size: must be >= 1, got 0"),
        (
            ["--overlap-slowdown", "abc"],
            "lancet-opt: error: argument --overlap-slowdown: invalid float value: 'abc'",
        ),
        (["--no-such-flag"], "lancet-opt: error: unrecognized arguments: --no-such-flag"),
    ],
)
def test_lancet_opt_flag_errors_are_one_line(
    flags: list[str], expected: str, tmp_path: Path
) -> None:
    src = tmp_path / "good.mlir"
    src.write_text(GOOD)
    res = run_tool(["lancet-opt", str(src), *flags])
    assert res.returncode == 1
    assert res.stderr == expected + "\n"
