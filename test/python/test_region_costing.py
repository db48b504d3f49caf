"""Ops with regions costed by their bodies (issue 17, deliverable 5): hand MLIR with
hand-computed times, and two JAX programs lowered with Shardy (test/data/stablehlo,
`make_dp_mlp.py`, `make_scan_layers.py`; JAX is not needed here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import parse, run_pipeline, run_tool

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.importers.stablehlo import import_stablehlo
from lancet_mlir.sim.blocks import simulate_module
from lancet_mlir.sim.regions import hlo_while_trips

T = "tensor<64xf32>"
DATA = Path(__file__).resolve().parents[1] / "data" / "stablehlo"


def _op(name: str, us: float, arg: str = "%x") -> str:
    return f'%{name} = "test.op"({arg}) {{lancet.time_us = {us} : f64}} : ({T}) -> {T}'


def _simulate(text: str):
    return simulate_module(parse(text), CostModel.from_config(CostConfig()))


EXECUTE_REGION = f"""
func.func @f(%x: {T}) -> {T} {{
  {_op("a", 1.0)}
  %w = "scf.execute_region"() ({{
    {_op("i", 2.0, "%a")}
    %r = comm.allreduce %i {{lancet.time_us = 4.0 : f64}} : ({T}) -> {T}
    {_op("j", 3.0, "%r")}
    scf.yield %j : {T}
  }}) : () -> {T}
  func.return %w : {T}
}}
"""


def test_execute_region_costs_its_body_and_the_totals_include_it() -> None:
    top, body = _simulate(EXECUTE_REGION)
    # body: i [0,2], r [2,6] (exposed), j [6,9]; the region op then costs 9 after a [0,1]
    assert body.label == "@f/scf.execute_region#0"
    assert body.timeline.makespan_us == 9.0
    assert (body.in_parent, body.runs) == (True, 1)
    assert top.timeline.end == [1.0, 10.0]
    s = top.summary
    assert (s.makespan_us, s.compute_us, s.comm_us, s.exposed_comm_us) == (10.0, 6.0, 4.0, 4.0)
    assert (s.num_ops, s.num_collectives) == (2 + 3, 1)


def _scf_for(lb: str, ub: str, step: str) -> str:
    return f"""
