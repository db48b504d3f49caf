"""A collective with a measured time (`lancet.time_us`, as every NCCL kernel `lancet-trace
import` writes) is never fused (review of issue #19, finding 2): its time includes waiting for
the peers, and a fused op could only be priced by the comm model (wire time alone). The
bucket planner keeps it alone, and the fusion of lancet-schedule and fuse-noncritical-comm does
not merge it. Hand MLIR: three independent all-reduces, or two on the critical path."""

from __future__ import annotations

import pytest
from helpers import function_graph, parse, run_pipeline, to_text
from xdsl.dialects.builtin import ModuleOp

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.graph.buckets import fusion_key, measured_collective, plan_buckets
from lancet_mlir.sim.blocks import simulate_module

T = "tensor<64xf32>"


def _three(measured: str) -> str:
    """%a, %b, %c: independent 256-byte all-reduces; `measured` (a name) has a lancet.time_us."""
    lines = []
    for name, arg in (("a", "%x"), ("b", "%y"), ("c", "%z")):
        attr = " {lancet.time_us = 4.0 : f64}" if name == measured else ""
        lines.append(f"  %{name} = comm.allreduce {arg}{attr} : ({T}) -> {T}")
    body = "\n".join(lines)
    return (
        f"func.func @f(%x: {T}, %y: {T}, %z: {T}) -> ({T}, {T}, {T}) {{\n{body}\n"
        f"  func.return %a, %b, %c : {T}, {T}, {T}\n}}\n"
    )


def test_a_measured_collective_is_a_bucket_of_its_own() -> None:
    module = parse(_three("b"))
    graph = function_graph(module)
    assert [measured_collective(op) for op in graph.ops[:3]] == [False, True, False]
    assert fusion_key(graph.ops[1]) is None
    assert fusion_key(graph.ops[0]) == fusion_key(graph.ops[2])
    # 256 bytes each: a 1000-byte bucket takes a and c; b stays alone, unbucketed
    buckets = plan_buckets(graph, [0, 1, 2], 1000)
    assert [(b.members, b.nbytes) for b in buckets] == [((0, 2), 512), ((1,), 256)]


@pytest.mark.parametrize(
    "spec", ["comm-bucket-fusion{bucket-bytes=1000}", "ddp-bucket-schedule{bucket-bytes=1000}"]
)
def test_bucketing_passes_leave_the_measured_collective_alone(spec: str) -> None:
    module = run_pipeline(parse(_three("b")), spec)
    text = to_text(module)
    assert "%a, %c = comm.allreduce %x, %z" in text
    assert "%b = comm.allreduce %y {lancet.time_us = 4.000000e+00 : f64}" in text
    # without a measured time all three share the bucket (768 bytes < 1000)
    assert "comm.allreduce %x, %y, %z" in to_text(run_pipeline(parse(_three("")), spec))


def _pair(measured: bool) -> str:
    """w1, w2 (1 µs) -> r1, r2 -> u1, u2 (1 µs), everything on the critical path. The h100
    table prices a 256- or 512-byte all-reduce on 8 ranks at 36.462 µs: unfused r1 [1,37.46]
    r2 [37.46,73.92] u2 [73.92,74.92], fused [2,38.46] u1 u2 [38.46,40.46]: fusing saves a
    latency. Measured at 20 µs: r1 [1,21] r2 [21,41] u2 [41,42]; the table's fused op would
    "save" 1.54 µs, but its 36.46 µs price drops what the measurement holds (waiting)."""
    attr = " {lancet.time_us = 20.0 : f64}" if measured else ""

    def op(name: str, us: float, arg: str) -> str:
        return f'  %{name} = "test.op"({arg}) {{lancet.time_us = {us} : f64}} : ({T}) -> {T}'

    return "\n".join(
        [
            "module attributes {lancet.world_size = 8 : i64} {",
            f"func.func @f(%x: {T}, %y: {T}) -> ({T}, {T}) {{",
            op("w1", 1.0, "%x"),
            op("w2", 1.0, "%y"),
            f"  %r1 = comm.allreduce %w1{attr} : ({T}) -> {T}",
            f"  %r2 = comm.allreduce %w2{attr} : ({T}) -> {T}",
            op("u1", 1.0, "%r1"),
            op("u2", 1.0, "%r2"),
            f"  func.return %u1, %u2 : {T}, {T}",
            "}",
            "}",
        ]
    )


def _makespan(module: ModuleOp) -> float:
    model = CostModel.from_config(CostConfig())
    return sum(r.summary.makespan_us for r in simulate_module(module, model) if r.top_level)


TABLE_256B_US = 36.462222  # the h100 table's 256- and 512-byte all-reduce on 8 ranks


@pytest.mark.parametrize(
    "spec", ["fuse-noncritical-comm", "lancet-schedule{partition=none max-seconds=0.1}"]
)
def test_fusion_stages_do_not_merge_measured_all_reduces(spec: str) -> None:
    plain = parse(_pair(measured=False))
    assert _makespan(plain) == pytest.approx(2 + 2 * TABLE_256B_US)
    fused = run_pipeline(plain, spec)
    assert "%r1, %r2 = comm.allreduce %w1, %w2" in to_text(fused)
    assert _makespan(fused) == pytest.approx(4 + TABLE_256B_US)
    kept = run_pipeline(parse(_pair(measured=True)), spec)
    text = to_text(kept)
    assert "%r1 = comm.allreduce %w1 {lancet.time_us = 2.000000e+01 : f64}" in text
    assert "%r2 = comm.allreduce %w2 {lancet.time_us = 2.000000e+01 : f64}" in text
    assert _makespan(kept) == pytest.approx(42.0)
