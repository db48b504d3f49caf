"""moe-partition{axis=token}: whole MoE layers (forward and backward) in token parts, exact,
with the regions before the gate and after the combine (partition/token*.py)."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import (
    body_ops,
    compare_under_mpiexec,
    function_graph,
    kernel_name,
    parse,
    part_of,
    run_pipeline,
    run_tool,
    to_text,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.context import Context

from lancet_mlir.dialects.comm import AllToAllOp, AllToAllVOp
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.models.gpt2_moe import GPT2MoEConfig, build_gpt2_moe
from lancet_mlir.partition.base import PartitionError
from lancet_mlir.partition.token import find_layer, token_gates
from lancet_mlir.passes.delay_all_to_allv import DelayAllToAllvPass
from lancet_mlir.passes.moe_partition import MoePartitionPass
from lancet_mlir.runtime import compare_modules
from lancet_mlir.sim import evaluate_fixed_order

# layer 1 is MoE; 16 tokens (4 sequences of 4), 4 experts (2 per rank on 2 ranks), capacity 4
CFG = GPT2MoEConfig(layers=2, hidden=8, heads=2, seq=4, batch=4, world_size=2,
                    experts_per_rank=2, vocab=11)  # fmt: skip
# the headline model's sizes, two layers: on p3dn its all-to-alls (10 ms each) dominate
BIG = GPT2MoEConfig(layers=2, hidden=768, heads=16, seq=512, batch=16, world_size=16,
                    experts_per_rank=2, vocab=64)  # fmt: skip


def token_parts(n: int, cfg: GPT2MoEConfig = CFG):
    module = build_gpt2_moe(cfg)
    MoePartitionPass(axis="token", parts=n).apply(Context(), module)
    module.verify()
    check_dominance(module)
    return module


def test_the_layer_is_found_forward_and_backward() -> None:
    graph = function_graph(build_gpt2_moe(CFG))
    (gate,) = token_gates(graph)
    layer = find_layer(graph, gate)
    names = lambda nodes: sorted(kernel_name(graph.ops[i]) or "" for i in nodes)  # noqa: E731
    assert names(layer.fwd_chain) == ["batch_matmul", "batch_matmul", "gelu"]
    assert layer.bwd is not None
    # the backward chain holds the expert FFN's dx ops and both weight gradients
    assert names(layer.bwd.chain) == sorted(
        ["batch_matmul_dx", "batch_matmul_dw", "gelu_dx", "batch_matmul_dx", "batch_matmul_dw"]
    )
    assert layer.tokens == 16


def test_top2_is_refused_with_the_reason() -> None:
    graph = function_graph(build_gpt2_moe(dataclasses.replace(CFG, gate="top2")))
    with pytest.raises(PartitionError, match="switch gate"):
        find_layer(graph, token_gates(graph)[0])


@pytest.mark.parametrize("n", [2, 3, 4])
def test_token_parts_compute_the_same_values(n: int) -> None:
    # n = 3 cuts the 16 tokens 6, 5, 5 (not whole sequences: the attention stays whole)
    module = token_parts(n)
    ops = body_ops(module)
    exchanges = [op for op in ops if isinstance(op, AllToAllVOp)]
    assert sorted(part_of(op) for op in exchanges) == sorted(list(range(n)) * 4)
    assert not any(isinstance(op, AllToAllOp) for op in ops)  # every exchange is per part
    gates = [op for op in ops if kernel_name(op) == "moe_gate_window"]
    assert [part_of(op) for op in gates] == list(range(n))
    # each part's gate reads the counter the previous part's gate left
    for k in range(1, n):
        assert gates[k].operands[1] is gates[k - 1].results[3]
    fills = {round(float(op.attributes["lancet.fill"].value.data), 6)
             for op in exchanges}  # fmt: skip
    sizes = [16 // n + (1 if k < 16 % n else 0) for k in range(n)]
    assert fills == {round(s / 16, 6) for s in sizes}
    result = compare_modules(build_gpt2_moe(CFG), module, ranks=2)
    assert result.ok, result.failures()[:3]


def test_regions_extend_beyond_the_moe_layer() -> None:
    # 2 parts of 2 whole sequences: the attention of the MoE layer and the ops after the
    # combine (residual add, final layer norm, logits) run in parts too
    module = token_parts(2)
    split = {kernel_name(op) for op in body_ops(module) if part_of(op) is not None}
    assert {"layer_norm", "matmul", "softmax", "batch_matmul", "add"} <= split
    assert compare_modules(build_gpt2_moe(CFG), module, ranks=2).ok


# one forward-only MoE layer on 2 ranks: 8 tokens, 4 experts, capacity 4; RESULTS is what
# the function returns (the combine's output by default)
FORWARD_ONLY = """
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @moe(%x: tensor<8x8xf32>, %wg: tensor<8x4xf32>, %w: tensor<2x8x8xf32>) -> TYPES {
    %l = comp.matmul %x, %wg : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %c, %dm = comp.moe_gate %l {capacity = 4 : i64} : (tensor<8x4xf32>) -> (tensor<8x4x4xf32>, tensor<8x4x4xf32>)
    %d = comp.moe_dispatch %x, %dm : (tensor<8x8xf32>, tensor<8x4x4xf32>) -> tensor<4x4x8xf32>
    %e = comm.all_to_all %d concat 1 : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    %h = comp.batch_matmul %e, %w : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %b = comm.all_to_all %h split 1 : (tensor<2x8x8xf32>) -> tensor<4x4x8xf32>
    %y = comp.moe_combine %b, %c : (tensor<4x4x8xf32>, tensor<8x4x4xf32>) -> tensor<8x8xf32>
    func.return RESULTS : RTYPES
  }
}
"""


def forward_only(results: str = "%y", types: str = "tensor<8x8xf32>") -> str:
    sig = f"({types})" if "," in types else types
    return FORWARD_ONLY.replace("RESULTS", results).replace("RTYPES", types).replace("TYPES", sig)


def test_forward_only_module() -> None:
    graph = function_graph(parse(forward_only()))
    layer = find_layer(graph, token_gates(graph)[0])
    assert layer.bwd is None
    assert names_of(graph, layer.fwd_chain) == ["batch_matmul"]
    module = parse(forward_only())
    MoePartitionPass(axis="token", parts=3).apply(Context(), module)
    assert sum(kernel_name(op) == "moe_gate_window" for op in body_ops(module)) == 3
    assert compare_modules(parse(forward_only()), module, ranks=2).ok


def test_a_returned_gate_output_is_refused_naming_it() -> None:
    # the gate's combine weights hold window-relative slots per part: nothing rebuilds them
    text = forward_only("%y, %c", "tensor<8x8xf32>, tensor<8x4x4xf32>")
    graph = function_graph(parse(text))
    with pytest.raises(PartitionError, match="the block returns 'c', a value of the MoE layer"):
        find_layer(graph, token_gates(graph)[0])
    module = parse(text)
    MoePartitionPass(axis="token").apply(Context(), module)  # not forced: left as it is
    assert to_text(module) == to_text(parse(text))


# two forward MoE layers whose ops interleave in program order (gate, gate, dispatch, ...)
INTERLEAVED = """
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @moe(%x: tensor<8x8xf32>, %x2: tensor<8x8xf32>, %wg: tensor<8x4xf32>, %w: tensor<2x8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
    %l = comp.matmul %x, %wg : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %l2 = comp.matmul %x2, %wg : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %c, %dm = comp.moe_gate %l {capacity = 4 : i64} : (tensor<8x4xf32>) -> (tensor<8x4x4xf32>, tensor<8x4x4xf32>)
    %c2, %dm2 = comp.moe_gate %l2 {capacity = 4 : i64} : (tensor<8x4xf32>) -> (tensor<8x4x4xf32>, tensor<8x4x4xf32>)
    %d = comp.moe_dispatch %x, %dm : (tensor<8x8xf32>, tensor<8x4x4xf32>) -> tensor<4x4x8xf32>
    %d2 = comp.moe_dispatch %x2, %dm2 : (tensor<8x8xf32>, tensor<8x4x4xf32>) -> tensor<4x4x8xf32>
    %e = comm.all_to_all %d concat 1 : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    %e2 = comm.all_to_all %d2 concat 1 : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    %h = comp.batch_matmul %e, %w : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %h2 = comp.batch_matmul %e2, %w : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %b = comm.all_to_all %h split 1 : (tensor<2x8x8xf32>) -> tensor<4x4x8xf32>
    %b2 = comm.all_to_all %h2 split 1 : (tensor<2x8x8xf32>) -> tensor<4x4x8xf32>
    %y = comp.moe_combine %b, %c : (tensor<4x4x8xf32>, tensor<8x4x4xf32>) -> tensor<8x8xf32>
    %y2 = comp.moe_combine %b2, %c2 : (tensor<4x4x8xf32>, tensor<8x4x4xf32>) -> tensor<8x8xf32>
    func.return %y, %y2 : tensor<8x8xf32>, tensor<8x8xf32>
  }
}
"""


def test_forced_parts_fail_on_interleaved_layers_naming_the_layer() -> None:
    # only the first layer's ranges can be cut: forced parts must not leave the second whole
    with pytest.raises(Exception, match="layer of 'c2' interleaves in program order"):
        MoePartitionPass(axis="token", parts=2, extend="none").apply(Context(), parse(INTERLEAVED))


def names_of(graph: DataflowGraph, nodes: list[int]) -> list[str]:
    return sorted(kernel_name(graph.ops[i]) or "" for i in nodes)


def test_too_many_parts_fail_with_one_line() -> None:
    with pytest.raises(Exception, match="token parts exceed the 16 tokens"):
        token_parts(17)


def test_the_pass_chooses_token_parts_where_the_all_to_alls_dominate() -> None:
    module = build_gpt2_moe(BIG)
    pass_ = MoePartitionPass(axis="token", cluster="p3dn")
    model, sim = pass_.cost_model(module), pass_.sim_options(module)
    before = _makespan(module, model, sim)
    pass_.apply(Context(), module)
    after = _makespan(module, model, sim)
    parts = {part_of(op) for op in body_ops(module) if kernel_name(op) == "moe_gate_window"}
    assert len(parts) >= 2  # the layer was split: the phased simulation saw a gain
    assert after < before


def test_never_worse_where_nothing_is_gained() -> None:
    # the tiny model's collectives are latency: splitting them only adds work
    module = build_gpt2_moe(CFG)
    MoePartitionPass(axis="token", cluster="p3dn").apply(Context(), module)
    assert to_text(module) == to_text(build_gpt2_moe(CFG))


def _makespan(module, model, sim) -> float:
    graph = function_graph(module)
    times = [model.op_time_us(o, 16) for o in graph.ops]
    return evaluate_fixed_order(graph, times, num_comm_streams=sim.num_comm_streams).makespan_us


@pytest.mark.serial
@pytest.mark.timeout(300)
def test_token_parts_on_four_mpi_ranks_with_lancet_run_compare(tmp_path) -> None:
    cfg = dataclasses.replace(CFG, world_size=4, batch=8)
    compare_under_mpiexec(tmp_path, to_text(build_gpt2_moe(cfg)), to_text(token_parts(3, cfg)))


@settings(max_examples=15, deadline=None)
@given(
    batch=st.integers(1, 3),
    seq=st.integers(2, 5),
    experts_per_rank=st.integers(1, 2),
    capacity_factor=st.sampled_from([0.5, 1.0, 2.0]),
    data=st.data(),
)
def test_random_layers_keep_their_values(batch, seq, experts_per_rank, capacity_factor, data):
    # capacity factor 0.5 drops tokens (the threaded counter must drop the same ones); n
    # need not divide the tokens, nor whole sequences (then the attention stays whole)
    cfg = dataclasses.replace(CFG, batch=batch, seq=seq, experts_per_rank=experts_per_rank,
                              capacity_factor=capacity_factor)  # fmt: skip
    n = data.draw(st.integers(2, min(batch * seq, 5)), label="n")
    module = token_parts(n, cfg)
    gates = [op for op in body_ops(module) if kernel_name(op) == "moe_gate_window"]
    assert len(gates) == n
    result = compare_modules(build_gpt2_moe(cfg), module, ranks=2)
    assert result.ok, result.failures()[:3]


def test_delay_all_to_allv_after_token_parts_keeps_the_values() -> None:
    module = token_parts(2)
    DelayAllToAllvPass().apply(Context(), module)
    check_dominance(module)
    ops = body_ops(module)
    for i, op in enumerate(ops):
        if isinstance(op, AllToAllVOp):
            # right before its first reader, unless the next all_to_allv (order kept) is
            readers = [ops.index(u.operation) for r in op.results for u in r.uses]
            assert readers
            assert min(readers) == i + 1 or isinstance(ops[i + 1], AllToAllVOp)
    assert compare_modules(build_gpt2_moe(CFG), module, ranks=2).ok


def test_output_does_not_depend_on_the_hash_seed(tmp_path) -> None:
    src = tmp_path / "m.mlir"
    src.write_text(to_text(build_gpt2_moe(BIG)))
    outs = []
    for seed in ("0", "12345"):
        spec = "moe-partition{axis=token cluster=p3dn}"
        res = run_tool(["lancet-opt", str(src), "-p", spec], env={"PYTHONHASHSEED": seed})
        assert res.returncode == 0, res.stderr
        outs.append(res.stdout)
    assert outs[0] == outs[1]
    assert "comp.moe_gate_window" in outs[0]


@pytest.mark.parametrize("n", [2, 4])
def test_token_parts_through_the_backward_keep_their_values_when_scheduled(n: int) -> None:
    """`extend=all` (the `token-8-all` candidate of lancet-schedule): the backward of the
    layers around the MoE layer runs in parts too; its border splits along the token axis are
    views (costed 0, executed as slices of their input: `destination.view_split`). The
    scheduled module computes the same values on 2 ranks."""
    from lancet_mlir.dialects.comp import SplitOp
    from lancet_mlir.dialects.destination import view_split

    module = build_gpt2_moe(CFG)
    MoePartitionPass(axis="token", parts=n, extend="all").apply(Context(), module)
    splits = [op for op in body_ops(module) if isinstance(op, SplitOp)]
    # the border splits of the token rows ([16, 11] logits gradient rows, [4, 4] sequences)
    # are views; the q/k/v splits of each part (axis 1 of [rows, 24]) and one of [16, 8]
    # along axis 1 are strided copies
    rows = [op for op in splits if op.axis is None or op.axis.value.data == 0]
    assert sorted(op.operands[0].type.get_shape() for op in rows) == [(4, 4), (16, 11)]
    assert all(view_split(op) for op in rows)
    assert not any(view_split(op) for op in splits if op not in rows)
    assert len(splits) - len(rows) == 1 + 2 * n
    forward_only = token_parts(n)
    assert len(list(body_ops(module))) > len(list(body_ops(forward_only)))
    run_pipeline(module, "lancet-schedule{partition=none max-seconds=0.2}")
    assert compare_modules(build_gpt2_moe(CFG), module, ranks=2).ok
