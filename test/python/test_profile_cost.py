"""Devices, roofline estimates and the cost model's priority order (lancet.time_us > profile >
roofline / comm table > 0), and the driver's eager validation of cost options."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import parse, run_tool
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block

from lancet_mlir.cost.cost_model import (
    CostConfig,
    CostModel,
)
from lancet_mlir.cost.devices import get_device
from lancet_mlir.cost.keys import op_key
from lancet_mlir.cost.profile_db import ProfileDB, ProfileEntry
from lancet_mlir.cost.roofline import matmul_time_us, roofline_time_us
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.tools.errors import UserError

H100 = get_device("h100")


# ---- devices and roofline ------------------------------------------------------------------------
def test_device_names_are_case_insensitive_and_unknown_lists_choices() -> None:
    assert get_device("H100") is H100
    assert get_device("sm_90") is H100
    assert get_device("A100").peak("bf16") == 312e12
    assert get_device("v100").peak("bf16") == 15.7e12  # no bf16 hardware: f32 rate
    with pytest.raises(UserError, match=r"unknown device 'tpu' \(choices: v100, a100, h100, h200"):
        get_device("tpu")


def test_roofline_memory_and_compute_bound() -> None:
    # gelu on 64x256 f32: 131072 FLOPs, 131072 bytes -> memory bound
    expected = 131072 / (3.35e12 * 0.8) * 1e6
    assert roofline_time_us(131072, 131072, "f32", H100) == pytest.approx(expected)
    # 1e12 bf16 FLOPs, no bytes: compute bound at 75 % of 989.4 TFLOP/s
    assert roofline_time_us(1e12, 0, "bf16", H100) == pytest.approx(1e12 / (989.4e12 * 0.75) * 1e6)


def test_matmul_on_h100_hand_computed_from_the_shipped_curve() -> None:
    # 64x128 @ 128x256: 2*64*128*256 = 4194304 FLOPs (below the table's first point 2^25).
    # tf32 rows (33554432, 5.568), (67108864, 6.584): extrapolate the first segment.
    tf32 = 5.568 - (6.584 - 5.568) * (33554432 - 4194304) / 33554432
    f32_bytes = (64 * 128 + 128 * 256 + 64 * 256) * 4
    assert matmul_time_us(4194304, f32_bytes, "f32", H100) == pytest.approx(tf32)
    # bf16 rows (33554432, 4.992), (67108864, 5.44)
    bf16 = 4.992 - (5.44 - 4.992) * (33554432 - 4194304) / 33554432
    assert matmul_time_us(4194304, f32_bytes / 2, "bf16", H100) == pytest.approx(bf16)
    # 8192^3 bf16 (2^40 FLOPs) is above the table: last slope of rows 2^38 -> 342.553,
    # 2^39 -> 697.041
    big = 697.041 + (697.041 - 342.553) * 2
    assert matmul_time_us(2 * 8192**3, 3 * 8192**2 * 2, "bf16", H100) == pytest.approx(big)


def test_matmul_without_calibration_is_plain_roofline() -> None:
    a100 = get_device("a100")
    flops, nbytes = 2 * 4096**3, 3 * 4096**2 * 2
    assert matmul_time_us(flops, nbytes, "f16", a100) == pytest.approx(
        flops / (312e12 * 0.75) * 1e6
    )


# ---- cost model priority -------------------------------------------------------------------------
MODULE = """
builtin.module attributes {lancet.world_size = 8 : i64} {
  func.func @f(%a: tensor<64x128xf32>, %b: tensor<128x256xf32>, %g: tensor<1048576xf32>) {
    %y = comp.matmul %a, %b : (tensor<64x128xf32>, tensor<128x256xf32>) -> tensor<64x256xf32>
    %t = comp.matmul %a, %b {lancet.time_us = 3.5 : f64} : (tensor<64x128xf32>, tensor<128x256xf32>) -> tensor<64x256xf32>
    %r = comm.allreduce %g : (tensor<1048576xf32>) -> tensor<1048576xf32>
    %u = "my.mystery"(%y) : (tensor<64x256xf32>) -> tensor<64x256xf32>
    %c = arith.constant dense<1.0> : tensor<4xf32>
    %h = "my.hlo"(%y) {lancet.flops = 1.0e12 : f64, lancet.bytes = 0 : i64} : (tensor<64x256xf32>) -> tensor<64x256xbf16>
    %k = "my.hlo"(%y) {lancet.flops = 0 : i64} : (tensor<64x256xf32>) -> tensor<64x256xf32>
    func.return
  }
}
"""


def _func_block(module: ModuleOp) -> Block:
    """The body of the module's first function."""
    func = module.body.block.first_op
    assert isinstance(func, FuncOp)
    return func.body.block


