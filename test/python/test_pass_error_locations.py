"""Pass errors about one op carry the op, and tools place them (issue 20 item 3).

The library keeps its messages (xdsl-opt and Python callers see them unchanged) and adds the
op (`exc.op`); `tool_message` turns that into `file:line:col: %name = op: message` with the
result names as the input wrote them. Each test failed before the change (pass errors carried
no op; numbered results showed as `%?`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import make_context
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir.dialects.comm import AllToAllOp
from lancet_mlir.dialects.comp import MoeGateOp
from lancet_mlir.passes.moe_partition import MoePartitionPass
from lancet_mlir.passes.tutel_pipeline import TutelPipelinePass
from lancet_mlir.support.errors import UserError, pass_failure
from lancet_mlir.support.locations import LocatingParser, op_label, result_names, tool_message

BAD = Path(__file__).resolve().parents[1] / "data" / "bad"


def _parse(text: str, name: str = "m.mlir") -> ModuleOp:
    return LocatingParser(make_context(), text, name).parse_module()


def _layer() -> ModuleOp:
    return _parse((BAD / "moe_layer.mlir").read_text(), "moe_layer.mlir")


def test_tutel_error_carries_the_entering_all_to_all_and_keeps_its_message() -> None:
    module = _layer()
    with pytest.raises(PassFailedException) as info:
        TutelPipelinePass(degree=3).apply(Context(), module)
    assert str(info.value) == (
        "tutel-pipeline: capacity 4 of the expert block entered by 'expert_in' is not "
        "divisible by degree 3"
    )
    op = getattr(info.value, "op", None)
    assert isinstance(op, AllToAllOp)
    assert op.results[0].name_hint == "expert_in"
    assert tool_message(info.value, "moe_layer.mlir", module) == (
        "moe_layer.mlir:7:5: %expert_in = comm.all_to_all: tutel-pipeline: capacity 4 of the "
        "expert block entered by 'expert_in' is not divisible by degree 3"
    )


def test_token_error_without_a_closer_op_is_placed_at_the_gate() -> None:
    module = _parse((BAD / "moe_top2.mlir").read_text(), "moe_top2.mlir")
    with pytest.raises(PassFailedException) as info:
        MoePartitionPass(axis="token", parts=2).apply(Context(), module)
    assert isinstance(getattr(info.value, "op", None), MoeGateOp)
    assert tool_message(info.value, "moe_top2.mlir", module).startswith(
        "moe_top2.mlir:5:5: %combine, %dispatch = comp.moe_gate: moe-partition: token parts "
        "need the switch gate"
    )


def test_pass_failure_drops_the_op_name_the_label_repeats() -> None:
    module = _parse(
        "func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n"
        "  %42 = comm.allreduce %x : (tensor<8xf32>) -> tensor<8xf32>\n"
        "  func.return %42 : tensor<8xf32>\n}\n"
    )
    op = next(o for o in module.walk() if o.name == "comm.allreduce")
    exc = pass_failure("simulate", UserError("comm.allreduce: lancet.fill is bad", op=op))
    assert str(exc) == "simulate: comm.allreduce: lancet.fill is bad"  # xdsl-opt's line
    assert tool_message(exc, "m.mlir", module) == (
        "m.mlir:2:3: %42 = comm.allreduce: simulate: lancet.fill is bad"
    )


def test_a_user_error_naming_no_op_of_the_file_stays_as_it_is() -> None:
    module = _layer()
    assert tool_message(UserError("--device: unknown device 'tpu'"), "m.mlir", module) == (
        "--device: unknown device 'tpu'"
    )
    created = AllToAllOp.create(attributes={"x": StringAttr("y")})  # made by a pass: no span
    assert tool_message(UserError("comm.all_to_all: bad", op=created), "m.mlir", module) == (
        "comm.all_to_all: bad"
    )


def test_result_names_as_written() -> None:
    module = _parse(
        "func.func @f(%x: tensor<4xf32>) {\n"
        '  %0, %a1 = "test.op"(%x) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)\n'
        '  %g:2 = "test.op"(%x) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)\n'
        '  "test.op"(%x) : (tensor<4xf32>) -> ()\n'
        "  func.return\n}\n"
    )
    ops = [o for o in module.walk() if o.name == "test.op"]
    assert [result_names(o) for o in ops] == [["%0", "%a1"], ["%g:2"], []]
    assert [op_label(o) for o in ops] == ["%0, %a1 = test.op", "%g:2 = test.op", "test.op"]


NAMES = st.from_regex(r"[0-9]{1,4}|[a-z_$.][a-z0-9_$.-]{0,5}", fullmatch=True)
"""SSA result names MLIR allows: a number, or an identifier (letters, digits, `_$.-`)."""


@settings(max_examples=40, deadline=None)
@given(st.lists(NAMES, min_size=1, max_size=3, unique=True))
def test_every_result_list_is_named_as_written(names: list[str]) -> None:
    results = ", ".join(f"%{n}" for n in names)
    types = ", ".join("tensor<4xf32>" for _ in names)
    module = _parse(
        "func.func @f(%arg: tensor<4xf32>) {\n"
        f'  {results} = "test.op"(%arg) : (tensor<4xf32>) -> ({types})\n'
        "  func.return\n}\n"
    )
    op = next(o for o in module.walk() if o.name == "test.op")
    assert op_label(op) == f"{results} = test.op"


def test_a_failed_run_leaves_no_warning_for_the_next_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """moe-partition costs the unknown `foo.act` at 0 and then fails; the next lancet-opt run
    in the same process (an embedding, the bad-input corpus) printed the failed run's
    `no time for 1 op kind(s) ... foo.act` warning before the fix."""
    from lancet_mlir.tools.lancet_opt import main

    with pytest.raises(SystemExit):
        main(["--allow-unregistered-dialect", str(BAD / "moe_unknown_op.mlir"),
              "-p", "moe-partition{axis=token parts=2}"])  # fmt: skip
    assert capsys.readouterr().err == (
        f"lancet-opt: error: {BAD}/moe_unknown_op.mlir:9:5: %act = foo.act: moe-partition: "
        "token parts: the registry has no row-wise rule for 'act'\n"
    )
    with pytest.raises(SystemExit) as info:
        main([str(BAD / "ok.mlir"), "-p", "simulate"])
    assert info.value.code == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("attribute", "read", "message"),
    [
        ("lancet.fill = 2.0 : f64", "fill", "lancet.fill must be a number in (0, 1]"),
        ('lancet.time_us = "x"', "time", 'lancet.time_us must be a finite number >= 0, got "x"'),
        ("lancet.origin = 3 : i64", "origin", "lancet.origin must be an op key string"),
        ('lancet.origin = "k", lancet.share = 0.0 : f64', "origin",
         "lancet.share must be a number in (0, 1]"),
        ("lancet.origin_bytes = -1.0 : f64", "origin_bytes", "lancet.origin_bytes must be a number > 0"),
        ("capacity = 1.5 : f64", "hlo_int", "'capacity' must be an integer"),
    ],
)  # fmt: skip
def test_a_bad_cost_attribute_error_carries_its_op(attribute: str, read: str, message: str) -> None:
    """Every cost attribute reader's UserError is about the op (placed at line 2)."""
    from lancet_mlir.cost.hlo_costs import hlo_int
    from lancet_mlir.cost.roofline import numeric_attr
    from lancet_mlir.cost.sources import op_origin, op_origin_bytes
    from lancet_mlir.graph.fill import op_fill

    readers = {
        "fill": op_fill, "time": lambda o: numeric_attr(o, "lancet.time_us"),
        "origin": op_origin, "origin_bytes": op_origin_bytes,
        "hlo_int": lambda o: hlo_int(o, "capacity"),
    }  # fmt: skip
    module = _parse(
        "func.func @f(%x: tensor<4xf32>) {\n"
        f'  %7 = "test.op"(%x) {{{attribute}}} : (tensor<4xf32>) -> tensor<4xf32>\n'
        "  func.return\n}\n"
    )
    op = next(o for o in module.walk() if o.name == "test.op")
    with pytest.raises(UserError) as info:
        readers[read](op)
    assert info.value.op is op
    line = tool_message(info.value, "m.mlir", module)
    assert line.startswith("m.mlir:2:3: %7 = test.op: ")
    assert message in line


def test_verify_diagnostics_places_an_error_about_a_candidate_clone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """lancet-schedule costs its partition candidates on clones of the module; the error
    about the clone of `%act` is expected on `%act`'s line (before: at no line)."""
    from lancet_mlir.tools.lancet_opt import main

    text = (
        (BAD / "moe_bad_time.mlir")
        .read_text()
        .replace(
            "    %act = comp.gelu",
            "    // expected-error@+1 {{lancet.time_us must be a finite number >= 0}}\n"
            "    %act = comp.gelu",
        )
    )
    src = tmp_path / "expect.mlir"
    src.write_text(text)
    with pytest.raises(SystemExit) as info:
        main([str(src), "-p", "lancet-schedule", "--verify-diagnostics"])
    assert (info.value.code, capsys.readouterr().err) == (0, "")
