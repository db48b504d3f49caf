"""Split-axis inference (lancet_mlir.partition.axes) on small op chains."""

from __future__ import annotations

from helpers import RESHAPES, parse
from xdsl.dialects.func import FuncOp

from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.axes import fits_parts, part_counts, solve_axes, unfit
from lancet_mlir.partition.rules import PARTIAL


def graph_of(text: str) -> DataflowGraph:
    fn = next(op for op in parse(text).walk() if isinstance(op, FuncOp))
    return DataflowGraph.from_block(fn.body.block)


def solve(g: DataflowGraph, anchors: list[int], parts: int = 2):
    return solve_axes(g, range(len(g)), anchors, parts=parts)


# 2 ranks, 4 experts, capacity 4, 8 tokens, hidden 8
MOE = """
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @f(%x: tensor<8x8xf32>, %dm: tensor<8x4x4xf32>, %cm: tensor<8x4x4xf32>, %w: tensor<2x8x8xf32>, %r: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %d = comp.moe_dispatch %x, %dm : (tensor<8x8xf32>, tensor<8x4x4xf32>) -> tensor<4x4x8xf32>
    %e = comm.all_to_all %d concat 1 : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    %h = comp.batch_matmul %e, %w : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %a = comp.gelu %h : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %b = comm.all_to_all %a split 1 : (tensor<2x8x8xf32>) -> tensor<4x4x8xf32>
    %y = comp.moe_combine %b, %cm : (tensor<4x4x8xf32>, tensor<8x4x4xf32>) -> tensor<8x8xf32>
    %o = comp.add %y, %r : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    func.return %o : tensor<8x8xf32>
  }
}
"""


def test_moe_layer_is_split_along_capacity_through_dispatch_and_combine() -> None:
    g = graph_of(MOE)
    sol = solve(g, anchors=[1, 4], parts=4)  # 4 parts: only the capacity axis has room
    assert sol is not None
    assert sol.exact
    assert sol.nodes == [0, 1, 2, 3, 4, 5]  # the residual add reads a partial sum: left out
    # dispatch: x whole, the mask split along capacity, the buffer split along capacity
    assert sol.options[0] == ((None, (2, 1)), ((1, 1),))
    # entry all-to-all: contiguous capacity chunks become 2 blocks (one per rank)
    assert sol.options[1] == (((1, 1),), ((1, 2),))
    assert sol.options[2] == (((1, 2), None), ((1, 2),))
    assert sol.options[3] == (((1, 2),), ((1, 2),))
    assert sol.options[4] == (((1, 2),), ((1, 1),))
    # combine contracts the capacity axis: per-part partial sums
    assert sol.options[5] == (((1, 1), (2, 1)), (PARTIAL,))
    # every block has 4 rows: 3 parts are uneven (2, 1, 1 rows), 5 leave a part empty
    assert part_counts(g, sol, 8) == [2, 3, 4]
    assert unfit(g, sol, 3) is None
    assert unfit(g, sol, 5) == "5 parts exceed dimension 4 of 'd': one row per part at least"


def test_experts_are_an_axis_too() -> None:
    # with 2 parts the first solution found splits the 2 local experts of each rank:
    # dispatch by expert blocks (one block per destination rank), all-to-all per part
    g = graph_of(MOE)
    sol = solve(g, anchors=[1, 4])
    assert sol is not None
    assert sol.nodes == [0, 1, 2, 3, 4, 5]
    assert sol.options[0] == ((None, (1, 2)), ((0, 2),))
    assert sol.options[1] == (((0, 2),), ((0, 1),))
    assert sol.options[2] == (((0, 1), (0, 1)), ((0, 1),))  # expert weights split too
    assert sol.options[4] == (((0, 1),), ((0, 2),))
    assert part_counts(g, sol, 8) == [2]


