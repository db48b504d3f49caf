"""Destination-passing rebuilds (issue 21): a `comp.concat {in_place = true}` whose parts are
written into its buffer, and a partial sum `comp.add {in_place = true}` that the part's GEMM
accumulates, cost nothing, where and only where a GPU can do that (`dialects/destination.py`),
and the runtime executes them that way; so does a `comp.split` into contiguous row blocks
(views)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    body_ops,
    function_graph,
    kernel_name,
    parse,
    run_pipeline,
    run_tool,
    to_text,
)
from xdsl.dialects.builtin import ModuleOp

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.dialects.comp import AddOp, ConcatOp, SplitOp
from lancet_mlir.dialects.destination import (
    accumulates_in_place,
    accumulation_ok,
    in_place_concat,
    mark_accumulate,
    mark_in_place,
    view_split,
    writer_of,
)
from lancet_mlir.models.gpt2_moe import GPT2MoEConfig, build_gpt2_moe
from lancet_mlir.partition.axes import solve_axes
from lancet_mlir.partition.base import shape_of
from lancet_mlir.partition.estimate import estimate_range
from lancet_mlir.partition.region import build_region, simulate_range
from lancet_mlir.partition.rules import PARTIAL
from lancet_mlir.runtime import compare_modules, execute
from lancet_mlir.runtime.kernels import INTO, kernel_runner, kernel_runner_into

# Two parts of 512 rows (a matmul's and a gelu's, explicit times 30 and 20 µs) rebuilt into
# [1024, 1024] and read by a scale (5 µs). FLAG is the concat's in_place property.
BLOCK = """
builtin.module attributes {lancet.world_size = 1 : i64} {
  func.func @f(%x: tensor<512x1024xf32>, %w: tensor<1024x1024xf32>) -> (tensor<1024x1024xf32>, tensor<1024x1024xf32>, tensor<512x1024xf32>) {
    %a0 = comp.matmul %x, %w {lancet.time_us = 30.0 : f64} : (tensor<512x1024xf32>, tensor<1024x1024xf32>) -> tensor<512x1024xf32>
    %a1 = comp.gelu %x {lancet.time_us = 20.0 : f64} : (tensor<512x1024xf32>) -> tensor<512x1024xf32>
    %c = comp.concat %a0, %a1 FLAG : (tensor<512x1024xf32>, tensor<512x1024xf32>) -> tensor<1024x1024xf32>
    %s = comp.scale %c {alpha = 2.0 : f64, lancet.time_us = 5.0 : f64} : (tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    func.return %s, %c, %a0 : tensor<1024x1024xf32>, tensor<1024x1024xf32>, tensor<512x1024xf32>
  }
}
"""

COPY_US = 2 * 1024 * 1024 * 4 / (900e9 * 0.8) * 1e6
"""The copy the concat is without in_place, by hand: V100 roofline, 4 MiB read + 4 MiB
written at 0.8 x 900 GB/s = 11.650844 µs (above the 2 µs launch floor)."""


def block(flag: str) -> ModuleOp:
    return parse(BLOCK.replace("FLAG", flag))


def concat_of(module: ModuleOp) -> ConcatOp:
    return next(op for op in body_ops(module) if isinstance(op, ConcatOp))


def test_an_in_place_rebuild_costs_nothing_and_the_makespan_drops_by_the_copy(
    tmp_path: Path,
) -> None:
    model = CostModel.build(CostConfig(device="v100"))
    copy, placed = concat_of(block("")), concat_of(block("{in_place = true}"))
    assert COPY_US == pytest.approx(11.650844, abs=1e-6)
    assert model.time_and_source(copy) == (pytest.approx(COPY_US, rel=1e-12), "roofline")
    assert model.time_and_source(placed) == (0.0, "in-place")
    # one compute stream, in order: 30 + 20 (+ the copy) + 5
    for flag, want in (("", 55.0 + COPY_US), ("{in_place = true}", 55.0)):
        report = tmp_path / "r.json"
        run_pipeline(block(flag), f'simulate{{device=v100 report="{report}"}}')
        assert json.loads(report.read_text())["makespan_us"] == pytest.approx(want, rel=1e-12)


def test_the_runtime_writes_the_parts_into_the_concat_buffer() -> None:
    plain = execute(block(""), seed=3).outputs[0]
    placed = execute(block("{in_place = true}"), seed=3).outputs[0]
    for a, b in zip(plain, placed, strict=True):
        assert np.array_equal(a, b)
    # the part the function returns is the first half of the concat's buffer, not a copy
    scaled, joined, part = placed
    assert np.shares_memory(joined, part)
    assert part.__array_interface__["data"][0] == joined.__array_interface__["data"][0]
    assert not np.shares_memory(plain[1], plain[2])


def cases() -> dict[str, tuple[str, bool]]:
    """Module bodies (one concat %c) and whether the concat may be written in place."""
    t = "tensor<4x2xf32>"
    return {
        "rows": (
            f"""%a = comp.gelu %x : ({t}) -> {t}
    %b = comp.add %x, %x : ({t}, {t}) -> {t}
    %c = comp.concat %a, %b : ({t}, {t}) -> tensor<8x2xf32>""",
            True,
        ),
        # axis 1 of [4, 2]: each part is 4 rows of 2 with a stride: a copy
        "strided": (
            f"""%a = comp.gelu %x : ({t}) -> {t}
    %b = comp.add %x, %x : ({t}, {t}) -> {t}
    %c = comp.concat %a, %b {{axis = 1 : i64}} : ({t}, {t}) -> tensor<4x4xf32>""",
            False,
        ),
        # axis 1 after a leading 1: contiguous again
        "leading-one": (
            """%r = comp.reshape %x {shape = array<i64: 1, 4, 2>} : (tensor<4x2xf32>) -> tensor<1x4x2xf32>
    %a = comp.gelu %r : (tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
    %b = comp.scale %r {alpha = 3.0 : f64} : (tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
    %c = comp.concat %a, %b {axis = 1 : i64} : (tensor<1x4x2xf32>, tensor<1x4x2xf32>) -> tensor<1x8x2xf32>""",
            True,
        ),
        "block-argument": (
            f"""%a = comp.gelu %x : ({t}) -> {t}
    %c = comp.concat %a, %x : ({t}, {t}) -> tensor<8x2xf32>""",
            False,
        ),
        # split results are views of %x's buffer: their bytes are not theirs to place
        "split-views": (
            f"""%p, %q = comp.split %x {{num = 2 : i64}} : ({t}) -> (tensor<2x2xf32>, tensor<2x2xf32>)
    %c = comp.concat %p, %q : (tensor<2x2xf32>, tensor<2x2xf32>) -> {t}""",
            False,
        ),
        # a reshape of a transpose: the transpose writes the slice, the reshape views it
        "through-a-reshape": (
            f"""%t = comp.transpose %x {{perm = array<i64: 1, 0>}} : ({t}) -> tensor<2x4xf32>
    %r = comp.reshape %t {{shape = array<i64: 4, 2>}} : (tensor<2x4xf32>) -> {t}
    %a = comp.gelu %x : ({t}) -> {t}
    %c = comp.concat %r, %a : ({t}, {t}) -> tensor<8x2xf32>""",
            True,
        ),
        "one-value-twice": (
            f"""%a = comp.gelu %x : ({t}) -> {t}
    %c = comp.concat %a, %a : ({t}, {t}) -> tensor<8x2xf32>""",
            False,
        ),
    }


def case_module(body: str) -> ModuleOp:
    """A function of %x: tensor<4x2xf32> running `body` and returning its concat %c."""
    ty = _result_type(body)
    return parse(f"""builtin.module {{
  func.func @f(%x: tensor<4x2xf32>) -> {ty} {{
    {body}
    func.return %c : {ty}
  }}
}}""")


def _result_type(body: str) -> str:
    line = next(ln for ln in body.splitlines() if "%c = comp.concat" in ln)
    return line.rsplit("-> ", 1)[1].strip()


@pytest.mark.parametrize("name", sorted(cases()))
def test_where_a_gpu_can_write_the_parts_in_place(name: str) -> None:
    body, allowed = cases()[name]
    plain = case_module(body)
    module = case_module(body)
    concat = concat_of(module)
    assert mark_in_place(concat) is allowed
    assert in_place_concat(concat) is allowed
    assert ("in_place" in concat.properties) is allowed
    # whatever was decided, the values are those of the plain concat
    a, b = execute(plain, seed=1).outputs[0], execute(module, seed=1).outputs[0]
    assert np.array_equal(a[0], b[0])


def test_the_writer_is_found_through_reshapes() -> None:
    module = case_module(cases()["through-a-reshape"][0])
    concat = concat_of(module)
    found = writer_of(concat.operands[0])
    assert found is not None
    writer, chain = found
    assert writer.name == "comp.transpose"
    assert [getattr(v.owner, "name", None) for v in chain] == ["comp.reshape", "comp.transpose"]


def test_a_writer_has_one_place() -> None:
    t = "tensor<4x2xf32>"
    module = parse(f"""builtin.module {{
  func.func @f(%x: {t}) -> (tensor<8x2xf32>, tensor<8x2xf32>) {{
    %a = comp.gelu %x : ({t}) -> {t}
    %b = comp.add %x, %x : ({t}, {t}) -> {t}
    %e = comp.scale %x {{alpha = 2.0 : f64}} : ({t}) -> {t}
    %c = comp.concat %a, %b : ({t}, {t}) -> tensor<8x2xf32>
    %d = comp.concat %a, %e : ({t}, {t}) -> tensor<8x2xf32>
    func.return %c, %d : tensor<8x2xf32>, tensor<8x2xf32>
  }}
}}""")
    first, second = [op for op in body_ops(module) if isinstance(op, ConcatOp)]
    assert mark_in_place(first)
    assert not mark_in_place(second)  # %a already lives in the first buffer
    outs = execute(module, seed=2).outputs[0]
    assert np.array_equal(outs[0][:4], outs[1][:4])


def test_a_marked_concat_whose_structure_broke_is_a_copy_again() -> None:
    """`in_place = true` on a concat of a block argument (hand-written, or an IR edit after
    the pass): costed as the copy it is and executed as one."""
    text = BLOCK.replace("FLAG", "{in_place = true}").replace(
        "%c = comp.concat %a0, %a1", "%c = comp.concat %a0, %x"
    )
    module = parse(text)
    concat = concat_of(module)
    model = CostModel.build(CostConfig(device="v100"))
    assert not in_place_concat(concat)
    assert model.time_and_source(concat) == (pytest.approx(COPY_US, rel=1e-12), "roofline")
    outs = execute(module, seed=4).outputs[0]
    plain = execute(parse(text.replace("{in_place = true}", "")), seed=4).outputs[0]
    assert np.array_equal(outs[1], plain[1])
    assert not np.shares_memory(outs[1], outs[2])


INTO_CASES = {
    "add": [(3, 4), (3, 4)],
    "sub": [(3, 4), (3, 4)],
    "mul": [(3, 4), (3, 4)],
    "bias_add": [(3, 4), (4,)],
    "gelu": [(3, 4)],
    "layer_norm": [(3, 4), (4,), (4,)],
    "softmax": [(2, 3, 4)],
    "matmul": [(3, 5), (5, 4)],
    "batch_matmul": [(2, 3, 5), (2, 5, 4)],
}


@pytest.mark.parametrize("name", sorted(INTO_CASES))
def test_out_kernels_write_the_same_values_into_the_destination(name: str) -> None:
    assert name in INTO
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in INTO_CASES[name]]
    (want,) = kernel_runner(name)(inputs)
    buffer = np.full((2 * want.shape[0], *want.shape[1:]), np.nan, np.float32)
    dest = buffer[want.shape[0] :]
    (got,) = kernel_runner_into(name)(inputs, [dest])
    assert got is dest
    assert np.array_equal(buffer[want.shape[0] :], want)
    assert np.isnan(buffer[: want.shape[0]]).all()


def test_a_kernel_without_out_is_copied_into_its_slice() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert "transpose" not in INTO
    dest = np.zeros((4, 3), np.float32)
    (got,) = kernel_runner_into("transpose", {"perm": (1, 0)})([x], [dest])
    assert got is dest
    assert np.array_equal(dest, x.T)


MODEL = GPT2MoEConfig(layers=2, hidden=8, heads=2, seq=4, batch=4, world_size=2,
                      experts_per_rank=2, vocab=11)  # fmt: skip
"""A small lancet-model preset: 16 tokens, one MoE layer of 4 experts on 2 ranks."""


def test_token_parts_rebuilt_in_place_keep_the_values_under_lancet_run_compare(
    tmp_path: Path,
) -> None:
    source, parted = tmp_path / "m.mlir", tmp_path / "p.mlir"
    source.write_text(to_text(build_gpt2_moe(MODEL)))
    module = run_pipeline(build_gpt2_moe(MODEL), "moe-partition{axis=token parts=4}")
    parted.write_text(to_text(module))
    concats = [op for op in body_ops(module) if isinstance(op, ConcatOp)]
    placed = [op for op in concats if in_place_concat(op)]
    sums = [op for op in body_ops(module) if accumulates_in_place(op)]
    assert (len(placed), len(sums)) == (25, 6)
    assert parted.read_text().count("in_place = true") == 25 + 6
    done = run_tool(["lancet-run", "--ranks", "2", "--compare", str(source), str(parted)])
    assert done.returncode == 0, done.stdout + done.stderr


# Two weight-gradient parts (matmul_dw over 512 rows each, explicit 30 and 20 µs) added up
# into [1024, 1024] (4 MiB each) and read by a scale (5 µs). FLAG is the add's property.
SUMS = """
builtin.module attributes {lancet.world_size = 1 : i64} {
  func.func @f(%x: tensor<1024x1024xf32>, %d: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
    %x0, %x1 = comp.split %x {num = 2 : i64} : (tensor<1024x1024xf32>) -> (tensor<512x1024xf32>, tensor<512x1024xf32>)
    %d0, %d1 = comp.split %d {num = 2 : i64} : (tensor<1024x1024xf32>) -> (tensor<512x1024xf32>, tensor<512x1024xf32>)
    %w0 = comp.matmul_dw %x0, %d0 {lancet.time_us = 30.0 : f64} : (tensor<512x1024xf32>, tensor<512x1024xf32>) -> tensor<1024x1024xf32>
    %w1 = comp.matmul_dw %x1, %d1 {lancet.time_us = 20.0 : f64} : (tensor<512x1024xf32>, tensor<512x1024xf32>) -> tensor<1024x1024xf32>
    %w = comp.add %w0, %w1 FLAG : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    %s = comp.scale %w {alpha = 2.0 : f64, lancet.time_us = 5.0 : f64} : (tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    func.return %s : tensor<1024x1024xf32>
  }
}
"""

ADD_US = 3 * 1024 * 1024 * 4 / (900e9 * 0.8) * 1e6
"""The add kernel by hand: V100 roofline, 2 x 4 MiB read + 4 MiB written at 0.8 x 900 GB/s
= 17.476267 µs (its 1M FLOPs take 0.08 µs at 0.75 x 15.7 TFLOP/s)."""


def add_of(module: ModuleOp) -> AddOp:
    return next(op for op in body_ops(module) if isinstance(op, AddOp))


def test_a_partial_sum_accumulated_in_place_costs_nothing(tmp_path: Path) -> None:
    model = CostModel.build(CostConfig(device="v100"))
    plain = parse(SUMS.replace("FLAG", ""))
    assert ADD_US == pytest.approx(17.476267, abs=1e-6)
    assert model.time_and_source(add_of(plain)) == (pytest.approx(ADD_US, rel=1e-12), "roofline")
    assert accumulation_ok(add_of(plain))
    assert not accumulates_in_place(add_of(plain))
    placed = parse(SUMS.replace("FLAG", "{in_place = true}"))
    assert model.time_and_source(add_of(placed)) == (0.0, "in-place")
    for module, want in ((plain, 55.0 + ADD_US), (placed, 55.0)):  # + the splits (views)
        report = tmp_path / "r.json"
        run_pipeline(module, f'simulate{{device=v100 report="{report}"}}')
        splits = sum(model.op_time_us(op) for op in body_ops(module) if op.name == "comp.split")
        got = json.loads(report.read_text())["makespan_us"]
        assert got == pytest.approx(want + splits, rel=1e-12)
    a = execute(parse(SUMS.replace("FLAG", "")), seed=5).outputs[0][0]
    b = execute(parse(SUMS.replace("FLAG", "{in_place = true}")), seed=5).outputs[0][0]
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-5)


def sum_case(body: str) -> ModuleOp:
    t = "tensor<4x2xf32>"
    return parse(f"""builtin.module {{
  func.func @f(%x: {t}, %y: {t}) -> tensor<2x2xf32> {{
    {body}
    func.return %w : tensor<2x2xf32>
  }}
}}""")


DW = "(tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<2x2xf32>"
SUM_CASES = {
    "two-gemms": (
        f"""%a = comp.matmul_dw %x, %y : {DW}
    %b = comp.matmul_dw %y, %x : {DW}
    %w = comp.add %a, %b : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>""",
        True,
    ),
    # the part's producer has no beta: a gelu writes its own buffer
    "not-a-gemm": (
        f"""%a = comp.matmul_dw %x, %y : {DW}
    %g = comp.matmul_dw %y, %x : {DW}
    %b = comp.gelu %g : (tensor<2x2xf32>) -> tensor<2x2xf32>
    %w = comp.add %a, %b : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>""",
        False,
    ),
    # the running sum is read again: its buffer may not be overwritten
    "total-read-twice": (
        f"""%a = comp.matmul_dw %x, %y : {DW}
    %b = comp.matmul_dw %y, %x : {DW}
    %s = comp.add %a, %b : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    %w = comp.add %s, %a : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>""",
        False,
    ),
    # broadcasting: the part is not the sum's shape
    "broadcast": (
        f"""%a = comp.matmul_dw %x, %y : {DW}
    %r = comp.reduce_sum %x : (tensor<4x2xf32>) -> tensor<2xf32>
    %w = comp.add %a, %r : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>""",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(SUM_CASES))
def test_where_a_gemm_can_accumulate_a_partial_sum(name: str) -> None:
    body, allowed = SUM_CASES[name]
    module = sum_case(body)
    add = [op for op in body_ops(module) if isinstance(op, AddOp)][-1]
    assert mark_accumulate(add) is allowed
    assert accumulates_in_place(add) is allowed
    want = execute(sum_case(body), seed=6).outputs[0][0]
    np.testing.assert_allclose(execute(module, seed=6).outputs[0][0], want, rtol=1e-6)


def test_a_chain_of_three_parts_accumulates_in_place() -> None:
    module = sum_case(f"""%a = comp.matmul_dw %x, %y : {DW}
    %b = comp.matmul_dw %y, %x : {DW}
    %c = comp.matmul_dw %x, %x : {DW}
    %s = comp.add %a, %b : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    %w = comp.add %s, %c : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>""")
    first, second = [op for op in body_ops(module) if isinstance(op, AddOp)]
    assert not mark_accumulate(second)  # its total is not an accumulation yet
    assert mark_accumulate(first)
    assert mark_accumulate(second)
    first.properties.pop("in_place")  # a broken link: the rest of the chain is an add again
    assert not accumulates_in_place(second)


def test_token_parts_accumulate_the_expert_weight_gradients() -> None:
    """On the small preset with 4 token parts, the 6 partial sums are the expert FFN's
    weight gradients (batch_matmul_dw parts): all accumulated in place, values unchanged."""
    module = run_pipeline(build_gpt2_moe(MODEL), "moe-partition{axis=token parts=4}")
    sums = [op for op in body_ops(module) if isinstance(op, AddOp) and accumulates_in_place(op)]
    assert len(sums) == 6
    assert {kernel_name(op.operands[1].owner) for op in sums} == {"batch_matmul_dw"}
    assert compare_modules(build_gpt2_moe(MODEL), module, ranks=2).ok


REGION = """builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @f(%x: tensor<8x4xf32>, %dy: tensor<8x4xf32>) -> (tensor<4x4xf32>, tensor<8x4xf32>) {
    %h = comp.gelu %x : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %e = comm.all_to_all %h : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %w = comp.matmul_dw %e, %dy : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
    %g = comp.gelu %e : (tensor<8x4xf32>) -> tensor<8x4xf32>
    func.return %w, %g : tensor<4x4xf32>, tensor<8x4xf32>
  }
}"""
"""A region around an all-to-all in blocks of 2 ranks: the matmul_dw gives partial sums."""


@pytest.mark.parametrize("n", [2, 3])
def test_the_template_estimate_sees_the_accumulation_as_the_built_region_does(n: int) -> None:
    graph = function_graph(parse(REGION))
    nodes = list(range(len(graph)))
    solution = solve_axes(graph, nodes, [1], parts=n)
    assert solution is not None
    assert solution.options[2][1] == (PARTIAL,)

    def time_of(op) -> float:  # as every cost model: the in-place ops cost 0
        if in_place_concat(op) or accumulates_in_place(op):
            return 0.0
        return 1.0 + sum(float(sum(shape_of(r) or ())) for r in op.results)

    region = build_region(graph, solution, n)
    sums = [op for op in region.epilogue if isinstance(op, AddOp)]
    assert len(sums) == n - 1
    assert all(accumulates_in_place(op) for op in sums)
    built = simulate_range(graph, nodes, time_of, region).makespan_us
    region.discard()
    assert estimate_range(graph, nodes, solution, n, time_of) == built
    assert built == {2: 188.0, 3: 236.0}[n]


def test_a_writer_reached_through_two_sibling_views_has_one_place() -> None:
    # an outside review: %a feeds two concats through two different reshapes; both marked,
    # both were costed 0 (each concat only looked at its own path to the writer)
    t = "tensor<512x1024xf32>"
    module = parse(
        f"""builtin.module attributes {{lancet.world_size = 1 : i64}} {{
  func.func @f(%x: {t}, %y: {t}) -> (tensor<1024x1024xf32>, tensor<1024x1024xf32>) {{
    %a = comp.gelu %x {{lancet.time_us = 20.0 : f64}} : ({t}) -> {t}
    %b = comp.gelu %y {{lancet.time_us = 20.0 : f64}} : ({t}) -> {t}
    %e = comp.scale %y {{alpha = 2.0 : f64, lancet.time_us = 20.0 : f64}} : ({t}) -> {t}
    %r1 = comp.reshape %a {{shape = array<i64: 512, 1024>}} : ({t}) -> {t}
    %r2 = comp.reshape %a {{shape = array<i64: 512, 1024>}} : ({t}) -> {t}
    %c = comp.concat %r1, %b FLAG : ({t}, {t}) -> tensor<1024x1024xf32>
    %d = comp.concat %r2, %e FLAG : ({t}, {t}) -> tensor<1024x1024xf32>
    func.return %c, %d : tensor<1024x1024xf32>, tensor<1024x1024xf32>
  }}
}}""".replace("FLAG", "{in_place = true}")
    )
    cm = CostModel.build(CostConfig(device="v100"))
    first, second = [op for op in body_ops(module) if isinstance(op, ConcatOp)]
    # both marked by hand: each sees the other claim %a, so both are costed as copies
    assert not in_place_concat(first)
    assert not in_place_concat(second)
    assert [cm.time_and_source(op)[1] for op in (first, second)] != ["in-place", "in-place"]
    assert cm.time_and_source(second)[0] == pytest.approx(COPY_US)
    # a pass marks one at a time: the first is placed, the second stays a copy
    for op in (first, second):
        op.properties.pop("in_place")
    assert mark_in_place(first)
    assert not mark_in_place(second)
    assert in_place_concat(first)
    assert cm.time_and_source(first) == (0.0, "in-place")
    outs = execute(module, seed=3).outputs[0]
    assert np.array_equal(outs[0][:512], outs[1][:512])


# A [1024, 1024] gelu split in two: along axis 0 (two row blocks of 512: views) or along
# axis 1 (two column blocks: strided, copies); each part read by a scale.
SPLIT = """
builtin.module attributes {lancet.world_size = 1 : i64} {
  func.func @f(%x: tensor<SHAPE>) -> (tensor<PART>, tensor<PART>, tensor<SHAPE>) {
    %g = comp.gelu %x {lancet.time_us = 20.0 : f64} : (tensor<SHAPE>) -> tensor<SHAPE>
    %p:2 = comp.split %g {axis = AXIS : i64, num = 2 : i64} : (tensor<SHAPE>) -> (tensor<PART>, tensor<PART>)
    %a = comp.scale %p#0 {alpha = 2.0 : f64, lancet.time_us = 5.0 : f64} : (tensor<PART>) -> tensor<PART>
    func.return %a, %p#1, %g : tensor<PART>, tensor<PART>, tensor<SHAPE>
  }
}
"""


def split_module(shape: str, part: str, axis: int) -> ModuleOp:
    text = SPLIT.replace("SHAPE", shape).replace("PART", part).replace("AXIS", str(axis))
    return parse(text)


def split_of(module: ModuleOp) -> SplitOp:
    return next(op for op in body_ops(module) if isinstance(op, SplitOp))


@pytest.mark.parametrize(
    ("shape", "part", "axis", "view"),
    [
        ("1024x1024xf32", "512x1024xf32", 0, True),  # row blocks
        ("1024x1024xf32", "1024x512xf32", 1, False),  # column blocks: a stride
        ("1024x1024xf32", "1024x512xf32", -1, False),
        ("1x1024x1024xf32", "1x512x1024xf32", 1, True),  # a leading 1 changes nothing
        ("1x1024x1024xf32", "1x512x1024xf32", -2, True),
        ("2x512x1024xf32", "2x256x1024xf32", 1, False),  # blocks of 2 groups: a stride
    ],
)
def test_a_split_into_row_blocks_is_a_view_and_costs_nothing(
    shape: str, part: str, axis: int, view: bool
) -> None:
    """A GPU returns contiguous row blocks as pointers into the input (PyTorch split/chunk):
    no kernel, 0 µs; a split with a stride stays its copy (V100 roofline: 4 MiB read +
    4 MiB written at 0.8 x 900 GB/s, the concat's COPY_US above)."""
    op = split_of(split_module(shape, part, axis))
    assert view_split(op) is view
    model = CostModel.build(CostConfig(device="v100"))
    if view:
        assert model.time_and_source(op) == (0.0, "in-place")
    else:
        assert model.time_and_source(op) == (pytest.approx(COPY_US, rel=1e-12), "roofline")


def test_the_runtime_returns_row_blocks_as_views_with_the_same_values(tmp_path: Path) -> None:
    """The executor's split of row blocks hands out slices of the input's buffer, as a GPU
    does; a column split copies. Values are those of numpy's split either way, and the
    makespan drops by the copy (20 + 5 µs, against 20 + copy + 5)."""
    rows = split_module("1024x1024xf32", "512x1024xf32", 0)
    cols = split_module("1024x1024xf32", "1024x512xf32", 1)
    a, p1, g = execute(rows, seed=5).outputs[0]
    assert np.shares_memory(p1, g)
    assert np.array_equal(p1, g[512:])
    assert np.array_equal(a, 2.0 * g[:512])
    a, p1, g = execute(cols, seed=5).outputs[0]
    assert not np.shares_memory(p1, g)
    assert np.array_equal(p1, g[:, 512:])
    for module, want in ((rows, 25.0), (cols, 25.0 + COPY_US)):
        report = tmp_path / "r.json"
        run_pipeline(module, f'simulate{{device=v100 report="{report}"}}')
        assert json.loads(report.read_text())["makespan_us"] == pytest.approx(want, rel=1e-12)
