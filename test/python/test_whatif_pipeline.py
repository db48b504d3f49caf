"""`lancet-trace whatif --pipeline` (review of issue #19, findings 5 and 10): the pipeline's
saving is measured on the target step's simulated period (last end of step N minus last end
of step N-1: the imported module holds the warm-up step too), not on the module's makespan.
Hand MLIR with hand-computed timelines, and the hand-written two-step trace
test/data/traces/two_steps.json (+ its execution trace)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import parse

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.importers.traces.report import simulated_step_period_us
from lancet_mlir.tools import lancet_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
MODEL = CostModel.from_config(CostConfig())


def _steps_module(target: int) -> str:
    """Step 1: k1 (30 µs) -> r1 (all-reduce, 40 µs measured); step 2: k2 (20) -> r2 (40), as the
    import writes them (a trace.payload before each collective). Timeline: k1 [0,30], k2
    [30,50] on the compute stream, r1 [30,70], r2 [70,110] on the comm stream."""
    kernel = '"trace.kernel"() {{lancet.time_us = {t} : f64, lancet.trace_step = {s} : i64}}'
    lines = []
    for step, (k, t) in enumerate((("k1", 30.0), ("k2", 20.0)), start=1):
        p, r = f"p{step}", f"r{step}"
        lines += [
            f"    %{k} = {kernel.format(t=t, s=step)} : () -> !trace.token",
            f'    %{p} = "trace.payload"(%{k}) {{lancet.time_us = 0.0 : f64}} '
            ": (!trace.token) -> tensor<4096xi8>",
            f"    %{r} = comm.allreduce %{p} {{lancet.time_us = 40.0 : f64, "
            f"lancet.trace_step = {step} : i64}} : (tensor<4096xi8>) -> tensor<4096xi8>",
        ]
    body = "\n".join(lines)
    return (
        "builtin.module attributes {lancet.world_size = 2 : i64} {\n"
        f"  func.func @rank0() attributes {{lancet.trace_step = {target} : i64}} {{\n"
        f"{body}\n    func.return\n  }}\n}}\n"
    )


def test_the_step_period_is_last_end_to_last_end() -> None:
    # target step 2: r2 ends at 110, the last op of step 1 (r1) at 70: 40 µs (makespan 110)
    assert simulated_step_period_us(parse(_steps_module(2)), MODEL) == pytest.approx(40.0)
    # target step 1: no earlier step in the module, from the simulation's start: r1 ends at 70
    assert simulated_step_period_us(parse(_steps_module(1)), MODEL) == pytest.approx(70.0)


def _pipeline_report(tmp_path: Path, *extra: str) -> dict:
    report = tmp_path / "r.json"
    argv = ["whatif", str(DATA / "two_steps.json"), "--et", str(DATA / "two_steps_et.json")]
    with pytest.raises(SystemExit) as info:
        lancet_trace.main([*argv, "--pipeline", "lancet-schedule", *extra, "--report", str(report)])
    assert info.value.code == 0
    return json.loads(report.read_text())


def test_two_step_trace_compares_one_step(tmp_path: Path) -> None:
    # each step: gemm 50, relu 10, add 10, one compute stream in the simulator: 70 µs per step
    # (the module's makespan, both steps, is 140); nothing to overlap, nothing saved
    data = _pipeline_report(tmp_path)
    pipe = data["pipeline"]
    assert pipe["simulated_before_us"] == 70.0
    assert pipe["simulated_after_us"] == 70.0
    assert pipe["saved_us"] == 0.0
    assert pipe["predicted_period_us"] == pipe["replayed_period_us"] == 200.0
