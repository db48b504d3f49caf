"""`lancet.fill = f`: an op that processes only f of its padded rows is costed for them.

Compute: profiled time x f, roofline estimate x f before the launch floor. Collectives: the
comm model at f x the payload bytes (the table looked up at the scaled size), never the
profile entry of the padded exchange. `lancet.time_us` is never scaled. Values are hand
computed from a small user comm table and the roofline formulas.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import parse, run_tool

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.cost.keys import op_key
from lancet_mlir.cost.profile_db import ProfileDB, ProfileEntry
from lancet_mlir.cost.time_source import time_source
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.fill import op_fill
from lancet_mlir.graph.rewrite import fuse_collectives
from lancet_mlir.passes.scheduling import fusion_hooks
from lancet_mlir.support.errors import UserError

# ops 0/1: a 4096^3 bf16 matmul without / with fill 0.25 (far above the 2 us launch floor);
# 2/3: a tiny add without / with fill (at the floor); 4/5: a 4 MiB allreduce without / with
# fill 0.5; 6: an all_to_allv of 4 MiB data with fill 0.25; 7: time_us and fill together
MODULE = """
builtin.module attributes {lancet.world_size = 8 : i64} {
  func.func @f(%a: tensor<4096x4096xbf16>, %s: tensor<4xf32>, %g: tensor<1048576xf32>,
               %d: tensor<8x1024x128xf32>, %n: tensor<8xi64>) {
    %m0 = comp.matmul %a, %a : (tensor<4096x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<4096x4096xbf16>
    %m1 = comp.matmul %a, %a {lancet.fill = 0.25 : f64} : (tensor<4096x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<4096x4096xbf16>
    %s0 = comp.add %s, %s : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %s1 = comp.add %s, %s {lancet.fill = 0.25 : f64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %r0 = comm.allreduce %g : (tensor<1048576xf32>) -> tensor<1048576xf32>
    %r1 = comm.allreduce %g {lancet.fill = 0.5 : f64} : (tensor<1048576xf32>) -> tensor<1048576xf32>
    %v, %vn = comm.all_to_allv %d, %n {lancet.fill = 0.25 : f64} : (tensor<8x1024x128xf32>, tensor<8xi64>) -> (tensor<8x1024x128xf32>, tensor<8xi64>)
    %t = comp.add %s, %s {lancet.fill = 0.25 : f64, lancet.time_us = 3.5 : f64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    func.return
  }
}
"""

# allreduce and all_to_all at 8 ranks: 120 / 60 us at 1 MB, 820 / 410 us at 8 MB (linear in
# between and beyond, with a latency: halving the bytes does not halve the time)
TABLE = ("kind,group_size,bytes,time_us\nallreduce,8,1000000,120\nallreduce,8,8000000,820\n"
         "all_to_all,8,1000000,60\nall_to_all,8,8000000,410\n")  # fmt: skip
MIB4 = 4 * 1024 * 1024


def graph_of(text: str = MODULE) -> DataflowGraph:
    return DataflowGraph.from_block(parse(text).body.block.first_op.body.block)


def model_with(tmp_path: Path, profile: dict[str, float] | None = None) -> CostModel:
    table = tmp_path / "table.csv"
    table.write_text(TABLE)
    profiles: tuple[str, ...] = ()
    if profile is not None:
        ProfileDB({k: ProfileEntry(t) for k, t in profile.items()}, {"device": "h100"}).save(
            tmp_path / "p.json"
        )
        profiles = (str(tmp_path / "p.json"),)
    return CostModel.build(CostConfig(comm_tables=(str(table),), profiles=profiles))


def test_roofline_compute_is_scaled_before_the_launch_floor(tmp_path: Path) -> None:
    times = model_with(tmp_path).graph_times(graph_of())
    assert times[0] > 8.0  # a real kernel, far above the floor
    assert times[1] == times[0] / 4  # exactly a quarter
    assert times[2] == 2.0  # tiny add: the launch floor
    assert times[3] == 2.0  # a quarter of a tiny kernel still pays its launch


def test_profiled_compute_is_scaled(tmp_path: Path) -> None:
    graph = graph_of()
    model = model_with(tmp_path, {op_key(graph.ops[0]): 40.0, op_key(graph.ops[2]): 1.0})
    times = model.graph_times(graph)
    assert times[:4] == [40.0, 10.0, 1.0, 0.25]  # measured times are never floored


def test_collectives_are_costed_at_the_filled_bytes(tmp_path: Path) -> None:
    times = model_with(tmp_path).graph_times(graph_of())
    assert times[4] == pytest.approx(120 + 700 * (MIB4 - 1e6) / 7e6)  # 4 MiB: 428.6 us
    # fill 0.5: the table at 2 MiB (not half the 4 MiB time: the table is not linear at 0)
    assert times[5] == pytest.approx(120 + 700 * (MIB4 / 2 - 1e6) / 7e6)
    assert times[5] != pytest.approx(times[4] / 2)
    # all_to_allv (costed as all_to_all): 8 x 1024 x 128 x 4 = 4 MiB at fill 0.25 = 1 MiB
    assert times[6] == pytest.approx(60 + 350 * (MIB4 / 4 - 1e6) / 7e6)


def test_a_filled_collective_skips_the_profile_of_the_padded_exchange(tmp_path: Path) -> None:
    graph = graph_of()
    model = model_with(tmp_path, {op_key(graph.ops[4]): 80.0})  # ops 4 and 5 share the key
    times = model.graph_times(graph)
    assert times[4] == 80.0
    assert times[5] == pytest.approx(120 + 700 * (MIB4 / 2 - 1e6) / 7e6)
    assert time_source(model, graph.ops[4]) == "profile"
    assert time_source(model, graph.ops[5]) == "table"


def test_time_us_overrides_fill(tmp_path: Path) -> None:
    graph = graph_of()
    assert model_with(tmp_path).op_time_us(graph.ops[7]) == 3.5
    assert time_source(model_with(tmp_path), graph.ops[7]) == "attribute"


def test_fused_collectives_keep_the_filled_bytes(tmp_path: Path) -> None:
    text = """
builtin.module attributes {lancet.world_size = 8 : i64} {
  func.func @f(%g: tensor<262144xf32>, %h: tensor<786432xf32>) {
    %a = comm.allreduce %g {lancet.fill = 0.5 : f64} : (tensor<262144xf32>) -> tensor<262144xf32>
    %b = comm.allreduce %h : (tensor<786432xf32>) -> tensor<786432xf32>
    %c = comm.allreduce %g {lancet.fill = 0.5 : f64} : (tensor<262144xf32>) -> tensor<262144xf32>
    %d = comm.allreduce %g {lancet.fill = 0.5 : f64} : (tensor<262144xf32>) -> tensor<262144xf32>
    func.return
  }
}
"""
    graph = graph_of(text)
    ops = graph.ops
    # 1 MiB at fill 0.5 + 3 MiB at fill 1 = 3.5 MiB of 4 MiB: fill 0.875
    mixed = fuse_collectives([ops[0], ops[1]])
    assert op_fill(mixed) == 0.875
    same = fuse_collectives([ops[2], ops[3]])
    assert op_fill(same) == 0.5  # equal fills stay exact
    model = model_with(tmp_path)
    assert model.op_time_us(mixed) == pytest.approx(120 + 700 * (MIB4 * 0.875 - 1e6) / 7e6)
    assert model.op_time_us(same) == pytest.approx(120 + 700 * (2**20 - 1e6) / 7e6)


def test_fusion_prices_a_group_at_its_filled_bytes(tmp_path: Path) -> None:
    """The fusion stage's price of a group (`fusion_hooks`) is the fused op's: all_to_allv
    data operands first (their bytes are the payload), fills weighted by bytes."""
    text = """
builtin.module attributes {lancet.world_size = 8 : i64} {
  func.func @f(%d: tensor<8x1024x128xf32>, %e: tensor<8x512x128xf32>, %n: tensor<8xi64>) {
    %v, %vn = comm.all_to_allv %d, %n {lancet.fill = 0.25 : f64} : (tensor<8x1024x128xf32>, tensor<8xi64>) -> (tensor<8x1024x128xf32>, tensor<8xi64>)
    %w, %wn = comm.all_to_allv %e, %n : (tensor<8x512x128xf32>, tensor<8xi64>) -> (tensor<8x512x128xf32>, tensor<8xi64>)
    func.return
  }
}
"""
    graph = graph_of(text)
    hooks = fusion_hooks(graph, model_with(tmp_path))
    # 4 MiB at fill 0.25 + 2 MiB at fill 1 = 3 MiB on the all_to_all table
    assert hooks.fused_time([0, 1]) == pytest.approx(60 + 350 * (3 * 2**20 - 1e6) / 7e6)


@pytest.mark.parametrize(
    ("value", "shown"),
    [("0.0 : f64", "0.000000e+00 : f64"), ("-0.5 : f64", "-5.000000e-01 : f64"),
     ("1.5 : f64", "1.500000e+00 : f64"), ('"half"', '"half"'),
     ("0x7FF8000000000000 : f64", "0x7ff8000000000000 : f64"), ("2 : i64", "2 : i64")],
)  # fmt: skip
def test_invalid_fill_is_one_clear_error(value: str, shown: str) -> None:
    op = parse(
        f'%x = "my.op"() {{lancet.fill = {value}}} : () -> tensor<4xf32>\n'
    ).body.block.first_op
    with pytest.raises(UserError) as err:
        CostModel.from_config(CostConfig()).op_time_us(op)
    assert str(err.value).lower() == f"my.op: lancet.fill must be a number in (0, 1], got {shown}"


def test_lancet_opt_reports_a_bad_fill_on_one_line(tmp_path: Path) -> None:
    src = tmp_path / "bad.mlir"
    src.write_text(MODULE.replace("lancet.fill = 0.5 : f64", "lancet.fill = 2.0 : f64"))
    out = tmp_path / "out.mlir"
    proc = run_tool(["lancet-opt", str(src), "-p", "simulate", "-o", str(out)])
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [  # placed at the op (issue 20 item 3)
        f"lancet-opt: error: {src}:10:5: %r1 = comm.allreduce: lancet.fill must be a number "
        "in (0, 1], got 2.000000e+00 : f64"
    ]
    assert not out.exists()