func.func @f(%x: {T}, %n: index) -> {T} {{
  %lb = arith.constant {lb} : index
  %ub = {ub}
  %st = arith.constant {step} : index
  scf.for %k = %lb to %ub step %st {{
    {_op("i", 2.0)}
    %r = comm.allreduce %i {{lancet.time_us = 3.0 : f64}} : ({T}) -> {T}
  }}
  {_op("b", 1.0)}
  func.return %b : {T}
}}
"""


def test_scf_for_with_constant_bounds_costs_its_trips() -> None:
    # 0 to 7 step 2: trips 0, 2, 4, 6; the body i [0,2] r [2,5] is 5 µs, the loop 20 µs
    results = _simulate(_scf_for("0", "arith.constant 7 : index", "2"))
    top, body = results
    assert body.label == "@f/scf.for#0"
    assert body.runs == 4
    assert body.timeline.makespan_us == 5.0
    assert top.summary.makespan_us == 21.0  # constants take 0, the loop 20, b 1
    assert top.summary.num_collectives == 4
    assert top.summary.comm_us == 12.0
    assert top.summary.exposed_comm_us == 12.0
    assert top.notes == []


def test_scf_for_with_unknown_bounds_is_costed_once_with_a_note() -> None:
    top, body = _simulate(
        _scf_for("0", "arith.addi %n, %n {lancet.time_us = 0.0 : f64} : index", "1")
    )
    assert body.runs == 1
    assert top.summary.makespan_us == 6.0
    assert top.notes == ["@f: scf.for (op 3): bounds are not constant; its bodies are costed once"]


def test_case_costs_its_costliest_branch() -> None:
    text = f"""
    func.func @f(%x: {T}, %c: tensor<i32>) -> {T} {{
      %w = "stablehlo.case"(%c) ({{
        {_op("p", 2.0)}
        "stablehlo.return"(%p) : ({T}) -> ()
      }}, {{
        {_op("q", 5.0)}
        {_op("s", 1.0, "%q")}
        "stablehlo.return"(%s) : ({T}) -> ()
      }}) : (tensor<i32>) -> {T}
      func.return %w : {T}
    }}
    """
    top, first, second = _simulate(text)
    assert [first.label, second.label] == ["@f/stablehlo.case#0:0", "@f/stablehlo.case#0:1"]
    assert top.summary.makespan_us == 6.0
    assert top.summary.num_ops == 1 + 2  # the case op and the costlier branch's two ops


def _while(limit: str, step: str, start: str = "0") -> str:
    """A stablehlo.while over a counter as JAX emits it for lax.scan (body: one 3 µs op)."""
    i32 = "tensor<i32>"
    return f"""
    func.func @f(%x: {T}) -> {T} {{
      %c0 = "stablehlo.constant"() <{{value = dense<{start}> : {i32}}}> : () -> {i32}
      %n:2 = "stablehlo.while"(%c0, %x) ({{
      ^bb0(%k: {i32}, %h: {T}):
        %lim = "stablehlo.constant"() <{{value = dense<{limit}> : {i32}}}> : () -> {i32}
        %lt = "stablehlo.compare"(%k, %lim) <{{comparison_direction = #stablehlo<comparison_direction LT>}}> {{lancet.time_us = 0.5 : f64}} : ({i32}, {i32}) -> tensor<i1>
        "stablehlo.return"(%lt) : (tensor<i1>) -> ()
      }}, {{
      ^bb0(%k: {i32}, %h: {T}):
        {_op("y", 3.0, "%h")}
        %one = "stablehlo.constant"() <{{value = dense<{step}> : {i32}}}> : () -> {i32}
        %k1 = "stablehlo.add"(%k, %one) {{lancet.time_us = 0.0 : f64}} : ({i32}, {i32}) -> {i32}
        "stablehlo.return"(%k1, %y) : ({i32}, {T}) -> ()
      }}) : ({i32}, {T}) -> ({i32}, {T})
      func.return %n#1 : {T}
    }}
    """


def _zero_constants(text: str) -> str:
    return text.replace(": () -> tensor<i32>", "{lancet.time_us = 0.0 : f64} : () -> tensor<i32>")


@pytest.mark.parametrize(("start", "limit", "step", "trips"),
                         [("0", "4", "1", 4), ("1", "8", "3", 3), ("5", "4", "1", 0)])  # fmt: skip
def test_counter_while_costs_its_trips(start: str, limit: str, step: str, trips: int) -> None:
    module = parse(_zero_constants(_while(limit, step, start)))
    loop = next(op for op in module.walk() if op.name == "stablehlo.while")
    assert hlo_while_trips(loop) == trips
    top, cond, body = simulate_module(module, CostModel.from_config(CostConfig()))
    assert (cond.runs, body.runs) == (trips + 1, trips)
    # trips x 3 µs of body, trips + 1 conditions of 0.5 µs
    assert top.summary.makespan_us == trips * 3.0 + (trips + 1) * 0.5
    assert top.notes == []


def test_while_not_in_counter_form_is_costed_once_with_a_note() -> None:
    text = _zero_constants(_while("4", "1")).replace(
        "comparison_direction LT", "comparison_direction NE"
    )
    top, cond, body = _simulate(text)
    assert top.summary.makespan_us == 3.5
    assert top.notes == ["@f: stablehlo.while (op 1): not a counter loop with constant bounds; "
                         "its bodies are costed once"]  # fmt: skip


def test_nested_labels_carry_their_path_and_an_explicit_time_wins() -> None:
    text = f"""
    func.func @f(%x: {T}) -> {T} {{
      %w = "scf.execute_region"() ({{
        %v = "scf.execute_region"() ({{
          {_op("i", 2.0)}
          scf.yield %i : {T}
        }}) : () -> {T}
        %u = "scf.execute_region"() ({{
          {_op("j", 3.0)}
          scf.yield %j : {T}
        }}) {{lancet.time_us = 7.0 : f64}} : () -> {T}
        scf.yield %u : {T}
      }}) : () -> {T}
      func.return %w : {T}
    }}
    """
    results = _simulate(text)
    assert [r.label for r in results] == [
        "@f",
        "@f/scf.execute_region#0",
        "@f/scf.execute_region#0/scf.execute_region#0",
        "@f/scf.execute_region#0/scf.execute_region#1",
    ]
    assert results[0].summary.makespan_us == 2.0 + 7.0  # the measured op keeps its 7 µs
    assert [r.in_parent for r in results] == [False, True, True, False]


def test_a_call_costs_its_callee_and_the_callee_is_not_top_level() -> None:
    text = f"""
    func.func @main(%x: {T}) -> {T} {{
      %a = "func.call"(%x) <{{callee = @g}}> : ({T}) -> {T}
      %b = "func.call"(%a) <{{callee = @g}}> : ({T}) -> {T}
      func.return %b : {T}
    }}
    func.func private @g(%y: {T}) -> {T} {{
      {_op("i", 2.0, "%y")}
      %r = comm.allreduce %i {{lancet.time_us = 4.0 : f64}} : ({T}) -> {T}
      func.return %r : {T}
    }}
    """
    main, g = _simulate(text)
    assert (main.top_level, g.top_level, g.in_parent) == (True, False, True)
    assert main.summary.makespan_us == 12.0
    assert main.summary.num_collectives == 2
    module = run_pipeline(parse(text), "simulate")
    makespans = {op.sym_name.data: op.attributes["lancet.makespan_us"].value.data
                 for op in module.body.block.ops}  # fmt: skip
    assert makespans == {"main": 12.0, "g": 6.0}


# ---- JAX programs lowered with Shardy ------------------------------------------------------------
def _imported(name: str):
    module = parse((DATA / name).read_text())
    import_stablehlo(module)
    return module


def test_data_parallel_mlp_totals_are_the_shard_map_body() -> None:
    results = simulate_module(_imported("dp_mlp.stablehlo.generic.mlir"),
                              CostModel.from_config(CostConfig()))  # fmt: skip
    by_label = {r.label: r for r in results}
    main, body = by_label["@main"], by_label["@main/sdy.manual_computation#0"]
    assert [r.label for r in results if r.top_level] == ["@main"]
    # main holds only the manual_computation: its makespan is the body's
    assert main.summary.makespan_us == pytest.approx(body.timeline.makespan_us)
    # six gradient pmeans and the loss pmean, all inside the shard_map body
    assert main.summary.num_collectives == 7 == body.summary.num_collectives
    assert main.summary.comm_us == pytest.approx(body.summary.comm_us)
    assert body.summary.comm_us > 0


def test_scan_over_layers_counts_each_trip() -> None:
    results = simulate_module(_imported("scan_layers.stablehlo.generic.mlir"),
                              CostModel.from_config(CostConfig()))  # fmt: skip
    loops = [r for r in results if "stablehlo.while" in r.label]
    assert [(r.label.rsplit("/", 1)[-1], r.runs) for r in loops] == [
        ("stablehlo.while#0:0", 5),
        ("stablehlo.while#0:1", 4),
        ("stablehlo.while#2:0", 5),
        ("stablehlo.while#2:1", 4),
    ]
    backward_body = loops[3]
    # its body calls the function that averages the layer's gradient: one all-reduce a trip
    assert backward_body.summary.num_collectives == 1
    main = results[0]
    assert main.label == "@main"
    assert main.summary.num_collectives == 4 * 1 + 1  # + the loss pmean after the loops
    body = next(r for r in results if r.label == "@main/sdy.manual_computation#0")
    loop_us = sum(r.timeline.makespan_us * r.runs for r in loops)
    assert body.timeline.makespan_us >= loop_us
    assert main.summary.makespan_us == pytest.approx(body.timeline.makespan_us)


def test_report_timeline_and_gantt_include_nested_work(tmp_path: Path) -> None:
    out = {k: tmp_path / f"{k}.{ext}" for k, ext in (("r", "json"), ("t", "json"), ("g", "png"))}
    res = run_tool(["lancet-opt", "--allow-unregistered-dialect", "-p", "import-stablehlo",
                    str(DATA / "scan_layers.stablehlo.generic.mlir"), "-o", "/dev/null",
                    "--report", str(out["r"]), "--timeline", str(out["t"]),
                    "--gantt", str(out["g"])])  # fmt: skip
    assert res.returncode == 0, res.stderr
    report = json.loads(out["r"].read_text())
    assert report["num_collectives"] == 5
    assert report["makespan_us"] == pytest.approx(report["functions"][0]["makespan_us"])
    nested = {b["label"]: b for b in report["nested_blocks"]}
    loop = nested["@main/sdy.manual_computation#0/stablehlo.while#2:1"]
    assert (loop["in_parent"], loop["runs"], loop["num_collectives"]) == (True, 4, 1)
    assert "runs" not in nested["@main/sdy.manual_computation#0/stablehlo.reduce#1"]
    trace = json.loads(out["t"].read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert "@main/sdy.manual_computation#0/stablehlo.while#2:1 (x4)" in names
    assert out["g"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
