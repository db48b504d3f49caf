"""`support/printing.py`: FastPrinter writes what xDSL's Printer writes, byte for byte, on
partitioned models, imported StableHLO, literals that need escapes, the generic format, and
through lancet-opt."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import parse, run_pipeline
from xdsl.printer import Printer

from lancet_mlir.models.gpt2_moe import GPT2MoEConfig, build_gpt2_moe
from lancet_mlir.support.printing import FastPrinter

DATA = Path(__file__).resolve().parents[1] / "data"


def both(module, **options: bool) -> tuple[str, str]:
    texts = []
    for cls in (Printer, FastPrinter):
        buf = io.StringIO()
        cls(stream=buf, **options).print_op(module)
        texts.append(buf.getvalue())
    return texts[0], texts[1]


@pytest.mark.parametrize("generic", [False, True])
def test_a_partitioned_model_prints_the_same(generic: bool) -> None:
    module = build_gpt2_moe(GPT2MoEConfig(layers=2, hidden=32, heads=2, seq=16, batch=2,
                                          world_size=4, vocab=64, experts_per_rank=2))  # fmt: skip
    module = run_pipeline(module, "moe-partition{axis=token parts=2}")
    plain, fast = both(module, print_generic_format=generic)
    assert "lancet.origin" in fast
    assert fast == plain


def test_literals_that_need_escapes_print_the_same() -> None:
    text = r"""
    "test.op"() {a = "plain", b = "quo\"te", c = "back\\slash", d = "tab\09x", e = "é",
                 f = "", g = "new\0Aline"} : () -> ()
    """
    plain, fast = both(parse(text))
    assert fast == plain
    for escaped in (r"quo\22te", r"back\\slash", r"new\0Aline"):
        assert escaped in fast


def test_imported_stablehlo_prints_the_same() -> None:
    source = sorted((DATA / "stablehlo").glob("*.mlir"))[0]
    module = run_pipeline(parse(source.read_text()), "import-stablehlo")
    plain, fast = both(module)
    assert fast == plain


def test_lancet_opt_writes_what_xdsl_prints(tmp_path: Path) -> None:
    """lancet-opt's output (FastMLIRTarget) is xDSL's printer's text of the same module."""
    source = tmp_path / "m.mlir"
    module = build_gpt2_moe(GPT2MoEConfig(layers=2, hidden=32, heads=2, seq=16, batch=2,
                                          world_size=4, vocab=64, experts_per_rank=2))  # fmt: skip
    buf = io.StringIO()
    Printer(stream=buf).print_op(module)
    source.write_text(buf.getvalue())
    opt = Path(sys.executable).parent / "lancet-opt"
    out = subprocess.run([str(opt), str(source)], check=True, capture_output=True, text=True)
    assert out.stdout == buf.getvalue() + "\n\n"