def _graph() -> DataflowGraph:
    return DataflowGraph.from_block(_func_block(parse(MODULE)))


def _profile(tmp_path: Path, graph: DataflowGraph, times: dict[int, float]) -> str:
    db = ProfileDB(
        {op_key(graph.ops[i]): ProfileEntry(t) for i, t in times.items()}, {"device": "h100"}
    )
    path = tmp_path / "prof.json"
    db.save(path)
    return str(path)


def test_defaults_roofline_table_and_zero() -> None:
    graph = _graph()
    model = CostModel.build(CostConfig())
    times = model.graph_times(graph)
    matmul = 5.568 - (6.584 - 5.568) * (33554432 - 4194304) / 33554432
    assert times[0] == pytest.approx(matmul)  # roofline (calibrated matmul)
    assert times[1] == 3.5  # explicit lancet.time_us
    assert times[2] == 68.672  # 4 MiB allreduce on 8 H100s: XLA's row, monotone region
    assert times[3] == 0.0  # unknown op
    assert times[4] == 0.0  # constant: zero by nature
    assert times[5] == pytest.approx(1e12 / (989.4e12 * 0.75) * 1e6)  # lancet.flops, bf16 peak
    # lancet.flops only: bytes default to operand + result bytes (2 x 64*256*4); that memory
    # term, 2 * 65536 / (3.35e12 * 0.8) s = 0.049 us, is below the 2 us launch floor
    assert 2 * 65536 / (3.35e12 * 0.8) * 1e6 < 2.0
    assert times[6] == 2.0
    assert model.warn_unknown() == ["my.mystery"]
    assert model.warn_unknown() == []  # printed once


def test_profile_beats_estimates_but_not_explicit_time(tmp_path: Path) -> None:
    graph = _graph()
    # profile entries for the matmul key (shared by ops 0 and 1), the allreduce, the mystery op
    path = _profile(tmp_path, graph, {0: 9.0, 2: 80.0, 3: 1.25})
    model = CostModel.build(CostConfig(profiles=(path,)))
    times = model.graph_times(graph)
    assert times[:4] == [9.0, 3.5, 80.0, 1.25]
    assert model.unknown_ops() == []


def test_group_size_from_world_size_override() -> None:
    graph = _graph()
    model = CostModel.build(CostConfig(world_size=2))
    # 4 MiB allreduce on 2 H100s: XLA rows 44.128 us (2 MiB) and 43.136 us (4 MiB) violate
    # monotonicity and are pooled to their mean
    assert model.graph_times(graph)[2] == pytest.approx((44.128 + 43.136) / 2)
    assert model.op_time_us(graph.ops[2], world_size=8) == 68.672
    assert model.op_time_us(graph.ops[2], world_size=1) == 0.0


def test_user_comm_table_overrides_device_table(tmp_path: Path) -> None:
    table = tmp_path / "mine.csv"
    table.write_text(
        "kind,group_size,bytes,time_us\nallreduce,8,1000000,100\nallreduce,8,8000000,800\n"
    )
    graph = _graph()
    model = CostModel.build(CostConfig(comm_tables=(str(table),)))
    assert model.graph_times(graph)[2] == pytest.approx(100 + 700 * (4194304 - 1e6) / 7e6)


