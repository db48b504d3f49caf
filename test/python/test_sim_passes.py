"""The `simulate` and `lancet-schedule` passes and lancet-opt's --timeline/--report/--gantt."""

from __future__ import annotations

import json
import os

import pytest
from helpers import parse, run_pipeline, run_tool, to_text
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.func import FuncOp
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.graph.core import Problem
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.sim.blocks import simulate_module
from lancet_mlir.sim.profiled_schedule import profiled_fifo_schedule

T = "tensor<64xf32>"

BRIEF = f"""
func.func @step(%x: {T}) -> ({T}, {T}) {{
  %a = "test.op"(%x) {{lancet.time_us = 3.0 : f64}} : ({T}) -> {T}
  %r = comm.allreduce %a {{lancet.time_us = 5.0 : f64}} : ({T}) -> {T}
  %u = "test.op"(%r) {{lancet.time_us = 2.0 : f64}} : ({T}) -> {T}
  %b = "test.op"(%x) {{lancet.time_us = 4.0 : f64}} : ({T}) -> {T}
  func.return %u, %b : {T}, {T}
}}
"""


class ByName:
    """A cost model stand-in: times by the first result's name."""

    def __init__(self, times: dict[str, float]):
        self.times = times

    def graph_times(self, graph: DataflowGraph, world_size: int | None = None) -> list[float]:
        return [
            self.times.get(op.results[0].name_hint if op.results else "", 0.0) for op in graph.ops
        ]


def attr_values(module, name: str) -> list[float]:
    func = next(op for op in module.walk() if isinstance(op, FuncOp))
    return [op.attributes[name].value.data for op in func.body.block.ops if name in op.attributes]


# ---- simulate ----------------------------------------------------------------------------------
def test_simulate_pass_writes_hand_computed_times() -> None:
    # a [0,3], r [3,8], u [8,10], b [10,14]
    module = run_pipeline(parse(BRIEF), "simulate")
    assert attr_values(module, "lancet.start_us") == [0.0, 3.0, 8.0, 10.0]
    assert attr_values(module, "lancet.end_us") == [3.0, 8.0, 10.0, 14.0]
    assert attr_values(module, "lancet.stream") == [0, 1, 0, 0]
    func = next(op for op in module.walk() if isinstance(op, FuncOp))
    assert func.attributes["lancet.makespan_us"].value.data == 14.0
    assert func.attributes["lancet.exposed_comm_us"].value.data == 5.0
    # the terminator is not simulated
    assert "lancet.start_us" not in func.body.block.last_op.attributes


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("simulate{comm-streams=0}", "simulate: comm-streams must be >= 1, got 0"),
        (
            "simulate{overlap-slowdown=0.5}",
            r"simulate: overlap-slowdown must be finite and >= 1\.0, got 0\.5",
        ),
        (
            "lancet-schedule{overlap-slowdown=0.9}",
            "lancet-schedule: overlap-slowdown must be finite",
        ),
        (
            "lancet-schedule{comm-streams=true}",
            "lancet-schedule: option comm-streams expects an integer, got true",
        ),
        (
            "simulate{overlap-slowdown=true}",
            "simulate: option overlap-slowdown expects a number, got true",
        ),
    ],
)
def test_bad_pass_options(spec: str, message: str) -> None:
    with pytest.raises(PassFailedException, match=message):
        run_pipeline(parse(BRIEF), spec)


def test_simulate_module_labels_nested_blocks_and_bare_ops() -> None:
    module = parse(
        f"""
        func.func @f(%x: {T}) -> {T} {{
          %a = "test.op"(%x) : ({T}) -> {T}
          %w = "test.op"(%a) ({{
            %i = "test.op"(%a) : ({T}) -> {T}
            %j = "test.op"(%i) : ({T}) -> {T}
            "test.yield"(%j) : ({T}) -> ()
          }}) : ({T}) -> {T}
          func.return %w : {T}
        }}
        """
    )
    results = simulate_module(module, ByName({"a": 1.0, "w": 5.0, "i": 2.0, "j": 3.0}))
    assert [(r.label, r.top_level) for r in results] == [("@f", True), ("@f/test.op#0", False)]
    assert results[0].timeline.end == [1.0, 6.0]
    # the nested block on its own clock: i [0,2], j [2,5]; its terminator is not simulated
    assert results[1].timeline.end == [2.0, 5.0]
    bare = parse(f'%a = "test.op"() : () -> {T}\n%b = "test.op"(%a) : ({T}) -> {T}')
    results = simulate_module(bare, ByName({"a": 1.0, "b": 2.0}))
    assert [(r.label, r.top_level, r.summary.makespan_us) for r in results] == [
        ("<module>", True, 3.0)
    ]


# ---- lancet-schedule ---------------------------------------------------------------------------
def test_profiled_fifo_schedule_decision() -> None:
    # a(3) -> r(5) -> u(2), b(4): input order 14 µs, list order a b r u: 10 µs
    g = Problem.from_edges(4, [(0, 1), (1, 2)], comm=[1])
    decision = profiled_fifo_schedule(g, [3.0, 5.0, 2.0, 4.0])
    assert decision.order == [0, 3, 1, 2]
    assert (decision.input_makespan_us, decision.output_makespan_us) == (14.0, 10.0)
    assert decision.changed


def test_lancet_schedule_pass_reorders_and_is_deterministic() -> None:
    first = to_text(run_pipeline(parse(BRIEF), "lancet-schedule"))
    second = to_text(run_pipeline(parse(BRIEF), "lancet-schedule"))
    assert first == second
    names = [line.split("=")[0].strip() for line in first.splitlines() if " = " in line]
    assert names == ["%a", "%b", "%r", "%u"]