def test_an_unsupported_op_shrinks_the_region() -> None:
    # softmax over the capacity axis cannot be split along it, and 4 parts leave no room
    # on the expert axis: the pair cannot be pipelined, but the entry's region shrinks
    text = MOE.replace("comp.gelu %h", "comp.softmax %h {axis = 1 : i64}")
    g = graph_of(text)
    assert solve(g, anchors=[1, 4], parts=4) is None
    sol = solve(g, anchors=[1], parts=4)
    assert sol is not None
    # dispatch, entry and the first expert matmul (here along the hidden axis, a partial
    # sum); the softmax is left out and nothing after it can come back in
    assert sol.nodes == [0, 1, 2]
    assert sol.options[2][1] == (PARTIAL,)


TOKENS = """
builtin.module {
  func.func @f(%x: tensor<8x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>, %w: tensor<16x32xf32>) -> tensor<2x4x32xf32> {
    %n = comp.layer_norm %x, %g, %b : (tensor<8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
    %m = comp.matmul %n, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %s = comp.softmax %m : (tensor<8x32xf32>) -> tensor<8x32xf32>
    %r = comp.reshape %s {shape = array<i64: 2, 4, 32>} : (tensor<8x32xf32>) -> tensor<2x4x32xf32>
    func.return %r : tensor<2x4x32xf32>
  }
}
"""


def test_token_axis_through_norm_matmul_softmax_reshape() -> None:
    g = graph_of(TOKENS)
    sol = solve(g, anchors=[0])
    assert sol is not None
    assert sol.nodes == [0, 1, 2, 3]
    assert sol.options[0] == (((0, 1), None, None), ((0, 1),))  # rows; never the normalised axis
    assert sol.options[1] == (((0, 1), None), ((0, 1),))  # matmul rows, weight whole
    assert sol.options[2] == (((0, 1),), ((0, 1),))  # softmax (last axis) by rows
    assert sol.options[3] == (((0, 1),), ((0, 1),))  # 8 tokens = 2 x 4: the leading dim
    assert part_counts(g, sol, 8) == [2]  # the reshaped batch dim 2 limits n


def test_normalised_axis_is_never_split() -> None:
    g = graph_of(TOKENS)
    # force the matmul to split its columns: the layer norm feeding it must stay out
    sol = solve_axes(g, [0, 1, 2], anchors=[1], weights={0: 1.0, 1: 1.0, 2: 5.0})
    assert sol is not None
    assert sol.options[1] == (((0, 1), None), ((0, 1),))
    for option in sol.options.values():
        assert option[0][0] != (1, 1) or option is sol.options[1]


def test_softmax_along_the_split_axis_is_not_partitionable() -> None:
    text = TOKENS.replace("comp.softmax %m :", "comp.softmax %m {axis = 0 : i64} :")
    g = graph_of(text)
    sol = solve(g, anchors=[0])
    assert sol is not None
    # softmax over rows cannot take row chunks; splitting the columns instead would need
    # the matmul on columns, which the layer norm's rows cannot feed: a heavier region
    # keeps norm + matmul on rows and leaves the softmax (and its reshape) out
    assert sol.nodes in ([0, 1], [0, 1, 3])
    assert 2 not in sol.options


BMM = """
builtin.module {
  func.func @f(%q: tensor<4x8x16xf32>, %k: tensor<4x8x16xf32>) -> tensor<4x8x8xf32> {
    %s = comp.batch_matmul %q, %k {transpose_b = true} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x8xf32>
    %p = comp.softmax %s : (tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
    func.return %p : tensor<4x8x8xf32>
  }
}
"""


def test_batch_matmul_prefers_a_shared_axis() -> None:
    g = graph_of(BMM)
    sol = solve(g, anchors=[0])
    assert sol is not None
    assert sol.nodes == [0, 1]
    # the first combination that also lets the softmax join: the batch axis
    assert sol.options[0] == (((0, 1), (0, 1)), ((0, 1),))
    assert sol.options[1] == (((0, 1),), ((0, 1),))