def test_a100_uses_nccl_model_and_notes_it() -> None:
    graph = _graph()
    model = CostModel.build(CostConfig(device="A100"))
    # 4 MiB allreduce on 8 A100s, NCCL's ring model (cost/nccl_model.py), 14 steps:
    # LL128 14.0 + 14 * 1.9 us + 4 MiB * 1.75 / (0.92 * 240 GB/s) = 73.84 us beats
    # Simple 8.4 + 14 * 3.4 + 4 MiB * 1.75 / 240 GB/s = 86.58 us and LL (60 GB/s) 137.3 us
    assert model.graph_times(graph)[2] == pytest.approx(14 + 14 * 1.9 + 4194304 * 1.75 / 220.8e3)
    assert model.notes == [
        "allreduce: no measured table; used NCCL's ring model (LL/LL128/Simple, busbw 240 GB/s, "
        "LL at most 87.7 GB/s)"
    ]


def test_profile_of_other_device_is_noted(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    ProfileDB({}, {"device": "a100"}).save(path)
    model = CostModel.build(CostConfig(profiles=(str(path),)))
    assert model.notes == [
        f"{path}: measured on a100, costing for h100: profiled times are used as they are"
    ]


def test_bad_inputs_raise_user_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "lancet-profile", "version": 1, "entries": {"k": {"mean_us": -1}}}')
    with pytest.raises(UserError, match=str(bad)):
        CostModel.build(CostConfig(profiles=(str(bad),)))
    with pytest.raises(UserError, match="unknown device"):
        CostModel.build(CostConfig(device="z80"))
    with pytest.raises(UserError, match="no such file"):
        CostModel.build(CostConfig(comm_tables=(str(tmp_path / "none.csv"),)))
    module = parse('%x = "my.op"() {lancet.time_us = -2.0 : f64} : () -> tensor<4xf32>\n')
    op = module.body.block.first_op
    assert op is not None
    with pytest.raises(UserError, match="my.op: lancet.time_us must be a finite number >= 0"):
        CostModel.from_config(CostConfig()).op_time_us(op)


def test_cache_and_default_config() -> None:
    cfg = CostConfig(device="h200")
    assert CostModel.from_config(cfg) is CostModel.from_config(cfg)
    assert CostModel.from_config(cfg).notes == [
        "h200: no comm table of its own; using comm_h100.csv (same interconnect generation)"
    ]
    assert CostModel.from_config(CostConfig()).device is H100  # no device, no cluster: h100


def test_graph_times_of_a_repetitive_block() -> None:
    # 1200 ops of three signatures: every op of a signature costs the same; unknown ops 0
    lines = [
        "builtin.module attributes {lancet.world_size = 8 : i64} {",
        "func.func @f(%a: tensor<64x128xf32>, %b: tensor<128x256xf32>) {",
    ]
    for n in range(400):
        lines.append(
            f"  %y{n} = comp.matmul %a, %b : (tensor<64x128xf32>, tensor<128x256xf32>) "
            "-> tensor<64x256xf32>"
        )
        lines.append(f"  %r{n} = comm.allreduce %y{n} : (tensor<64x256xf32>) -> tensor<64x256xf32>")
        lines.append(f'  %u{n} = "my.op"(%r{n}) : (tensor<64x256xf32>) -> tensor<64x256xf32>')
    lines += ["  func.return", "}", "}"]
    graph = DataflowGraph.from_block(_func_block(parse("\n".join(lines))))
    model = CostModel.build(CostConfig())
    times = model.graph_times(graph)
    assert len(times) == 1200
    assert times[2] == 0.0
    assert len(set(times[0::3])) == 1
    assert times[0] > 0
    assert len(set(times[1::3])) == 1
    assert times[1] > 0
    assert times[0] == model.op_time_us(graph.ops[0])


# ---- multi-node collectives ---------------------------------------------------------------------
# 64 MiB payloads (16777216 f32); world size 8 in the module, overridden per call
MULTINODE = """
builtin.module attributes {lancet.world_size = 8 : i64} {
  func.func @f(%x: tensor<16777216xf32>, %s: tensor<1048576xf32>) {
    %a = comm.all_to_all %x split 0 concat 0 : (tensor<16777216xf32>) -> tensor<16777216xf32>
    %r = comm.allreduce %x : (tensor<16777216xf32>) -> tensor<16777216xf32>
    %q = comm.allreduce %s : (tensor<1048576xf32>) -> tensor<1048576xf32>
    func.return
  }
}
"""
S64 = 67108864


