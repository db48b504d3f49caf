"""The scheduling passes cost an op with regions by its bodies (issue 17, deliverable 5):
`sim.blocks.ModuleSimulation` gives every pass the durations the simulator uses, bodies
scheduled first and simulated once. Hand MLIR with hand-computed times, and the JAX Shardy
programs of test/data/stablehlo (`make_dp_mlp.py`, `make_scan_layers.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import parse, run_pipeline, run_tool, to_text
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.graph.dataflow import DataflowGraph, op_display_name
from lancet_mlir.importers.stablehlo import import_stablehlo
from lancet_mlir.passes.lancet_schedule import LancetSchedulePass
from lancet_mlir.sim import exposed_comm_us
from lancet_mlir.sim.blocks import ModuleSimulation, simulate_module

T = "tensor<64xf32>"
DATA = Path(__file__).resolve().parents[1] / "data" / "stablehlo"
MODEL = CostModel.from_config(CostConfig())


def _op(name: str, us: float, arg: str = "%x") -> str:
    return f'%{name} = "test.op"({arg}) {{lancet.time_us = {us} : f64}} : ({T}) -> {T}'


# g (1) -> r (all-reduce, 30) -> u (1); an independent scf.for of 4 trips of a 10 µs op.
# Input order g r u loop: u waits for r until 31, the loop runs [32,72]: 72 µs. With the loop
# before u it runs under r: g [0,1] r [1,31] loop [1,41] u [41,42]: 42 µs. Costed by the cost
# model alone the loop is 0 µs: both orders take 32 µs and the never-worse rule kept the input.
LOOP = f"""
func.func @f(%x: {T}) -> {T} {{
  %lb = arith.constant 0 : index
  %ub = arith.constant 4 : index
  %st = arith.constant 1 : index
  {_op("g", 1.0)}
  %r = comm.allreduce %g {{lancet.time_us = 30.0 : f64}} : ({T}) -> {T}
  {_op("u", 1.0, "%r")}
  scf.for %k = %lb to %ub step %st {{
    {_op("i", 10.0)}
  }}
  func.return %u : {T}
}}
"""


def _body(module: ModuleOp) -> Block:
    func = next(iter(module.body.block.ops))
    block = func.regions[0].blocks.first
    assert block is not None
    return block


def _names(block: Block) -> list[str]:
    return [op.results[0].name_hint or "" if op.results else op_display_name(op)
            for op in block.ops][:-1]  # fmt: skip


def _top_makespan(module: ModuleOp) -> float:
    return sum(r.summary.makespan_us for r in simulate_module(module, MODEL) if r.top_level)


def test_the_loop_costs_its_body_times_its_trips_not_the_cost_models_zero() -> None:
    module = parse(LOOP)
    block = _body(module)
    # what the passes used before: the cost model's time of the scf.for itself
    assert MODEL.graph_times(DataflowGraph.from_block(block)) == [0, 0, 0, 1, 30, 1, 0]
    assert ModuleSimulation(module, MODEL).durations(block) == [0, 0, 0, 1, 30, 1, 4 * 10]


@pytest.mark.parametrize(
    "spec", ["dw-schedule", "lancet-schedule{max-seconds=0}", "lancet-schedule"]
)
def test_schedulers_run_the_loop_under_the_all_reduce(spec: str) -> None:
    module = parse(LOOP)
    assert _top_makespan(module) == 72.0
    run_pipeline(module, spec)
    assert _names(_body(module)) == ["lb", "ub", "st", "g", "scf.for", "r", "u"]
    assert _top_makespan(module) == 42.0


# w1, w2 (1 each) -> r1, r2 (all-reduces of 256 bytes, 8 ranks, priced by the h100 table at
# 36.46 µs each: a measured lancet.time_us would forbid fusing them) -> u1 (50), u2 (1); an
# scf.execute_region whose body is a 100 µs op. The fused all-reduce (512 bytes: 36.46 µs)
# ends at 38.46, long before the region ends at 102, after which u1 and u2 run: 153 µs either
# way, one op fewer. With the region at the cost model's 0 µs the unfused pair let u1 run at
# 37.46 (u2 ends at 88.46) and the merge looked like 89.46 µs: it was refused.
FUSE = f"""
module attributes {{lancet.world_size = 8 : i64}} {{
func.func @f(%x: {T}, %y: {T}) -> ({T}, {T}, {T}) {{
  {_op("w1", 1.0)}
  {_op("w2", 1.0, "%y")}
  %r1 = comm.allreduce %w1 : ({T}) -> {T}
  %r2 = comm.allreduce %w2 : ({T}) -> {T}
  %c = "scf.execute_region"() ({{
    {_op("i", 100.0)}
    scf.yield %i : {T}
  }}) : () -> {T}
  {_op("u1", 50.0, "%r1")}
  {_op("u2", 1.0, "%r2")}
  func.return %u1, %u2, %c : {T}, {T}, {T}
}}
}}
"""


def test_fusion_merges_all_reduces_hidden_under_a_region() -> None:
    module = parse(FUSE)
    block = _body(module)
    assert MODEL.graph_times(DataflowGraph.from_block(block))[4] == 0.0
    assert ModuleSimulation(module, MODEL).durations(block)[4] == 100.0
    run_pipeline(module, "fuse-noncritical-comm")
    assert _names(_body(module)) == ["w1", "w2", "c", "r1", "u1", "u2"]
    assert "%r1, %r2 = comm.allreduce %w1, %w2" in to_text(module)
    assert _top_makespan(module) == 153.0


class Counting:
    """The default cost model, counting the blocks it costs (by their first op's name)."""

    def __init__(self) -> None:
        self.costed: list[str] = []

    def graph_times(self, graph: DataflowGraph, world_size: int | None = None) -> list[float]:
        if graph.ops:
            first = graph.ops[0]
            self.costed.append(first.results[0].name_hint or "" if first.results else "")
        return MODEL.graph_times(graph, world_size)


NESTED = f"""
func.func @main(%x: {T}) -> {T} {{
  {_op("a", 1.0)}
  %w = "scf.execute_region"() ({{
    {_op("i", 2.0)}
    %v = "func.call"(%i) <{{callee = @g}}> : ({T}) -> {T}
    scf.yield %v : {T}
  }}) : () -> {T}
  %b = "func.call"(%w) <{{callee = @g}}> : ({T}) -> {T}
  func.return %b : {T}
}}
func.func private @g(%y: {T}) -> {T} {{
  {_op("j", 3.0, "%y")}
  {_op("k", 4.0, "%j")}
  func.return %k : {T}
}}
"""


def test_bodies_come_first_and_are_costed_once_until_invalidated() -> None:
    module = parse(NESTED)
    model = Counting()
    sim = ModuleSimulation(module, model)
    # the region's body and the callee before the blocks that use their makespans
    assert [i.label for i in sim.innermost_first()] == ["@g", "@main/scf.execute_region#0", "@main"]
    main = sim.items[0].block
    assert sim.durations(main) == [1.0, 2.0 + 7.0, 7.0]  # a, the region (i + a call), a call
    assert sim.durations(main) == [1.0, 9.0, 7.0]
    sim.results()
    assert sorted(model.costed) == ["a", "i", "j"]  # each block once: @g used twice
    g = sim.items[-1].block
    sim.invalidate(g)  # @g changed: it and both blocks that use its makespan are costed anew
    sim.results()
    assert sorted(model.costed) == ["a", "a", "i", "i", "j", "j"]
    sim.invalidate(main)  # nothing uses @main's makespan
    sim.results()
    assert sorted(model.costed) == ["a", "a", "a", "i", "i", "j", "j"]


def _doubling_chain(depth: int) -> str:
    """@d0 .. @d{depth}: each calls the next twice; the last is one 1 µs op."""
    funcs = [
        f"""
func.func @d{depth}(%x: {T}) -> {T} {{
  {_op("o", 1.0)}
  func.return %o : {T}
}}"""
    ]
    for k in range(depth - 1, -1, -1):
        funcs.append(f"""
func.func @d{k}(%x: {T}) -> {T} {{
  %a = func.call @d{k + 1}(%x) : ({T}) -> {T}
  %b = func.call @d{k + 1}(%a) : ({T}) -> {T}
  func.return %b : {T}
}}""")
    return "\n".join(reversed(funcs))


def test_compute_floor_visits_each_function_once_however_many_paths_reach_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 2^30 call paths reach @d30: walked per path (as before the memo), this never ends
    depth = 30
    sim = ModuleSimulation(parse(_doubling_chain(depth)), MODEL)
    calls: list[Block] = []
    floor = ModuleSimulation._floor

    def counted(self: ModuleSimulation, block: Block, running: set[Block]) -> float:
        calls.append(block)
        return floor(self, block, running)

    monkeypatch.setattr(ModuleSimulation, "_floor", counted)
    top = next(i.block for i in sim.items if i.label == "@d0")
    assert sim.compute_floor_us(top) == 2.0**depth
    assert len(set(calls)) == depth + 1
    assert len(calls) == 2 * depth + 1  # the root once, every callee asked by two calls
    sim.invalidate(top)  # forgets the floors: asked again, the same value
    assert sim.compute_floor_us(top) == 2.0**depth


CASE = f"""
func.func @f(%x: {T}, %c: tensor<i32>) -> {T} {{
  %lb = arith.constant 0 : index
  %ub = arith.constant 3 : index
  %st = arith.constant 1 : index
  scf.for %k = %lb to %ub step %st {{
    {_op("i", 2.0)}
    %r = comm.allreduce %i {{lancet.time_us = 50.0 : f64}} : ({T}) -> {T}
  }}
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


def test_compute_floor_counts_body_compute_times_trips_and_the_largest_branch() -> None:
    module = parse(CASE)
    sim = ModuleSimulation(module, MODEL)
    main = sim.items[0].block
    # the loop: 3 trips of 2 µs compute (its all-reduces are not compute); the case: 5 + 1
    assert sim.compute_floor_us(main) == 3 * 2.0 + 6.0
    # the durations: 3 trips of a 52 µs body, the costlier branch
    assert sim.durations(main) == [0.0, 0.0, 0.0, 3 * 52.0, 6.0]


# ---- JAX programs lowered with Shardy ------------------------------------------------------------
def _imported(name: str) -> ModuleOp:
    module = parse((DATA / name).read_text())
    import_stablehlo(module)
    return module


def _while_durations(module: ModuleOp) -> tuple[list[float], list[float]]:
    """The durations the passes now give the two while ops of the scan program's shard_map
    body, and their bodies' makespans times their runs."""
    sim = ModuleSimulation(module, MODEL)
    by_label = {item.label: item.block for item in sim.items}
    body = by_label["@main/sdy.manual_computation#0"]
    graph = DataflowGraph.from_block(body)
    loops = [i for i, op in enumerate(graph.ops) if op_display_name(op) == "stablehlo.while"]
    durations = sim.durations(body)
    expected = []
    for k in (0, 2):
        runs = [(f"@main/sdy.manual_computation#0/stablehlo.while#{k}:{j}", n)
                for j, n in ((0, 5), (1, 4))]  # fmt: skip
        parts = [(sim.result(by_label[label]), n) for label, n in runs]
        expected.append(sum(r.summary.makespan_us * n for r, n in parts if r is not None))
    model = MODEL.graph_times(graph)
    assert [model[i] for i in loops] == [2.0, 2.0]  # what the passes saw before: the floor
    return [durations[i] for i in loops], expected


def test_scan_loops_cost_their_scheduled_bodies_and_the_totals_match_the_report(
    tmp_path: Path,
) -> None:
    module = _imported("scan_layers.stablehlo.generic.mlir")
    seen, expected = _while_durations(module)
    assert seen == expected
    assert min(seen) > 100.0  # four layers a loop, not the cost model's 2 µs
    total = LancetSchedulePass()._schedule(module, 0.0, "")
    seen, expected = _while_durations(module)  # after scheduling: the bodies as scheduled
    assert seen == expected
    report = tmp_path / "r.json"
    res = run_tool(["lancet-opt", "--allow-unregistered-dialect", "-p",
                    "import-stablehlo,lancet-schedule{max-seconds=0}",
                    str(DATA / "scan_layers.stablehlo.generic.mlir"), "-o", "/dev/null",
                    "--report", str(report)])  # fmt: skip
    assert res.returncode == 0, res.stderr
    numbers = json.loads(report.read_text())
    assert numbers["makespan_us"] == pytest.approx(total)
    assert numbers["makespan_us"] == pytest.approx(_top_makespan(module))
    # in the shard_map body the loss pmean runs beside the loops: none of it exposed there
    # (with the loops at 2 µs each it looked exposed for 15.5 µs, and the pass reordered
    # the body for that)
    body = {r.label: r for r in simulate_module(module, MODEL)}["@main/sdy.manual_computation#0"]
    assert exposed_comm_us(body.timeline) == 0.0
    assert numbers["exposed_comm_us"] == pytest.approx(body.summary.exposed_comm_us)


def test_dp_mlp_total_is_the_scheduled_shard_map_body(tmp_path: Path) -> None:
    module = _imported("dp_mlp.stablehlo.generic.mlir")
    total = LancetSchedulePass()._schedule(module, 0.0, "")
    results = {r.label: r for r in simulate_module(module, MODEL)}
    body = results["@main/sdy.manual_computation#0"]
    # @main holds the manual_computation alone: not scheduled, but its makespan counts
    assert total == pytest.approx(results["@main"].summary.makespan_us)
    assert total == pytest.approx(body.summary.makespan_us)
    report = tmp_path / "r.json"
    run_pipeline(module, f'simulate{{report="{report}" annotate=false}}')
    assert json.loads(report.read_text())["makespan_us"] == pytest.approx(total)


MOE = """
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @moe(%x: tensor<8x8xf32>, %dm: tensor<8x4x4xf32>, %cm: tensor<8x4x4xf32>, %w: tensor<2x8x8xf32>, %r: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %lb = arith.constant 0 : index
    %ub = arith.constant 4 : index
    %st = arith.constant 1 : index
    %d = comp.moe_dispatch %x, %dm : (tensor<8x8xf32>, tensor<8x4x4xf32>) -> tensor<4x4x8xf32>
    %e = comm.all_to_all %d concat 1 : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    scf.for %k = %lb to %ub step %st {
      %i = "test.op"(%x) {lancet.time_us = 10.0 : f64} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    }
    %h = comp.batch_matmul %e, %w : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %a = comp.gelu %h : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %b = comm.all_to_all %a split 1 : (tensor<2x8x8xf32>) -> tensor<4x4x8xf32>
    %y = comp.moe_combine %b, %cm : (tensor<4x4x8xf32>, tensor<8x4x4xf32>) -> tensor<8x8xf32>
    %o = comp.add %y, %r : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    func.return %o : tensor<8x8xf32>
  }
}
"""


def test_moe_partition_costs_the_loop_by_its_body(monkeypatch: pytest.MonkeyPatch) -> None:
    from lancet_mlir.passes import moe_partition

    seen: list[list[float]] = []
    original = moe_partition._fixed_order_us

    def recording(graph: DataflowGraph, time_of, sim) -> float:  # noqa: ANN001 - as the pass's
        seen.append([time_of(o) for o in graph.ops])
        return original(graph, time_of, sim)

    monkeypatch.setattr(moe_partition, "_fixed_order_us", recording)
    module = parse(MOE)
    block = _body(module)
    loop = [op_display_name(o) for o in block.ops].index("scf.for")
    assert MODEL.graph_times(DataflowGraph.from_block(block))[loop] == 0.0  # what it saw before
    run_pipeline(module, "moe-partition")
    assert seen
    assert seen[0][loop] == 4 * 10.0  # the block as given: the loop's 4 trips


def test_a_copied_region_op_costs_its_new_body() -> None:
    module = parse(FUSE)
    block = _body(module)
    region = next(o for o in block.ops if op_display_name(o) == "scf.execute_region")
    sim = ModuleSimulation(module, MODEL)
    assert sim.op_duration(region) == 100.0
    copy = region.clone()  # as a partitioning pass copies ops: a body no simulation has seen
    block.insert_op_after(copy, region)
    assert sim.op_duration(copy) == 100.0
    assert sim.op_duration(next(iter(block.ops))) is None  # w1: the cost model's


def test_a_loop_without_static_bounds_is_costed_once_with_a_note(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = LOOP.replace("%ub = arith.constant 4 : index",
                        "%ub = arith.addi %lb, %lb {lancet.time_us = 0.0 : f64} : index")  # fmt: skip
    module = parse(text)
    block = _body(module)
    assert ModuleSimulation(module, MODEL).durations(block)[-1] == 10.0  # one trip
    with caplog.at_level("INFO", logger="lancet_mlir.schedule"):
        run_pipeline(module, "lancet-schedule{max-seconds=0}")
    notes = [r.getMessage() for r in caplog.records if "costed once" in r.getMessage()]
    assert notes == ["lancet-schedule @f: scf.for (op 6): bounds are not constant; "
                     "its bodies are costed once"]  # fmt: skip
