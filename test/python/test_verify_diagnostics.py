"""lancet-opt --verify-diagnostics with mlir-opt's meaning (issue #12 item 4): expected-*
annotations are checked, a mismatch exits 1 and says which; passes raise located
PassFailedExceptions that xdsl-opt prints as one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_tool
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir.graph.rewrite import ScheduleError, check_dominance
from lancet_mlir.tools.diagnostics import Expectation, parse_expectations
from lancet_mlir.tools.lancet_opt import main

BAD_SHAPE = """%x = "test.op"() : () -> tensor<8xf32>
%r = comm.allreduce %x : (tensor<8xf32>) -> tensor<4xf32>
"""
USE_BEFORE_DEF = """func.func @f(%a: tensor<8xf32>) -> tensor<8xf32> {
  %y = comp.add %r, %a : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %r = comm.allreduce %a : (tensor<8xf32>) -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}
"""
SHAPE_MSG = "comm.allreduce: result #0 shape [4] must equal operand shape [8]"


def opt(tmp_path: Path, text: str, *flags: str,
        capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:  # fmt: skip
    src = tmp_path / "in.mlir"
    src.write_text(text)
    with pytest.raises(SystemExit) as info:
        main([str(src), "--verify-diagnostics", *flags])
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err.replace(str(src), "in.mlir")


def test_annotation_forms_name_the_right_lines() -> None:
    text = "\n".join([
        "// expected-error {{a}}",          # line 1: its own line
        "// expected-error@+2 {{b}}",       # line 2 -> 4
        "// expected-warning@-1 {{c}}",     # line 3 -> 2
        "// expected-note@above {{d}} // expected-remark@below {{e}}",  # line 4 -> 3 and 5
        "// expected-error@unknown {{f g}}",
    ])  # fmt: skip
    assert parse_expectations(text, line_offset=10) == [
        Expectation("error", 11, "a"), Expectation("error", 14, "b"),
        Expectation("warning", 12, "c"), Expectation("note", 13, "d"),
        Expectation("remark", 15, "e"), Expectation("error", 0, "f g"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "annotated",
    [
        BAD_SHAPE.replace("%r =", "// expected-error@+1 {{shape [4] must equal}}\n%r ="),
        BAD_SHAPE + f"// expected-error@-1 {{{{{SHAPE_MSG}}}}}\n",
        BAD_SHAPE + "// expected-error@above {{must equal operand}}\n",
        BAD_SHAPE.replace("tensor<4xf32>\n", "tensor<4xf32> // expected-error {{[8]}}\n"),
        # mlir-opt's spellings that used to be skipped silently: a space before `@`, `-re`
        BAD_SHAPE + "// expected-error @-1 {{must equal operand}}\n",
        BAD_SHAPE + "// expected-error @ -1 {{must equal operand}}\n",
        BAD_SHAPE + "// expected-error-re@-1 {{shape [{{[0-9]+}}] must equal operand shape [8]}}\n",
    ],
)
def test_matching_expectation_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], annotated: str
) -> None:
    assert opt(tmp_path, annotated, capsys=capsys) == (0, "", "")


@pytest.mark.parametrize(
    ("annotated", "problems"),
    [
        # wrong text: the real error is unexpected and the annotation unmet
        (
            BAD_SHAPE + "// expected-error@-1 {{shape [5]}}\n",
            [
                f"in.mlir:2: unexpected error: {SHAPE_MSG}",
                'in.mlir:2: expected error "shape [5]" was not produced',
            ],
        ),
        # right text, wrong line
        (
            BAD_SHAPE + "// expected-error@-2 {{shape [4]}}\n",
            [
                f"in.mlir:2: unexpected error: {SHAPE_MSG}",
                'in.mlir:1: expected error "shape [4]" was not produced',
            ],
        ),
        # wrong kind
        (
            BAD_SHAPE + "// expected-warning@-1 {{shape [4]}}\n",
            [
                f"in.mlir:2: unexpected error: {SHAPE_MSG}",
                'in.mlir:2: expected warning "shape [4]" was not produced',
            ],
        ),
        # no annotation at all
        (BAD_SHAPE, [f"in.mlir:2: unexpected error: {SHAPE_MSG}"]),
        # a pattern that does not match (the literal parts are not patterns: `[4]` is text)
        (
            BAD_SHAPE + "// expected-error-re@-1 {{shape [4] must equal {{[0-9]+}} shape}}\n",
            [
                f"in.mlir:2: unexpected error: {SHAPE_MSG}",
                'in.mlir:2: expected error "shape [4] must equal {{[0-9]+}} shape" was not '
                "produced",
            ],
        ),
        # a `-re` or spaced annotation on valid IR is unmet too (both were skipped)
        (
            '%x = "test.op"() : () -> tensor<8xf32>  // expected-error @+0 {{boom}}\n'
            "// expected-error-re {{bo{{o+}}m}}\n",
            [
                'in.mlir:1: expected error "boom" was not produced',
                'in.mlir:2: expected error "bo{{o+}}m" was not produced',
            ],
        ),
        # an annotation on valid IR (it used to pass silently)
        (
            '%x = "test.op"() : () -> tensor<8xf32>  // expected-error {{boom}}\n',
            ['in.mlir:1: expected error "boom" was not produced'],
        ),
    ],
)
def test_mismatch_exits_1_and_says_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], annotated: str, problems: list[str]
) -> None:
    code, out, err = opt(tmp_path, annotated, capsys=capsys)
    assert code == 1
    assert err.splitlines() == [f"lancet-opt: error: {p}" for p in problems]


def test_chunks_keep_file_lines_and_mismatch_writes_no_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (BAD_SHAPE + f"// expected-error@-1 {{{{{SHAPE_MSG}}}}}\n// -----\n"
            + BAD_SHAPE + "// -----\n" + '%ok = "test.op"() : () -> tensor<8xf32>\n')  # fmt: skip
    out_file = tmp_path / "out.mlir"
    code, out, err = opt(tmp_path, text, "--split-input-file", "-o", str(out_file),
                         capsys=capsys)  # fmt: skip
    assert code == 1
    # the second chunk's op is on line 6 of the file, not line 2 of its chunk
    assert err.splitlines() == [f"lancet-opt: error: in.mlir:6: unexpected error: {SHAPE_MSG}"]
    assert not out_file.exists()


def test_parse_error_and_pass_error_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parse_bad = '%x = "test.op"() : () -> tensor<8xf32>\n%r = comm.allreduce %x reduce mean : (tensor<8xf32>) -> tensor<8xf32>\n'
    code, _, err = opt(tmp_path, parse_bad, capsys=capsys)
    assert code == 1
    assert err.startswith("lancet-opt: error: in.mlir:2: unexpected error: Expected `sum`")
    annotated = USE_BEFORE_DEF.replace(
        "  %y =",
        "  // expected-error@+1 {{'comp.add' uses a result of 'comm.allreduce' (%r)}}\n  %y =",
    )
    assert opt(tmp_path, annotated, "-p", "data-parallel-schedule", capsys=capsys) == (0, "", "")
    code, _, err = opt(tmp_path, USE_BEFORE_DEF, "-p", "data-parallel-schedule", capsys=capsys)
    assert err == ("lancet-opt: error: in.mlir:2: unexpected error: 'comp.add' uses a result "
                   "of 'comm.allreduce' (%r) before its definition\n")  # fmt: skip


def test_schedule_error_is_a_located_pass_failure() -> None:
    from helpers import parse

    module = parse(
        USE_BEFORE_DEF.replace(
            "(tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>\n",
            '(tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32> loc("model.mlir":7:3)\n',
        )
    )
    with pytest.raises(ScheduleError) as info:
        check_dominance(module)
    assert isinstance(info.value, PassFailedException)
    assert isinstance(info.value, ValueError)  # callers that catch ValueError keep working
    assert info.value.op is not None
    assert info.value.op.name == "comp.add"
    assert str(info.value) == (
        "model.mlir:7:3: 'comp.add' uses a result of 'comm.allreduce' (%r) before its definition"
    )


def test_plain_xdsl_opt_prints_one_message(tmp_path: Path) -> None:
    src = tmp_path / "ubd.mlir"
    src.write_text(USE_BEFORE_DEF)
    res = run_tool(["xdsl-opt", str(src), "-p", "data-parallel-schedule", "--verify-diagnostics"])
    assert res.returncode == 0  # xDSL's meaning: print the diagnostic, exit 0
    assert res.stdout == "'comp.add' uses a result of 'comm.allreduce' (%r) before its definition\n"


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("// expected-error@+1 boom", "cannot read the annotation '// expected-error@+1 boom'"),
        ("// expected-error {{boom", "the annotation's {{text}} has no closing }}"),
        ("// expected-error-re {{a{{(}}b}}", "expected-...-re {{a{{(}}b}}: missing ), "),
    ],
)
def test_an_annotation_that_cannot_be_read_is_an_error_not_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, why: str
) -> None:
    code, out, err = opt(tmp_path, BAD_SHAPE + line + "\n", capsys=capsys)
    assert (code, out) == (1, "")
    assert err.startswith(f"lancet-opt: error: in.mlir: line 3: {why}")
    assert len(err.splitlines()) == 1


def test_prose_that_mentions_an_annotation_stays_a_comment() -> None:
    text = "// expected-error lines below name the errors\n// see expected-error@+1 in the docs\n"
    assert parse_expectations(text) == []
    # as in mlir-opt, an annotation may follow other words of the comment
    assert parse_expectations("// TODO: expected-error@+1 {{x}}\n") == [
        Expectation("error", 2, "x")
    ]
