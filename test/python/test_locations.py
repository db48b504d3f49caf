"""Error lines about one op name its `file:line:col` and SSA name (issue 20 item 3), and
`lancet-profile show --limit` bounds what it prints (item 8). Each test failed before the fix
(the verifier's line named the file alone; show printed every key's statistics)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from helpers import make_context
from xdsl.utils.exceptions import VerifyException

from lancet_mlir.support.errors import OpError
from lancet_mlir.support.locations import LocatingParser, located_message, op_label, where

TWO_A2A = """builtin.module attributes {lancet.world_size = 4 : i64} {
  func.func @f(%a: tensor<8x16x256xf32>, %b: tensor<8x16x256xf32>) -> (tensor<8x16x256xf32>, tensor<2x64x256xf32>) {
    %x = comm.all_to_all %a : (tensor<8x16x256xf32>) -> tensor<8x16x256xf32>
    %y = comm.all_to_all %b concat 1 : (tensor<8x16x256xf32>) -> tensor<2x64x256xf32>
    func.return %x, %y : tensor<8x16x256xf32>, tensor<2x64x256xf32>
  }
}
"""


def _parse(text: str, name: str = "m.mlir"):
    return LocatingParser(make_context(), text, name).parse_module()


def test_a_verifier_error_is_placed_at_the_failing_op() -> None:
    bad = TWO_A2A.replace("tensor<2x64x256xf32>", "tensor<2x16x1024xf32>")
    module = _parse(bad)
    with pytest.raises(VerifyException) as info:
        module.verify()
    assert located_message(info.value, "m.mlir", module) == (
        "m.mlir:4:5: %y = comm.all_to_all: result #0 shape [2, 16, 1024] does not match "
        "expected [2, 64, 256]"
    )


def test_a_pass_error_about_an_op_is_placed_at_it() -> None:
    module = _parse(TWO_A2A)
    x = next(op for op in module.walk() if op.name == "comm.all_to_all")
    assert where(x) == "m.mlir:3:5"
    assert op_label(x) == "%x = comm.all_to_all"
    assert located_message(OpError("no stream left", x), "m.mlir") == (
        "m.mlir:3:5: %x = comm.all_to_all: no stream left"
    )
    # a message that names the SSA value already gets the place alone
    assert located_message(OpError("'comm.all_to_all' reads %x twice", x), "m.mlir") == (
        "m.mlir:3:5: 'comm.all_to_all' reads %x twice"
    )
    # an op a pass created has no span: the file name alone
    clone = x.clone()
    assert located_message(OpError("boom", clone), "m.mlir") == "m.mlir: boom"
    assert located_message(ValueError("whole module"), "m.mlir") == "m.mlir: whole module"


def test_show_limit_bounds_the_rows_and_the_statistics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from lancet_mlir.tools.lancet_profile import cmd_show

    monkeypatch.setenv("COLUMNS", "200")
    entries = {f"comp.k{i};T<{i}xf32>,|T<{i}xf32>": {"mean_us": float(i), "std_us": 0.0,
                                                     "min_us": float(i), "max_us": float(i),
                                                     "count": 3} for i in range(1, 7)}  # fmt: skip
    stats = {
        k: {"median_us": e["mean_us"], "spread": 0.0, "rejected": 0} for k, e in entries.items()
    }
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps(
            {
                "format": "lancet-profile",
                "version": 1,
                "entries": entries,
                "metadata": {"key_stats": stats, "backend": "cpu"},
            }
        )
    )
    cmd_show(argparse.Namespace(input=str(path), sort="key", limit=2, device=None, gpu=None))
    out = capsys.readouterr().out
    assert f"{path}: 6 entries (showing 2)" in out
    assert "comp.k1;" in out
    assert "comp.k2;" in out
    assert "comp.k3;" not in out  # the old metadata line printed every key's statistics
    assert "key_stats" not in out
    assert "backend=cpu" in out