def _multinode_ops() -> list:
    return list(_func_block(parse(MULTINODE)).ops)[:3]


def test_h100_devices_network_fields() -> None:
    assert (H100.gpus_per_node, H100.internode_gbps_per_gpu, H100.internode_latency_us) == (
        8,
        400.0,
        15.0,
    )
    assert get_device("a100").internode_gbps_per_gpu == 200.0
    assert get_device("v100").internode_gbps_per_gpu == 12.5
    assert get_device("gb200").gpus_per_node == 72
    assert H100.min_kernel_us == 2.0


def test_h100_multinode_all_to_all_and_allreduce_hand_computed() -> None:
    a2a, ar, small = _multinode_ops()
    model = CostModel.build(CostConfig())
    # 8 ranks: the XLA rows as before (64 MiB: all-to-all 218.72 us, all-reduce 379.808 us)
    assert model.op_time_us(a2a) == 218.72
    assert model.op_time_us(ar) == 379.808
    assert model.notes == []
    # network: 400 Gb/s per GPU x 0.8 = 40e9 B/s = 40000 B/us, latency 15 us.
    # all-to-all on 16 ranks (2 nodes): half of the 64 MiB leaves the node through each NIC
    assert model.op_time_us(a2a, world_size=16) == pytest.approx(15 + S64 / 2 / 40000)  # 853.86
    # 32 ranks (4 nodes): 24/32 of it
    assert model.op_time_us(a2a, world_size=32) == pytest.approx(15 + S64 * 0.75 / 40000)
    # ring all-reduce on 16 ranks: 2*15/16 x 64 MiB leaves each node over its 8 NICs:
    # 15 + 15728640 / 40000 = 408.216 us, above the 8-rank table's 379.808 us
    assert model.op_time_us(ar, world_size=16) == pytest.approx(15 + S64 * 2 * 15 / 16 / 8 / 40000)
    assert model.op_time_us(ar, world_size=32) == pytest.approx(15 + S64 * 2 * 31 / 32 / 8 / 40000)
    # 4 MiB all-reduce on 16 ranks: network 15 + 24.576 us < 8-rank table 68.672 us
    assert model.op_time_us(small, world_size=16) == 68.672
    assert model.notes == [
        f"{kind}: group size {g} spans {g // 8} nodes of 8 GPUs; used the larger of the "
        "intra-node measured table at group size 8 and the inter-node alpha-beta model "
        "(400 Gb/s per GPU x 0.8 efficiency, latency 15 us)"
        for kind, g in (
            ("all_to_all", 16),
            ("all_to_all", 32),
            ("allreduce", 16),
            ("allreduce", 32),
        )
    ]


def test_a100_multinode_allreduce_hand_computed() -> None:
    _, _, small = _multinode_ops()
    model = CostModel.build(CostConfig(device="a100", world_size=16))
    # NCCL's ring model on 8 ranks: LL128 40.6 + 4 MiB * 1.75 / 220.8 GB/s = 73.84 us;
    # network: 200 Gb/s x 0.8 = 20000 B/us: 15 + 4 MiB * 2*15/16/8 / 20000 = 64.152 us
    assert model.op_time_us(small) == pytest.approx(14 + 14 * 1.9 + 4194304 * 1.75 / 220.8e3)
    assert "intra-node NCCL ring model at group size 8" in model.notes[0]


def test_gb200_nvl72_stays_within_its_nvlink_domain() -> None:
    a2a, _, _ = _multinode_ops()
    model = CostModel.build(CostConfig(device="gb200", world_size=32))
    table = CostModel.build(CostConfig(device="gb200")).comm.curves[("all_to_all", 32)]
    assert model.op_time_us(a2a) == table(S64)  # measured at 32 ranks, one NVL72 domain
    assert model.notes == []


def test_user_table_measured_at_16_ranks_beats_the_network_model(tmp_path: Path) -> None:
    table = tmp_path / "a2a16.csv"
    table.write_text("kind,group_size,bytes,time_us\nall_to_all,16,67108864,1500\n")
    a2a, _, _ = _multinode_ops()
    model = CostModel.build(CostConfig(comm_tables=(str(table),), world_size=16))
    assert model.op_time_us(a2a) == 1500.0
    assert model.op_time_us(a2a, world_size=8) == 218.72  # the shipped 8-rank rows remain
    assert model.notes == []


