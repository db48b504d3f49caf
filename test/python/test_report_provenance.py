"""The report says how it was costed (issue #12 item 7): versions, input files with content
hashes, per-source op counts; trace events name their time source; `lancet-opt -v`."""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path

from helpers import parse, run_tool

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.cost.time_source import count_sources, time_source

# one op per source: attribute (time_us), profile (the key in PROFILE), table (h100 ships an
# allreduce table), roofline (a matmul with FLOPs), zero (an unknown op)
STEP = """func.func @f(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %a = comp.scale %x {alpha = 2.0 : f64, lancet.time_us = 7.0 : f64} : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %b = comp.gelu %a : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %c = comm.allreduce %b : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %d = comp.matmul %c, %c : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %e = "test.op"(%d) : (tensor<64x64xf32>) -> tensor<64x64xf32>
  func.return %e : tensor<64x64xf32>
}
"""
GELU_KEY = "comp.gelu;T<64x64xf32>,|T<64x64xf32>"


def _profile(tmp_path: Path) -> Path:
    path = tmp_path / "prof.json"
    path.write_text(json.dumps({
        "format": "lancet-profile", "version": 1, "metadata": {"device": "h100"},
        "entries": {GELU_KEY: {"mean_us": 11.0, "count": 1, "std_us": 0.0, "min_us": 11.0,
                               "max_us": 11.0}},
    }))  # fmt: skip
    return path


def test_time_source_of_each_op(tmp_path: Path) -> None:
    module = parse(STEP)
    ops = [op for op in module.walk() if op.parent_block() is not None
           and op.name not in ("func.func", "func.return")]  # fmt: skip
    model = CostModel.from_config(CostConfig(profiles=(str(_profile(tmp_path)),)))
    assert [time_source(model, op) for op in ops] == [
        "attribute",
        "profile",
        "table",
        "roofline",
        "zero",
    ]
    assert model.op_time_us(ops[1]) == 11.0  # the profile really is what the model uses
    assert count_sources(model, ops) == {"attribute": 1, "profile": 1, "table": 1,
                                         "alpha-beta": 0, "roofline": 1, "zero": 1}  # fmt: skip


def test_report_and_trace_say_how_they_were_costed(tmp_path: Path) -> None:
    src, prof = tmp_path / "step.mlir", _profile(tmp_path)
    src.write_text(STEP)
    report, trace = tmp_path / "r.json", tmp_path / "t.json"
    res = run_tool(
        [
            "lancet-opt",
            str(src),
            "-p",
            "simulate",
            "--profile",
            str(prof),
            "--report",
            str(report),
            "--timeline",
            str(trace),
            "-o",
            str(tmp_path / "o.mlir"),
        ]
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(report.read_text())
    prov = doc["provenance"]
    assert prov["lancet_mlir_version"] == metadata.version("lancet-mlir")
    assert prov["xdsl_version"] == "0.74.0"
    assert prov["device"] == "h100"
    assert prov["profiles"] == [
        {"path": str(prof), "sha256": "sha256:" + hashlib.sha256(prof.read_bytes()).hexdigest()}
    ]
    assert prov["comm_tables"] == []
    [shipped] = prov["device_comm_table"]
    assert shipped["path"].endswith("comm_h100.csv")
    assert (
        shipped["sha256"]
        == "sha256:" + hashlib.sha256(Path(shipped["path"]).read_bytes()).hexdigest()
    )
    # func.return counts as an op of the block: zero-cost, from the roofline (0 FLOPs)
    counts = doc["time_sources"]
    assert counts["attribute"] == 1
    assert counts["profile"] == 1
    assert counts["table"] == 1
    assert counts["zero"] == 1
    events = {
        e["name"]: e["args"]["time_source"]
        for e in json.loads(trace.read_text())["traceEvents"]
        if e["ph"] == "X"
    }
    assert events["comp.scale %a"] == "attribute"
    assert events["comp.gelu %b"] == "profile"
    assert events["comm.allreduce %c"] == "table"
    assert events["comp.matmul %d"] == "roofline"


def test_version_names_lancet_mlir() -> None:
    res = run_tool(["lancet-opt", "-v"])
    assert res.returncode == 0
    assert res.stdout.strip() == (
        f"lancet-opt (lancet-mlir {metadata.version('lancet-mlir')}) built on xdsl 0.74.0"
    )
