"""The partition library on PyTorch's all-to-all layout: `comm.all_to_all` with split =
concat = 0 (`all_to_all_single`), the capacity slots reached through reshapes and
transposes (`partition/axes.py`, `partition/blocks.py`).

The block below is the expert span of a capacity MoE as the PyTorch import writes it: 2
ranks, 2 local experts, capacity 4, d 16. Rank r's chunk of the exchanged [16, 16] rows is
[experts 2, capacity 4]; after the exchange the rows are [source rank 2, expert 2, capacity
4], viewed as such, transposed to [expert, rank, capacity] and merged into the experts'
[2, 8, 16] batch. The capacity axis is therefore the 4 blocks (rank x expert) of 4 rows of
the exchanged tensor: chunking (0, 4); contiguous dimension 2 of the 4-D views: (2, 1);
the 2 blocks (ranks) of 4 rows of each expert's 8: (1, 2).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.passes import PassPipeline

from lancet_mlir.dialects.aten import AtenOp
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.axes import solve_axes
from lancet_mlir.partition.blocks import reshaped_chunking
from lancet_mlir.partition.expert_span import all_to_all_pairs
from lancet_mlir.partition.rules import partition_combos
from lancet_mlir.passes import get_all_passes
from lancet_mlir.runtime import compare_modules
from lancet_mlir.runtime.loader import make_context, parse_module_text

SPAN = """
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @f(%x: tensor<16x16xf32>, %w1: tensor<2x16x32xf32>, %w2: tensor<2x32x16xf32>) -> tensor<16x16xf32> {
    %a = comm.all_to_all %x : (tensor<16x16xf32>) -> tensor<16x16xf32>
    %v = comp.reshape %a {shape = array<i64: 2, 2, 4, 16>} : (tensor<16x16xf32>) -> tensor<2x2x4x16xf32>
    %t = comp.transpose %v {perm = array<i64: 1, 0, 2, 3>} : (tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32>
    %u = comp.reshape %t {shape = array<i64: 2, 8, 16>} : (tensor<2x2x4x16xf32>) -> tensor<2x8x16xf32>
    %h = comp.batch_matmul %u, %w1 : (tensor<2x8x16xf32>, tensor<2x16x32xf32>) -> tensor<2x8x32xf32>
    %g = comp.gelu %h : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
    %y = comp.batch_matmul %g, %w2 : (tensor<2x8x32xf32>, tensor<2x32x16xf32>) -> tensor<2x8x16xf32>
    %v2 = comp.reshape %y {shape = array<i64: 2, 2, 4, 16>} : (tensor<2x8x16xf32>) -> tensor<2x2x4x16xf32>
    %t2 = comp.transpose %v2 {perm = array<i64: 1, 0, 2, 3>} : (tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32>
    %u2 = comp.reshape %t2 {shape = array<i64: 16, 16>} : (tensor<2x2x4x16xf32>) -> tensor<16x16xf32>
    %b = comm.all_to_all %u2 : (tensor<16x16xf32>) -> tensor<16x16xf32>
    func.return %b : tensor<16x16xf32>
  }
}
"""


def _graph():
    module = parse_module_text(SPAN, "span").module
    fn = module.body.block.first_op
    return module, DataflowGraph.from_block(fn.body.block)  # type: ignore[union-attr]


def test_pair_and_capacity_axis_by_hand() -> None:
    _, graph = _graph()
    assert all_to_all_pairs(graph) == [(0, 10)]
    solution = solve_axes(graph, range(11), [0, 10], parts=2)
    assert solution is not None
    assert solution.exact
    rank_blocks, contiguous, expert_rows = (0, 4), (2, 1), (1, 2)
    assert solution.options == {
        0: ((rank_blocks,), (rank_blocks,)),
        1: ((rank_blocks,), (contiguous,)),
        2: ((contiguous,), (contiguous,)),
        3: ((contiguous,), (expert_rows,)),
        4: ((expert_rows, None), (expert_rows,)),
        5: ((expert_rows,), (expert_rows,)),
        6: ((expert_rows, None), (expert_rows,)),
        7: ((expert_rows,), (contiguous,)),
        8: ((contiguous,), (contiguous,)),
        9: ((contiguous,), (rank_blocks,)),
        10: ((rank_blocks,), (rank_blocks,)),
    }
    # 3 parts: uneven (2, 1, 1 of the 4 slots); 5: more parts than capacity slots
    assert solve_axes(graph, range(11), [0, 10], parts=3) is not None
    assert solve_axes(graph, range(11), [0, 10], parts=5) is None


def test_forced_parts_keep_the_values_on_two_ranks() -> None:
    module, _ = _graph()
    for parts in (2, 3):
        out = module.clone()
        pipeline = f"moe-partition{{parts={parts}}}"
        PassPipeline.parse_spec(get_all_passes(), pipeline).apply(make_context(), out)
        ops = [o.name for o in out.walk()]
        assert ops.count("comm.all_to_all") == 2 * parts
        result = compare_modules(module, out, ranks=2, seed=3)
        assert result.ok, result.failures()[:3]


def test_reshaped_chunking_by_hand() -> None:
    # [16, 16] in 4 blocks of 4 rows viewed as [2, 2, 4, 16]: dimension 2, contiguous
    assert reshaped_chunking((0, 4), (16, 16), (2, 2, 4, 16)) == (2, 1)
    # 2 blocks of 8 rows: the 8 rows straddle dimensions 1 and 2
    assert reshaped_chunking((0, 2), (16, 16), (2, 2, 4, 16)) is None
    assert reshaped_chunking((2, 1), (2, 2, 4, 16), (2, 8, 16)) == (1, 2)
    # the features of each row, flattened: 16 blocks (one per row) of the flat dimension
    assert reshaped_chunking((1, 1), (16, 16), (256,)) == (0, 16)
    # [4, 4] blocks of 2 rows merged with the features [2, 8]: no longer whole rows
    assert reshaped_chunking((0, 2), (4, 4), (2, 8)) is None


@st.composite
def _cases(draw):
    before = draw(st.lists(st.integers(1, 3), max_size=2))
    groups = draw(st.integers(1, 3))
    block = draw(st.integers(2, 4))
    after = draw(st.lists(st.integers(1, 3), max_size=2))
    factors = [*before, groups, block, *after]
    cuts = sorted(set(draw(st.lists(st.integers(1, len(factors) - 1), max_size=4))))
    bounds = [0, *cuts, len(factors)]
    new = [math.prod(factors[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    n = draw(st.integers(2, block))
    return [*before, groups * block, *after], (len(before), groups), new, n


def _part(x: np.ndarray, chunking: tuple[int, int], n: int, k: int) -> np.ndarray:
    axis, groups = chunking
    shape = list(x.shape)
    block = shape[axis] // groups
    sizes = [block // n + (1 if j < block % n else 0) for j in range(n)]
    wide = x.reshape([*shape[:axis], groups, block, *shape[axis + 1 :]])
    start = sum(sizes[:k])
    return np.take(wide, range(start, start + sizes[k]), axis=axis + 1)


@settings(max_examples=150, deadline=None)
@given(_cases())
def test_reshaped_chunking_keeps_every_part(case) -> None:
    shape, chunking, new, n = case
    out = reshaped_chunking(chunking, shape, new)
    if out is None:
        return
    x = np.arange(math.prod(shape)).reshape(shape)
    for k in range(n):
        part = _part(x, chunking, n, k)
        again = _part(x.reshape(new), out, n, k)
        assert np.array_equal(part.reshape(again.shape), again)


def test_elementwise_aten_ops_split_like_the_kernels() -> None:
    from xdsl.dialects.builtin import TensorType, f32

    from lancet_mlir.dialects.comp import build_op

    x = build_op("zeros", [], {"shape": (4, 8), "dtype": "f32"}).results[0]
    t = TensorType(f32, [4, 8])
    gelu = AtenOp("aten.gelu.default", [x], [t])
    assert partition_combos(gelu) == [((None,), (None,)), ((0,), (0,)), ((1,), (1,))]
    mul = AtenOp("aten.mul.Tensor", [x, x], [t])
    assert partition_combos(mul)[1] == ((0, 0), (0,))
    assert partition_combos(AtenOp("aten.cumsum.default", [x], [t])) == []


def _span(world: int, experts: int, capacity: int, d: int = 8, h: int = 12) -> str:
    """The imported expert span (module doc) for `world` ranks, `experts` local experts."""
    rows, mid = world * experts * capacity, world * capacity
    t = "tensor<{}xf32>".format
    x, v = t(f"{rows}x{d}"), t(f"{world}x{experts}x{capacity}x{d}")
    vt, u = t(f"{experts}x{world}x{capacity}x{d}"), t(f"{experts}x{mid}x{d}")
    hh, w1, w2 = t(f"{experts}x{mid}x{h}"), t(f"{experts}x{d}x{h}"), t(f"{experts}x{h}x{d}")
    return f"""
builtin.module attributes {{lancet.world_size = {world} : i64}} {{
  func.func @f(%x: {x}, %w1: {w1}, %w2: {w2}) -> {x} {{
    %a = comm.all_to_all %x : ({x}) -> {x}
    %v = comp.reshape %a {{shape = array<i64: {world}, {experts}, {capacity}, {d}>}} : ({x}) -> {v}
    %t = comp.transpose %v {{perm = array<i64: 1, 0, 2, 3>}} : ({v}) -> {vt}
    %u = comp.reshape %t {{shape = array<i64: {experts}, {mid}, {d}>}} : ({vt}) -> {u}
    %h = comp.batch_matmul %u, %w1 : ({u}, {w1}) -> {hh}
    %g = comp.gelu %h : ({hh}) -> {hh}
    %y = comp.batch_matmul %g, %w2 : ({hh}, {w2}) -> {u}
    %v2 = comp.reshape %y {{shape = array<i64: {experts}, {world}, {capacity}, {d}>}} : ({u}) -> {vt}
    %t2 = comp.transpose %v2 {{perm = array<i64: 1, 0, 2, 3>}} : ({vt}) -> {v}
    %u2 = comp.reshape %t2 {{shape = array<i64: {rows}, {d}>}} : ({v}) -> {x}
    %b = comm.all_to_all %u2 : ({x}) -> {x}
    func.return %b : {x}
  }}
}}
"""


@settings(max_examples=12, deadline=None)
@given(
    st.sampled_from([2, 4]),
    st.integers(1, 3),
    st.integers(2, 5),
    st.integers(2, 5),
)
def test_capacity_blocks_for_any_layout(world: int, experts: int, capacity: int, n: int) -> None:
    # the solver finds the capacity blocks (one per rank and local expert) whatever the
    # sizes, for every count up to the capacity (uneven parts too), and the split span
    # computes the same values on `world` ranks
    module = parse_module_text(_span(world, experts, capacity), "span").module
    graph = DataflowGraph.from_block(module.body.block.first_op.body.block)  # type: ignore[union-attr]
    solution = solve_axes(graph, range(11), [0, 10], parts=n)
    if n > capacity:
        assert solution is None
        return
    assert solution is not None
    assert solution.options[0] == (((0, world * experts),), ((0, world * experts),))
    assert solution.options[4][0][0] == (1, world)  # each expert's rows: one block per rank
    out = module.clone()
    PassPipeline.parse_spec(get_all_passes(), f"moe-partition{{parts={n}}}").apply(
        make_context(), out
    )
    assert [o.name for o in out.walk()].count("comm.all_to_all") == 2 * n
    assert compare_modules(module, out, ranks=world, seed=n).ok