# ---- launch floor --------------------------------------------------------------------------------
FLOOR = """
builtin.module {
  func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>, %z: tensor<0xf32>) {
    %s = comp.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %p = comp.mul %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %t = comp.sub %a, %b {lancet.time_us = 0.25 : f64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %r = comp.reshape %a {shape = array<i64: 2, 2>} : (tensor<4xf32>) -> tensor<2x2xf32>
    %x = comp.transpose %r {perm = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
    %e = "my.free"(%a) {lancet.flops = 0 : i64, lancet.bytes = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
    func.return
  }
}
"""


def test_launch_floor_applies_to_estimates_only(tmp_path: Path) -> None:
    graph = DataflowGraph.from_block(_func_block(parse(FLOOR)))
    add_estimate = 3 * 16 / (3.35e12 * 0.8) * 1e6  # 2 inputs + 1 output of 16 bytes
    assert add_estimate < 0.001
    db = ProfileDB({op_key(graph.ops[1]): ProfileEntry(0.5)}, {"device": "h100"})
    db.save(tmp_path / "p.json")
    model = CostModel.build(CostConfig(profiles=(str(tmp_path / "p.json"),)))
    times = model.graph_times(graph)
    assert times[0] == 2.0  # tiny add: roofline estimate raised to min_kernel_us
    assert times[1] == 0.5  # profiled: a measurement is never floored
    assert times[2] == 0.25  # explicit lancet.time_us: never floored
    assert times[3] == 0.0  # reshape: a view on GPUs, no kernel
    assert times[4] == 2.0  # transpose: a real copy kernel on GPUs
    assert times[5] == 0.0  # 0 FLOPs and 0 bytes: nothing runs


# ---- the driver ----------------------------------------------------------------------------------
GOOD = """func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %r = comm.allreduce %x : (tensor<8xf32>) -> tensor<8xf32>
  func.return %r : tensor<8xf32>
}
"""


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--device", "k80"],
            "lancet-opt: error: --device: unknown device 'k80' (choices: v100, a100, h100",
        ),
        (
            ["--profile", "{tmp}/missing.json"],
            "lancet-opt: error: {tmp}/missing.json: no such file",
        ),
        (["--profile", "{tmp}/nan.json"], "lancet-opt: error: {tmp}/nan.json: NaN is not a valid"),
        (["--comm-table", "{tmp}/sup.csv"], "looks like a Lancet supplement CSV"),
    ],
)
def test_lancet_opt_validates_cost_options(tmp_path: Path, flags: list[str], message: str) -> None:
    (tmp_path / "m.mlir").write_text(GOOD)
    (tmp_path / "nan.json").write_text(
        '{"format": "lancet-profile", "version": 1, "entries": {"k": {"mean_us": NaN}}}'
    )
    (tmp_path / "sup.csv").write_text("256,21\n1024,22\n")
    argv = ["lancet-opt", str(tmp_path / "m.mlir"), "-o", str(tmp_path / "out.mlir")]
    argv += [f.replace("{tmp}", str(tmp_path)) for f in flags]
    run = run_tool(argv)
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr  # one error line, no traceback
    assert message.replace("{tmp}", str(tmp_path)) in lines[0]
    assert lines[0].startswith("lancet-opt: error: ")
    assert not (tmp_path / "out.mlir").exists()


def test_lancet_opt_accepts_good_cost_options(tmp_path: Path) -> None:
    (tmp_path / "m.mlir").write_text(GOOD)
    ProfileDB({"comm.allreduce;T<8xf32>,|T<8xf32>": ProfileEntry(4.0)}, {"device": "h100"}).save(
        tmp_path / "p.json"
    )
    run = run_tool(
        [
            "lancet-opt",
            str(tmp_path / "m.mlir"),
            "--profile",
            str(tmp_path / "p.json"),
            "--device",
            "H100",
            "--world-size",
            "4",
        ]
    )
    assert run.returncode == 0, run.stderr
    assert "comm.allreduce" in run.stdout