@st.composite
def random_blocks(draw: st.DrawFn) -> str:
    """A func body of test.op / comm.allreduce ops with random edges and times."""
    n = draw(st.integers(min_value=2, max_value=10))
    lines = []
    for i in range(n):
        k = draw(st.integers(min_value=0, max_value=min(i, 2)))
        operands = (
            draw(st.lists(st.integers(0, i - 1), min_size=k, max_size=k, unique=True)) if i else []
        )
        args = [f"%v{j}" for j in operands] or ["%x"]
        time_us = draw(st.integers(min_value=0, max_value=8))
        attrs = f"{{lancet.time_us = {time_us}.0 : f64}}"
        types = ", ".join([T] * len(args))
        if i and draw(st.booleans()):
            res = ", ".join([T] * len(args))
            names = ", ".join(f"%v{i}_{m}" for m in range(len(args)))
            lines.append(
                f"  {names} = comm.allreduce {', '.join(args)} {attrs} : ({types}) -> ({res})"
            )
            lines.append(
                f'  %v{i} = "test.op"(%v{i}_0) {{lancet.time_us = 0.0 : f64}} : ({T}) -> {T}'
            )
            continue
        lines.append(f'  %v{i} = "test.op"({", ".join(args)}) {attrs} : ({types}) -> {T}')
    body = "\n".join(lines)
    return f"func.func @g(%x: {T}) -> {T} {{\n{body}\n  func.return %v{n - 1} : {T}\n}}\n"


def makespan(module) -> float:
    model = CostModel.from_config(CostConfig())
    return sum(r.summary.makespan_us for r in simulate_module(module, model) if r.top_level)


@settings(max_examples=40, deadline=None)
@given(random_blocks())
def test_lancet_schedule_is_never_worse(text: str) -> None:
    before = parse(text)
    after = run_pipeline(parse(text), "lancet-schedule")
    check_dominance(after)
    assert makespan(after) <= makespan(before)
    # same ops, only reordered
    assert sorted(to_text(after).splitlines()) == sorted(to_text(before).splitlines())


# ---- lancet-opt outputs ------------------------------------------------------------------------
def test_lancet_opt_report_timeline_and_gantt(tmp_path) -> None:
    src = tmp_path / "in.mlir"
    src.write_text(BRIEF)
    report, trace, gantt = tmp_path / "r.json", tmp_path / "t.json", tmp_path / "g.png"
    res = run_tool(
        [
            "lancet-opt",
            str(src),
            "-p",
            "lancet-schedule",
            "--report",
            str(report),
            "--timeline",
            str(trace),
            "--gantt",
            str(gantt),
        ]
    )
    assert res.returncode == 0, res.stderr
    assert "%b = " in res.stdout
    data = json.loads(report.read_text())
    # scheduled order a b r u: a [0,3], b [3,7], r [3,8], u [8,10]; comm [3,8] is hidden
    # except [7,8]; lower bound = a->r->u = 10 = max(compute 9, comm 5, path 10)
    assert data["makespan_us"] == 10.0
    assert data["compute_us"] == 9.0
    assert data["comm_us"] == 5.0
    assert data["exposed_comm_us"] == 1.0
    assert data["overlap_us"] == 4.0
    assert data["lower_bound_us"] == 10.0
    # r (5 µs) is unordered only with b (4 µs): every order exposes at least 1 µs (this one does)
    assert data["exposed_comm_floor_us"] == 1.0
    assert data["functions"][0]["exposed_comm_floor_us"] == 1.0
    assert data["pipeline"] == "lancet-schedule"
    assert [f["name"] for f in data["functions"]] == ["step"]
    assert data["functions"][0]["makespan_us"] == 10.0
    assert isinstance(data["cost_model"]["notes"], list)
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"]) for e in events] == [
        ("test.op %a", 0.0, 3.0),
        ("test.op %b", 3.0, 4.0),
        ("comm.allreduce %r", 3.0, 5.0),
        ("test.op %u", 8.0, 2.0),
    ]
    assert gantt.read_bytes()[:4] == b"\x89PNG"
    assert sorted(os.listdir(tmp_path)) == ["g.png", "in.mlir", "r.json", "t.json"]


@pytest.mark.parametrize(
    "text", ["builtin.module {}", "builtin.module {\n  func.func @f() {\n    func.return\n  }\n}\n"]
)
def test_report_times_of_an_empty_module_are_floats(tmp_path, text: str) -> None:
    """Times are floats (0.0) even where nothing runs; counts stay integers."""
    src, report = tmp_path / "in.mlir", tmp_path / "r.json"
    src.write_text(text)
    res = run_tool(["lancet-opt", str(src), "--report", str(report), "-o", os.devnull])
    assert res.returncode == 0, res.stderr
    data = json.loads(report.read_text())
    entries = [data, *data["functions"]]
    times = [(k, v) for e in entries for k, v in e.items() if k.endswith("_us")]
    assert times
    assert all(type(v) is float and v == 0.0 for _, v in times), times
    assert (type(data["num_ops"]), data["num_ops"]) == (int, 0)


def test_lancet_opt_report_errors_leave_no_file(tmp_path) -> None:
    src = tmp_path / "in.mlir"
    src.write_text(BRIEF)
    res = run_tool(["lancet-opt", str(src), "--report", str(tmp_path / "no" / "r.json")])
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        f"lancet-opt: error: --report {tmp_path / 'no' / 'r.json'}: folder does not exist"
    ]
    res = run_tool(
        ["lancet-opt", str(src), "--overlap-slowdown", "0.5", "--report", str(tmp_path / "r.json")]
    )
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        "lancet-opt: error: --overlap-slowdown: must be finite and >= 1.0, got 0.5"
    ]
    assert sorted(os.listdir(tmp_path)) == ["in.mlir"]
