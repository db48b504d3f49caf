"""The partition library (lancet_mlir.partition): plans keyed by integer node and result
index, reassembly checks, and the chunk rewrite applied through `PartitionRewriter`."""

from __future__ import annotations

import pytest
from helpers import RESHAPES, function_graph, parse

from lancet_mlir.dialects.comp import kernel_params
from lancet_mlir.graph.rewrite import apply_order, check_dominance
from lancet_mlir.partition import (
    PartitionError,
    PartitionRewriter,
    check_reassembly,
    plan_expert_spans,
    value_of,
    value_ref,
)
from lancet_mlir.partition.axes import solve_axes
from lancet_mlir.partition.base import shape_of
from lancet_mlir.partition.region import apply_region, build_region, simulate_range
from lancet_mlir.partition.rules import PARTIAL, partition_combos
from lancet_mlir.runtime import compare_modules

FWD_BWD = """
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @f(%d: tensor<4x4x8xf32>, %w: tensor<2x8x8xf32>, %g: tensor<4x4x8xf32>) -> (tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<2x8x8xf32>) {
    %x = comm.all_to_all %d concat 1 : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    %y = comp.batch_matmul %x, %w : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %r = comm.all_to_all %y split 1 : (tensor<2x8x8xf32>) -> tensor<4x4x8xf32>
    %dy = comm.all_to_all %g concat 1 : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    %dx = comp.batch_matmul_dx %dy, %w : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %dw = comp.batch_matmul_dw %x, %dy : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %dd = comm.all_to_all %dx split 1 : (tensor<2x8x8xf32>) -> tensor<4x4x8xf32>
    func.return %r, %dd, %dw : tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<2x8x8xf32>
  }
}
"""


def test_spans_are_keyed_by_node_and_result_index() -> None:
    graph = function_graph(parse(FWD_BWD))
    fwd, bwd = plan_expert_spans(graph)
    # nodes: 0 x, 1 y, 2 r, 3 dy, 4 dx, 5 dw, 6 dd
    assert (fwd.entry, fwd.exit, fwd.core, fwd.tail) == (0, 2, [1], [])
    assert (bwd.entry, bwd.exit, bwd.core, bwd.tail) == (3, 6, [4], [5])
    assert (fwd.axis, fwd.group, fwd.capacity, fwd.layout) == (1, 2, 4, (2, 4))
    assert fwd.values == {(0, 0): 1, (1, 0): 1}
    assert bwd.values == {(3, 0): 1, (4, 0): 1}
    # dw reads the forward span's chunks of %x and the backward span's %dy; it is a partial sum
    assert bwd.combos[5] == ((1, 1), (PARTIAL,))
    assert bwd.nodes == [3, 6, 4, 5]


def test_value_refs_round_trip() -> None:
    graph = function_graph(parse(FWD_BWD))
    dw = graph.ops[5]
    assert value_ref(graph, dw.results[0]) == (5, 0)
    assert value_of(graph, (5, 0)) is dw.results[0]
    assert value_ref(graph, graph.ops[0].operands[0]) is None  # a block argument


def test_partition_combos_come_from_the_registry() -> None:
    graph = function_graph(parse(FWD_BWD))
    combos = partition_combos(graph.ops[1])  # batch_matmul bmk,bkn->bmn
    assert combos[0] == ((None, None), (None,))
    assert ((1, None), (1,)) in combos
    assert ((2, 1), (PARTIAL,)) in combos
    assert partition_combos(graph.ops[0]) == []  # a collective is not a registry kernel


def test_reassembly_error_names_the_value() -> None:
    text = FWD_BWD.replace(
        "func.return %r, %dd, %dw",
        "%t = comp.transpose %y {perm = array<i64: 0, 2, 1>} : "
        "(tensor<2x8x8xf32>) -> tensor<2x8x8xf32>\n    func.return %r, %dd, %dw",
    )
    graph = function_graph(parse(text))
    spans = plan_expert_spans(graph)
    check_reassembly(graph, spans)  # %y's dim 1 is group x capacity = 8: fine
    spans[0].group = 3  # a layout whose chunks cannot be put back together
    with pytest.raises(PartitionError, match="cannot reassemble 'y' from its chunks"):
        check_reassembly(graph, spans)


@pytest.mark.parametrize("n", [2, 4])
def test_rewriter_keeps_values(n: int) -> None:
    original = parse(FWD_BWD)
    module = parse(FWD_BWD)
    graph = function_graph(module)
    spans = plan_expert_spans(graph)
    PartitionRewriter(graph, n).rewrite(spans)
    fixed = function_graph(module)
    apply_order(fixed, fixed.topo_order())
    module.verify()
    check_dominance(module)
    parts = [op.attributes.get("lancet.part") for op in function_graph(module).ops]
    assert sum(p is not None for p in parts) == 7 * n  # 4 a2as, y, dx, dw per chunk
    result = compare_modules(original, module, ranks=2)
    assert result.ok


@pytest.mark.parametrize(("n", "rows"), [(3, [4, 4, 4]), (5, [3, 3, 2, 2, 2])])
def test_region_parts_of_reshapes_reshape_their_own_rows(n: int, rows: list[int]) -> None:
    # 3 parts divide both sides of the merging reshape (12 -> 6 rows); 5 parts leave it
    # out and cut the 12 rows unevenly: each part of a reshape takes its part's shape
    original, module = parse(RESHAPES), parse(RESHAPES)
    graph = function_graph(module)
    solution = solve_axes(graph, range(len(graph)), [0], parts=n)
    assert solution is not None
    assert solution.nodes == ([0, 1, 2] if n == 3 else [0, 2])
    region = build_region(graph, solution, n)
    order = simulate_range(graph, range(len(graph)), lambda op: 1.0, region).order
    apply_region(graph, range(len(graph)), region, order)
    module.verify()
    check_dominance(module)
    ops = function_graph(module).ops
    split = next(op for op in ops if op.name == "comp.split")
    assert [(shape_of(r) or (0,))[0] for r in split.results] == rows
    parts = [op for op in ops if op.name == "comp.reshape" and "lancet.part" in op.attributes]
    # the parts of %s: 12 x 2 x 2 cut into rows of 2 x 2
    assert [kernel_params(op)["shape"] for op in parts if op.results[0].name_hint and
            op.results[0].name_hint.startswith("s_")] == [(r, 2, 2) for r in rows]  # fmt: skip
    assert compare_modules(original, module).ok
