"""Uneven parts (n does not divide a split dimension) on random MoE layer shapes: the part
sizes, the values of the partitioned module, and the template estimate against the built
region's simulation."""

from __future__ import annotations

import math

import pytest
from helpers import function_graph, parse
from hypothesis import event, given, settings
from hypothesis import strategies as st
from xdsl.context import Context

from lancet_mlir.dialects.comm import AllToAllOp
from lancet_mlir.dialects.destination import in_place_concat
from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.partition.axes import solve_axes
from lancet_mlir.partition.base import part_sizes, shape_of
from lancet_mlir.partition.estimate import estimate_range, part_classes
from lancet_mlir.partition.region import build_region, simulate_range
from lancet_mlir.passes.moe_partition import MoePartitionPass
from lancet_mlir.runtime import compare_modules


@given(st.integers(1, 40), st.integers(1, 40))
def test_part_sizes_differ_by_at_most_one_row_and_put_the_larger_first(rows: int, n: int) -> None:
    if n > rows:
        return
    sizes = part_sizes(rows, n)
    assert len(sizes) == n
    assert sum(sizes) == rows
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[0] - sizes[-1] <= 1
    assert sizes.count(sizes[0]) == (rows % n or n)


def test_part_sizes_by_hand() -> None:
    assert part_sizes(4, 3) == [2, 1, 1]
    assert part_sizes(8, 5) == [2, 2, 2, 1, 1]
    assert part_sizes(16, 3) == [6, 5, 5]
    assert part_sizes(6, 3) == [2, 2, 2]


def moe_layer(experts_per_rank: int, capacity: int, tokens: int, hidden: int) -> str:
    """One MoE layer on 2 ranks (dispatch, all-to-all, expert matmul + gelu, all-to-all
    back, combine), with the expert output also returned so a blocked value is rebuilt."""
    e, c, s, m = 2 * experts_per_rank, capacity, tokens, hidden
    el, cg = experts_per_rank, 2 * capacity
    buf, local, mask = f"{e}x{c}x{m}", f"{el}x{cg}x{m}", f"{s}x{e}x{c}"
    return f"""
builtin.module attributes {{lancet.world_size = 2 : i64}} {{
  func.func @moe(%x: tensor<{s}x{m}xf32>, %dm: tensor<{mask}xf32>, %cm: tensor<{mask}xf32>, %w: tensor<{el}x{m}x{m}xf32>) -> (tensor<{s}x{m}xf32>, tensor<{local}xf32>) {{
    %d = comp.moe_dispatch %x, %dm : (tensor<{s}x{m}xf32>, tensor<{mask}xf32>) -> tensor<{buf}xf32>
    %e = comm.all_to_all %d concat 1 : (tensor<{buf}xf32>) -> tensor<{local}xf32>
    %h = comp.batch_matmul %e, %w : (tensor<{local}xf32>, tensor<{el}x{m}x{m}xf32>) -> tensor<{local}xf32>
    %a = comp.gelu %h : (tensor<{local}xf32>) -> tensor<{local}xf32>
    %b = comm.all_to_all %a split 1 : (tensor<{local}xf32>) -> tensor<{buf}xf32>
    %y = comp.moe_combine %b, %cm : (tensor<{buf}xf32>, tensor<{mask}xf32>) -> tensor<{s}x{m}xf32>
    func.return %y, %h : tensor<{s}x{m}xf32>, tensor<{local}xf32>
  }}
}}
"""


SHAPES = st.tuples(st.integers(1, 2), st.integers(2, 7), st.integers(2, 6), st.integers(2, 4))


@settings(max_examples=40, deadline=None)
@given(SHAPES, st.data())
def test_forced_uneven_parts_keep_the_values(shape: tuple[int, int, int, int], data) -> None:
    experts, capacity, tokens, hidden = shape
    n = data.draw(st.integers(2, capacity), label="n")
    text = moe_layer(*shape)
    module = parse(text)
    MoePartitionPass(parts=n).apply(Context(), module)
    module.verify()
    check_dominance(module)
    a2a = [op for op in function_graph(module).ops if isinstance(op, AllToAllOp)]
    assert len(a2a) == 2 * n  # the pair, once per part
    # whatever axis was chosen, the parts of each all-to-all add up to the whole buffer
    e, c, m = 2 * experts, capacity, hidden
    for name in ("e_part", "b_part"):
        parts = [op for op in a2a if (op.results[0].name_hint or "").startswith(name)]
        assert len(parts) == n
        assert sum(math.prod(shape_of(op.results[0]) or ()) for op in parts) == e * c * m
    assert compare_modules(parse(text), module, ranks=2).ok


@settings(max_examples=40, deadline=None)
@given(SHAPES, st.data())
def test_template_estimate_equals_the_built_simulation(
    shape: tuple[int, int, int, int], data
) -> None:
    capacity = shape[1]
    n = data.draw(st.integers(2, capacity), label="n")
    graph = function_graph(parse(moe_layer(*shape)))
    nodes = list(range(len(graph)))
    solution = solve_axes(graph, nodes, [1, 4], parts=n)
    assert solution is not None  # the capacity axis always has room for n parts

    def time_of(op) -> float:  # distinct shapes get distinct times; as every cost model,
        if in_place_concat(op):  # an in-place rebuild costs 0 (the parts wrote its rows)
            return 0.0
        return 1.0 + sum(float(sum(shape_of(r) or ())) for r in op.results)

    region = build_region(graph, solution, n)
    built = simulate_range(graph, nodes, time_of, region).makespan_us
    region.discard()
    assert estimate_range(graph, nodes, solution, n, time_of) == pytest.approx(built, rel=1e-12)
    classes = part_classes(graph, solution, n)
    assert 1 <= len(set(classes)) <= n
    event("uneven parts" if len(set(classes)) > 1 else "equal parts")