def test_gate_without_a_partition_rule_stays_out() -> None:
    text = """
builtin.module {
  func.func @f(%x: tensor<8x16xf32>, %w: tensor<16x4xf32>) -> (tensor<8x4x2xf32>, tensor<8x4x2xf32>) {
    %l = comp.matmul %x, %w : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %c, %d = comp.moe_gate %l {capacity = 2 : i64} : (tensor<8x4xf32>) -> (tensor<8x4x2xf32>, tensor<8x4x2xf32>)
    func.return %c, %d : tensor<8x4x2xf32>, tensor<8x4x2xf32>
  }
}
"""
    g = graph_of(text)
    sol = solve(g, anchors=[0])
    assert sol is not None
    assert sol.nodes == [0]
    assert solve(g, anchors=[1]) is None


def test_uneven_parts_need_equal_blocks_or_a_divisor() -> None:
    assert fits_parts([4, 4], 3)  # equal blocks: part k has the same rows in each
    assert not fits_parts([4, 4], 5)  # a part would be empty
    assert fits_parts([12, 6], 3)  # a reshape 12 -> 6 rows: 4 -> 2 rows per part
    assert not fits_parts([12, 6], 4)  # 3, 3, 3, 3 rows cannot map onto 2, 2, 1, 1
    assert fits_parts([], 7)  # nothing split (partial sums only)


def test_a_reshape_merging_rows_takes_only_counts_that_divide() -> None:
    g = graph_of(RESHAPES)
    sol = solve(g, anchors=[0, 1, 2])
    assert sol is not None
    assert sol.options[1] == (((0, 1),), ((0, 1),))  # 12 rows of 4 -> 6 rows of 8
    assert sol.options[2] == (((0, 1),), ((0, 1),))  # rows kept, columns reshaped
    assert part_counts(g, sol, 8) == [2, 3, 6]
    assert unfit(g, sol, 4) == (
        "4 parts do not divide dimension 6 of 'm', which its op maps onto a dimension of "
        "another size"
    )
    assert unfit(g, sol, 7) == "7 parts exceed dimension 6 of 'm': one row per part at least"
    # 5 parts: the merging reshape stays out, the other ops take 3, 3, 2, 2, 2 rows
    five = solve(g, anchors=[0], parts=5)
    assert five is not None
    assert five.nodes == [0, 2]


def _independent_gelus(k: int) -> str:
    """k gelus of 8x16 rows (each splits by rows or columns) and one of 1x1 (no split)."""
    args = ", ".join(f"%x{i}: tensor<8x16xf32>" for i in range(k))
    body = "\n".join(
        f"    %g{i} = comp.gelu %x{i} : (tensor<8x16xf32>) -> tensor<8x16xf32>" for i in range(k)
    )
    return f"""
builtin.module {{
  func.func @f({args}, %t: tensor<1x1xf32>) -> tensor<1x1xf32> {{
{body}
    %u = comp.gelu %t : (tensor<1x1xf32>) -> tensor<1x1xf32>
    func.return %u : tensor<1x1xf32>
  }}
}}
"""


def test_an_op_that_cannot_join_does_not_loosen_the_bound() -> None:
    # the 1x1 gelu has no option for 2 parts; were its (large) weight counted in the bound
    # of what the ops still to decide can add, no branch leaving a gelu out could be cut,
    # and the 3^k branches would exhaust any budget; counted 0, the first full region found
    # cuts every other branch
    k = 16
    g = graph_of(_independent_gelus(k))
    weights = {i: 1.0 for i in range(k)} | {k: 1000.0}
    sol = solve_axes(g, range(k + 1), anchors=[0], weights=weights, parts=2, budget=1_000)
    assert sol is not None
    assert sol.exact
    assert sol.nodes == list(range(k))  # every 8x16 gelu, the 1x1 one left out
    assert sol.weight == float(k)
