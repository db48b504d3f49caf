"""`lancet-schedule --verbose` says which model measured each stage line (review 20 of issue #19,
finding 9): the pipeline's stages run in its internal model (no launch overhead, one comm
stream, no overlap slowdown), so under `--launch-overhead-us` their makespans are labelled as
without it, and a last `kept` line gives the output's makespan under the block's options, which
is what `simulate` gives for the output.

The module is the data-only module of test/data/traces/whatif_scale.json (+ its execution
trace): relu 30, gemm 40, the all-reduce of the gemm 40 (behind its payload, which takes no
launch), an add of both 10; lancet-schedule runs the gemm first.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import run_pipeline
from xdsl.dialects.builtin import FloatAttr, f64

from lancet_mlir import attrs
from lancet_mlir.importers.traces import load_steps
from lancet_mlir.importers.traces.build import build_module

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


def _module(overhead: float | None):
    steps = load_steps([str(DATA / "whatif_scale.json")], et=[str(DATA / "whatif_scale_et.json")])
    module = build_module(steps, data_only=True)
    if overhead is not None:
        module.attributes[attrs.LAUNCH_OVERHEAD_US] = FloatAttr(overhead, f64)
    return module


def _lines(caplog: pytest.LogCaptureFixture, overhead: float | None) -> tuple[list[str], float]:
    module = _module(overhead)
    with caplog.at_level(logging.INFO, logger="lancet_mlir.schedule"):
        run_pipeline(module, "lancet-schedule")
    lines = [r.getMessage() for r in caplog.records if r.name == "lancet_mlir.schedule"]
    run_pipeline(module, "simulate")  # under the module's launch overhead
    fn = next(iter(module.body.block.ops))
    return lines, fn.attributes[attrs.MAKESPAN_US].value.data  # type: ignore[union-attr]


def test_stage_lines_are_labelled_without_the_launch_overhead(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lines, simulated = _lines(caplog, 5.0)
    note = " (without the 5 us launch overhead)"
    # internal model: input relu 0-30, gemm 30-70, all-reduce 70-110, add 110-120 (exposed
    # 40); searched: gemm 0-40, relu 40-70 beside the all-reduce 40-80, add 80-90 (exposed 10)
    assert lines == [
        f"lancet-schedule @rank0: input: makespan 120.0 us, exposed comm 40.0 us{note}",
        f"lancet-schedule @rank0: list schedule: makespan 120.0 us, exposed comm 40.0 us{note}",
        f"lancet-schedule @rank0: dw placement: makespan 120.0 us, exposed comm 40.0 us{note}",
        f"lancet-schedule @rank0: local search: makespan 90.0 us, exposed comm 10.0 us{note}",
        f"lancet-schedule @rank0: fusion: makespan 90.0 us, exposed comm 10.0 us{note}",
        # 5 us per launch, in block order: gemm launched at 5 runs 5-45; relu (10) 45-75; the
        # all-reduce (15) 45-85; add (20) 85-95. Exposed: 75-85
        "lancet-schedule @rank0: kept: makespan 95.0 us, exposed comm 10.0 us "
        "(with the 5 us launch overhead)",
    ]
    assert simulated == 95.0  # what the kept line says


def test_no_label_when_the_models_agree(caplog: pytest.LogCaptureFixture) -> None:
    lines, simulated = _lines(caplog, None)
    assert lines[-1] == "lancet-schedule @rank0: fusion: makespan 90.0 us, exposed comm 10.0 us"
    assert len(lines) == 5
    assert not any("launch overhead" in line for line in lines)
    assert simulated == 90.0
