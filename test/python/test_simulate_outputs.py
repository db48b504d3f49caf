"""Outputs as a pass (issue 17, deliverable 6; issue 20 item 5): `simulate{report=...
timeline=... gantt=...}` writes what lancet-opt's `--report/--timeline/--gantt` write, in any
pipeline; `xdsl-opt` and `lancet-opt` give the same IR and reports for every pass; picture
formats by suffix; one file for two outputs refused; `--gantt-window` warnings."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import BIN, parse, run_pipeline, to_text
from xdsl.utils.exceptions import PassFailedException
from xdsl.xdsl_opt_main import xDSLOptMain

from lancet_mlir.models.gpt2_moe import GPT2MoEConfig, build_gpt2_moe
from lancet_mlir.passes import get_all_passes
from lancet_mlir.tools.lancet_opt import LancetOptMain

T = "tensor<64xf32>"
STEP = f"""
func.func @step(%x: {T}) -> ({T}, {T}) {{
  %a = "test.op"(%x) {{lancet.time_us = 3.0 : f64}} : ({T}) -> {T}
  %r = comm.allreduce %a {{lancet.time_us = 5.0 : f64}} : ({T}) -> {T}
  %u = "test.op"(%r) {{lancet.time_us = 2.0 : f64}} : ({T}) -> {T}
  %b = "test.op"(%x) {{lancet.time_us = 4.0 : f64}} : ({T}) -> {T}
  func.return %u, %b : {T}, {T}
}}
"""
INVOCATION_KEYS = ("input", "pipeline")  # what only lancet-opt knows (xdsl-opt: null)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = GPT2MoEConfig(layers=1, hidden=32, heads=2, seq=8, batch=2, world_size=2, vocab=32)
    path = tmp_path_factory.mktemp("model") / "tiny.mlir"
    path.write_text(to_text(build_gpt2_moe(cfg)))
    return path


def _xdsl_opt(args: list[str]) -> None:
    xDSLOptMain(args=args).run()


def _lancet_opt(args: list[str]) -> None:
    LancetOptMain(args=args).run()


def test_simulate_pass_writes_the_report_with_hand_computed_numbers(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    module = run_pipeline(parse(STEP), f'simulate{{annotate=false report="{report}"}}')
    assert "lancet.start_us" not in to_text(module)  # annotate=false leaves the IR alone
    data = json.loads(report.read_text())
    # a [0,3], r [3,8] exposed, u [8,10], b [10,14]
    assert (data["makespan_us"], data["exposed_comm_us"], data["num_collectives"]) == (14.0, 5.0, 1)
    assert data["costing"]["pass"] == "simulate"  # the cost options only, none given
    assert (data["input"], data["pipeline"]) == (None, None)


# every pass with the options it needs on the tiny model (moe-partition splits the capacity)
PASSES = {name: name for name in get_all_passes() if name != "simulate"}
PASSES["moe-partition"] = "moe-partition{parts=2}"


@pytest.mark.parametrize("spec", sorted(PASSES.values()))
def test_xdsl_opt_and_lancet_opt_agree_for_every_pass(
    model: Path, tmp_path: Path, spec: str
) -> None:
    x_ir, x_report = tmp_path / "x.mlir", tmp_path / "x.json"
    l_ir, l_report = tmp_path / "l.mlir", tmp_path / "l.json"
    _xdsl_opt([str(model), "-p", f'{spec},simulate{{annotate=false report="{x_report}"}}',
               "-o", str(x_ir)])  # fmt: skip
    _lancet_opt([str(model), "-p", spec, "--report", str(l_report), "-o", str(l_ir)])
    assert x_ir.read_bytes() == l_ir.read_bytes()
    x, lancet = json.loads(x_report.read_text()), json.loads(l_report.read_text())
    assert (lancet["input"], lancet["pipeline"]) == (str(model), spec)
    for key in INVOCATION_KEYS:
        del x[key], lancet[key]
    assert x == lancet


def test_flags_and_pass_write_the_same_bytes(model: Path, tmp_path: Path) -> None:
    a = {k: tmp_path / f"a.{k}" for k in ("json", "trace", "png")}
    b = {k: tmp_path / f"b.{k}" for k in ("json", "trace", "png")}
    _lancet_opt([str(model), "-p", "lancet-schedule", "--report", str(a["json"]), "--timeline",
                 str(a["trace"]), "--gantt", str(a["png"]), "-o", str(tmp_path / "a.mlir")])  # fmt: skip
    spec = (f'lancet-schedule,simulate{{annotate=false report="{b["json"]}" '
            f'timeline="{b["trace"]}" gantt="{b["png"]}"}}')  # fmt: skip
    _lancet_opt([str(model), "-p", spec, "-o", str(tmp_path / "b.mlir")])
    assert a["trace"].read_bytes() == b["trace"].read_bytes()
    ra, rb = json.loads(a["json"].read_text()), json.loads(b["json"].read_text())
    assert rb["pipeline"] == spec
    del ra["pipeline"], rb["pipeline"]
    assert ra == rb
    assert a["png"].read_bytes() == b["png"].read_bytes()


@pytest.mark.parametrize(("suffix", "magic"), [(".png", b"\x89PNG"), (".svg", b"<?xml"),
                                               (".pdf", b"%PDF")])  # fmt: skip
def test_gantt_writes_the_format_its_suffix_names(
    tmp_path: Path, suffix: str, magic: bytes
) -> None:
    picture = tmp_path / f"g{suffix}"
    run_pipeline(parse(STEP), f'simulate{{gantt="{picture}"}}')
    assert picture.read_bytes().startswith(magic)


@pytest.mark.parametrize(("options", "message"), [
    ('gantt="g.jpg"', "simulate: gantt g.jpg: cannot write a '.jpg' picture; use .png, .svg or .pdf"),
    ('report="o.json" timeline="o.json"',
     "simulate: timeline o.json: report writes that file too; give each output its own file"),
    ('report="m.mlir"', "simulate: report m.mlir: writes JSON; refusing a .mlir file name (the input module?)"),
    ('timeline="x/m.MLIR"',
     "simulate: timeline x/m.MLIR: writes JSON; refusing a .mlir file name (the input module?)"),
    ('gantt="g.png" gantt-window="2:x"',
     "simulate: gantt-window '2:x': 'x' is not a time (a number with an optional unit us, ms or s)"),
])  # fmt: skip
def test_bad_output_options_fail_naming_the_option(options: str, message: str) -> None:
    with pytest.raises(PassFailedException) as info:
        run_pipeline(parse(STEP), f"simulate{{{options}}}")
    assert str(info.value) == message


def test_outputs_of_the_pipeline_and_the_flags_name_distinct_files(tmp_path: Path) -> None:
    # an outside review: the pipeline's report was silently replaced by --report's
    model = tmp_path / "m.mlir"
    model.write_text(STEP)
    old = tmp_path / "k.json"
    old.write_text("old")
    for spec, flags, message in (
        (f'simulate{{report="{old}"}},program-order', ["--report", str(old)],
         f"simulate{{report=}} (pass 1) {old}: --report writes that file too"),
        (f'simulate{{report="{old}"}},simulate{{gantt="{tmp_path}/g.png" timeline="{old}"}}', [],
         f"simulate{{timeline=}} (pass 2) {old}: simulate{{report=}} (pass 1) writes that file"),
    ):  # fmt: skip
        proc = subprocess.run([str(BIN / "lancet-opt"), str(model), "-p", spec, *flags, "-o",
                               os.devnull], capture_output=True, text=True, check=False)  # fmt: skip
        assert proc.returncode == 1
        assert proc.stderr.startswith(f"lancet-opt: error: {message}")
        assert len(proc.stderr.splitlines()) == 1
        assert old.read_text() == "old"  # refused before anything ran
    assert not (tmp_path / "g.png").exists()
    # standard output takes one output: the IR by default (the report was lost), or a flag's
    for spec, flags, message in (
        ('simulate{report="-"}', [], "simulate{report=} (pass 1) -: standard output already "
         "carries the IR (-o, default stdout)"),
        ('simulate{report="-"}', ["--report", "-", "-o", os.devnull], "simulate{report=} "
         "(pass 1) -: standard output already carries --report"),
        ('simulate{timeline="-"},simulate{report="-"}', ["-o", os.devnull], "simulate{report=} "
         "(pass 2) -: standard output already carries simulate{timeline=} (pass 1)"),
        # /dev/stdout is standard output too (written through)
        ('simulate{report="/dev/stdout"}', [], "simulate{report=} (pass 1) /dev/stdout: "
         "standard output already carries the IR (-o, default stdout)"),
        ("program-order", ["--report", "/dev/stdout"], "--report /dev/stdout: standard output "
         "already carries the IR (-o, default stdout)"),
    ):  # fmt: skip
        proc = subprocess.run([str(BIN / "lancet-opt"), str(model), "-p", spec, *flags],
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert (proc.returncode, proc.stdout) == (1, "")
        assert proc.stderr.startswith(f"lancet-opt: error: {message}; only one output can go")
    # distinct files (and several to /dev/null) are fine
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _lancet_opt([str(model), "-p", f'simulate{{report="{a}" timeline="{os.devnull}"}}',
                 "--report", str(b), "--timeline", os.devnull, "-o", os.devnull])  # fmt: skip
    assert json.loads(a.read_text())["makespan_us"] == json.loads(b.read_text())["makespan_us"]


def test_xdsl_opt_cannot_replace_its_input_module_with_a_report(tmp_path: Path) -> None:
    module = tmp_path / "m.mlir"
    module.write_text(STEP)
    proc = subprocess.run([str(BIN / "xdsl-opt"), str(module), "-p", f'simulate{{report="{module}"}}',
                           "-o", os.devnull], capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode != 0
    assert "writes JSON; refusing a .mlir file name" in proc.stderr
    assert module.read_text() == STEP


def test_window_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    picture = tmp_path / "g.png"
    run_pipeline(parse(STEP), f'simulate{{gantt="{picture}" gantt-window="20:30"}}')
    run_pipeline(parse(STEP), 'simulate{gantt-window="1:2"}')
    assert capsys.readouterr().err.splitlines() == [
        "simulate: warning: gantt-window '20:30' starts after the end of the timeline "
        "(14 µs): the picture shows no ops",
        "simulate: warning: gantt-window has no effect without gantt",
    ]
    source = tmp_path / "step.mlir"
    source.write_text(STEP)
    _lancet_opt([str(source), "--gantt-window", "1:2", "-o", str(tmp_path / "o.mlir")])
    _lancet_opt([str(source), "--gantt-window", "1ms:", "--gantt", str(picture),
                 "-o", str(tmp_path / "o.mlir")])  # fmt: skip
    assert capsys.readouterr().err.splitlines() == [
        "lancet-opt: warning: --gantt-window has no effect without --gantt or --gantt-compare",
        "lancet-opt: warning: --gantt-window '1ms:' starts after the end of the timeline "
        "(14 µs): the picture shows no ops",
    ]
