"""What lancet-schedule's candidates share, checked to change no result: the DP's estimates
share their template ops (`region.SharedOps`: the same makespans as unshared estimates,
fewer ops built, nothing left reading the block once discarded); the kernel registry's
FLOP/byte count is memoised by shape; fused all-reduces are priced once per
sequence of member signatures across blocks; op times are memoised by signature for the
candidates (`TimeMemo`); the pass runs with the input frozen for the garbage collector."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from helpers import function_graph, parse
from xdsl.context import Context
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation

from lancet_mlir.cost.cost_model import (
    CostConfig,
    CostKeys,
    CostModel,
    TimeMemo,
    cost_signature,
)
from lancet_mlir.dialects import comp
from lancet_mlir.dialects.comp import build_op, kernel_of, op_sigs
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import fused_collective, member_signature
from lancet_mlir.models.gpt2_moe import GPT2MoEConfig, build_gpt2_moe
from lancet_mlir.partition.axes import AxisSolution, solve_axes
from lancet_mlir.partition.base import shape_of
from lancet_mlir.partition.capacity_plan import layer_range
from lancet_mlir.partition.estimate import estimate_range
from lancet_mlir.partition.expert_span import all_to_all_pairs
from lancet_mlir.partition.region import SharedOps
from lancet_mlir.passes import scheduling
from lancet_mlir.passes.scheduling import FusionPrices, fusion_hooks

# capacity 8: 3 and 5 parts are uneven
CFG = GPT2MoEConfig(layers=2, hidden=64, heads=4, seq=32, batch=4, world_size=8,
                    experts_per_rank=2, vocab=64)  # fmt: skip


def _graph() -> DataflowGraph:
    fn = next(op for op in build_gpt2_moe(CFG).walk() if isinstance(op, FuncOp))
    return DataflowGraph.from_block(fn.body.block)


def _time_of():
    model = CostModel.from_config(CostConfig(device="v100"))
    return lambda op: model.op_time_us(op, CFG.world_size)


def _choices(graph: DataflowGraph, time_of) -> list[tuple[list[int], AxisSolution, int]]:
    """(range, solution, n) as the DP tries them: ranges grown around each pair's layer,
    every count 2..5."""
    out = []
    for entry, exit_ in all_to_all_pairs(graph):
        layer = layer_range(graph, entry, exit_)
        for grow_lo in (0, 2, 4):
            for grow_hi in (0, 3):
                nodes = list(
                    range(max(0, layer[0] - grow_lo), min(len(graph), layer[-1] + 1 + grow_hi))
                )
                weights = {i: max(time_of(graph.ops[i]), 1e-3) for i in nodes}
                for n in (2, 3, 4, 5):
                    solution = solve_axes(graph, nodes, [entry, exit_], weights, parts=n)
                    if solution is not None:
                        out.append((nodes, solution, n))
    return out


def _uses(graph: DataflowGraph) -> list[int]:
    return [len(list(r.uses)) for op in graph.ops for r in op.results]


def test_shared_estimates_equal_unshared_ones_and_build_less() -> None:
    graph, time_of = _graph(), _time_of()
    choices = _choices(graph, time_of)
    assert len(choices) >= 40
    uses = _uses(graph)
    alone = [estimate_range(graph, nodes, sol, n, time_of) for nodes, sol, n in choices]
    assert _uses(graph) == uses  # each unshared estimate erased its ops
    shared = SharedOps()
    together = [
        estimate_range(graph, nodes, sol, n, time_of, None, shared) for nodes, sol, n in choices
    ]
    assert together == alone  # exactly, not approximately
    built = len(shared.owned)
    # asked again, every choice finds all its ops made: nothing new, the same makespans
    again = [
        estimate_range(graph, nodes, sol, n, time_of, None, shared) for nodes, sol, n in choices
    ]
    assert again == alone
    assert len(shared.owned) == built
    # one estimate alone builds as much as the first choice did: sharing builds less than
    # the choices one by one
    each = 0
    for nodes, sol, n in choices:
        one = SharedOps()
        estimate_range(graph, nodes, sol, n, time_of, None, one)
        each += len(one.owned)
        one.discard()
    assert built < each
    assert _uses(graph) != uses  # the shared copies read the block's values until ...
    shared.discard()
    assert _uses(graph) == uses  # ... they are discarded
    assert shared.owned == []
    assert shared.made == {}


def test_a_choice_counts_only_its_own_readers_of_a_region_result() -> None:
    # a value that a copy made for another choice reads is not "used outside the region"
    # for this one: the estimate after many others equals the estimate made first
    graph, time_of = _graph(), _time_of()
    choices = _choices(graph, time_of)
    last = choices[-1]
    first = estimate_range(graph, *last[:1], last[1], last[2], time_of)
    shared = SharedOps()
    for nodes, sol, n in choices:
        estimate_range(graph, nodes, sol, n, time_of, None, shared)
    assert estimate_range(graph, last[0], last[1], last[2], time_of, None, shared) == first
    shared.discard()


def test_flops_bytes_are_counted_once_per_shape(monkeypatch) -> None:
    calls: list[Operation] = []

    def counting(op: Operation):
        calls.append(op)
        return op_sigs(op)

    monkeypatch.setattr(comp, "op_sigs", counting)
    monkeypatch.setattr(comp, "_FLOPS_BYTES", {})
    graph = _graph()
    matmuls = [op for op in graph.ops if op.name == "comp.matmul"]
    first = matmuls[0]
    twin = build_op("matmul", list(first.operands), None)  # a new op of the same shapes
    other = next(op for op in matmuls if op.operands[0].type != first.operands[0].type or
                 op.operands[1].type != first.operands[1].type)  # fmt: skip
    kernel = kernel_of(first)
    assert kernel is not None
    expected = kernel.cost(*op_sigs(first), comp.kernel_params(first))
    assert comp.op_flops_bytes(first) == expected
    assert comp.op_flops_bytes(twin) == expected
    assert calls == [first]  # the twin was not counted again
    ins, outs = op_sigs(other)
    assert comp.op_flops_bytes(other) == kernel.cost(ins, outs, comp.kernel_params(other))
    assert calls == [first, other]
    out_shape, w_shape = shape_of(first.results[0]), shape_of(first.operands[1])
    assert out_shape is not None
    assert w_shape is not None
    assert expected[0] == pytest.approx(2.0 * math.prod(out_shape) * w_shape[0])  # 2 M N K
    twin.erase()


def test_lancet_schedule_runs_with_the_input_frozen_and_fewer_collections(monkeypatch) -> None:
    import gc

    from lancet_mlir.passes import lancet_schedule
    from lancet_mlir.passes.lancet_schedule import GC_THRESHOLD, LancetSchedulePass

    seen: list[tuple[int, int]] = []
    run = lancet_schedule.run_pipeline

    def spy(*args, **kwargs):
        seen.append((gc.get_threshold()[0], gc.get_freeze_count()))
        return run(*args, **kwargs)

    monkeypatch.setattr(lancet_schedule, "run_pipeline", spy)
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    module = build_gpt2_moe(CFG)
    LancetSchedulePass(partition="none", max_seconds=0).apply(Context(), module)
    assert seen
    assert all(t == GC_THRESHOLD and count > frozen for t, count in seen)
    assert gc.get_threshold() == before  # restored
    assert gc.get_freeze_count() == frozen


GRADS = """
builtin.module attributes {lancet.world_size = 8 : i64} {
  func.func @f(%g: tensor<262144xf32>, %h: tensor<786432xf32>) {
    %a = comm.allreduce %g {lancet.fill = 0.5 : f64, lancet.role = "dw"} : (tensor<262144xf32>) -> tensor<262144xf32>
    %b = comm.allreduce %h {lancet.role = "dw"} : (tensor<786432xf32>) -> tensor<786432xf32>
    %c = comm.allreduce %g {lancet.fill = 0.5 : f64, lancet.role = "dw"} : (tensor<262144xf32>) -> tensor<262144xf32>
    %d = comm.allreduce %h {lancet.role = "dw"} : (tensor<786432xf32>) -> tensor<786432xf32>
    %e = comm.allreduce %g {lancet.fill = 0.5 : f64} : (tensor<262144xf32>) -> tensor<262144xf32>
    %f = comm.allreduce %h {lancet.role = "dw"} : (tensor<786432xf32>) -> tensor<786432xf32>
    func.return
  }
}
"""


def _fused_text(members: list[Operation]) -> str:
    fused, _ = fused_collective(members)
    text = f"{fused.name} {[v.type for v in fused.operands]} {dict(fused.properties)} {dict(fused.attributes)}"
    fused.erase()
    return text


def test_groups_of_equal_member_signatures_fuse_into_equal_ops() -> None:
    ops = function_graph(parse(GRADS)).ops
    groups = [[0, 1], [2, 3], [4, 5], [1, 0], [0, 2], [2, 4], [0, 1, 2], [2, 3, 4]]
    pairs = 0
    for x in groups:
        for y in groups:
            if [member_signature(ops[i]) for i in x] == [member_signature(ops[i]) for i in y]:
                assert _fused_text([ops[i] for i in x]) == _fused_text([ops[i] for i in y])
                pairs += x != y
    assert pairs == 2  # [0, 1] ~ [2, 3] and back: the layers' pairs fuse alike
    # by hand: without the common role (e) or with another fill, members differ
    assert member_signature(ops[0]) == member_signature(ops[2])
    assert member_signature(ops[1]) == member_signature(ops[3]) == member_signature(ops[5])
    assert member_signature(ops[4]) != member_signature(ops[0])  # no role
    assert member_signature(ops[0]) != member_signature(ops[1])
    assert _fused_text([ops[4], ops[5]]) != _fused_text([ops[0], ops[1]])


def test_fusion_prices_are_shared_by_signature_across_blocks(monkeypatch) -> None:
    built: list[int] = []
    make = scheduling.fused_collective

    def counting(members):
        built.append(len(members))
        return make(members)

    monkeypatch.setattr(scheduling, "fused_collective", counting)
    model = CostModel.from_config(CostConfig(cluster="p3dn"))
    priced = FusionPrices()
    one = fusion_hooks(function_graph(parse(GRADS)), model, priced)
    other_graph = function_graph(parse(GRADS))  # another candidate's block
    other = fusion_hooks(other_graph, model, priced)
    first = one.fused_time([0, 1])
    assert built == [2]
    assert other.fused_time([2, 3]) == first  # same signature: not built again
    assert one.fused_time([2, 3]) == first
    assert built == [2]
    other.fused_time([4, 5])  # no common role: another op, built and priced (alike here)
    assert built == [2, 2]
    fused, _ = make([other_graph.ops[2], other_graph.ops[3]])
    assert first == model.op_time_us(fused, 8)
    fused.erase()


MEMO_TEXT = """
builtin.module attributes {lancet.world_size = 4 : i64} {
  func.func @f(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    %a = "test.op"(%x) {lancet.time_us = 2.0 : f64, lancet.part = 0 : i64} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %b = "test.op"(%x) {lancet.time_us = 2.0 : f64, lancet.part = 1 : i64} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %c = "test.op"(%x) {lancet.time_us = 3.0 : f64} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %r = comm.allreduce %a : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %s = comm.allreduce %b : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %u = "foo.bar"(%r, %s, %c) : (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    func.return %u : tensor<8x4xf32>
  }
}
"""


def _counting_model(chain=None) -> tuple[CostModel, list[str]]:
    """A fresh (uncached) model whose chain answers are counted, by op name."""
    model = CostModel.build(CostConfig(device="h100"), chain=chain)
    asked: list[str] = []
    answer = model._answer

    def counted(op: Operation, world_size: int | None) -> float | None:
        asked.append(op.name)
        return answer(op, world_size)

    model._answer = counted  # type: ignore[method-assign]
    return model, asked


def test_time_memo_answers_as_the_model_and_asks_once_per_signature() -> None:
    graph = function_graph(parse(MEMO_TEXT))
    plain = CostModel.build(CostConfig(device="h100"))
    expected = plain.graph_times(graph)
    allreduce = expected[3]
    assert allreduce > 0
    assert expected == [2.0, 2.0, 3.0, allreduce, allreduce, 0.0]
    model, asked = _counting_model()
    memo = TimeMemo(model)
    assert memo.graph_times(graph) == expected
    # %b and %s differ from %a and %r only in lancet.part (or not at all): not asked again;
    # foo.bar has no answer, so it is asked each time and counted for the warning
    assert asked == ["test.op", "test.op", "comm.allreduce", "builtin.unregistered"]
    assert memo.graph_times(graph) == expected
    assert asked[4:] == ["builtin.unregistered"]
    assert memo.op_time_us(graph.ops[1], 4) == 2.0
    assert len(asked) == 5
    assert model.unknown_ops() == ["foo.bar"]
    # a caller's source may read anything: every op is asked every time
    custom, asked_custom = _counting_model(chain=[*plain.default_chain()[:1], Durations()])
    assert not custom.signature_pure()
    assert TimeMemo(custom).graph_times(graph) == [2.0, 2.0, 3.0, 0.0, 0.0, 0.0]
    assert len(asked_custom) == 6


@dataclass(frozen=True)
class Durations:
    """A caller's source that knows no op."""

    name: str = "none"
    measured: bool = False

    def time_us(self, op: Operation, world_size: int | None) -> float | None:
        return None


def test_cost_keys_are_equal_exactly_when_signatures_are() -> None:
    graph = function_graph(parse(MEMO_TEXT))
    ops = graph.ops
    keys = CostKeys()
    numbered = [keys.key(op) for op in ops]
    # %a and %b differ in lancet.part alone, %r and %s not at all (their operand types are
    # equal); the rest differ
    assert cost_signature(ops[0]) == cost_signature(ops[1])
    assert numbered[0] == numbered[1]
    assert numbered[3] == numbered[4]
    assert len(set(numbered)) == 4
    for a, b in [(a, b) for a in ops for b in ops]:
        assert (keys.key(a) == keys.key(b)) == (cost_signature(a) == cost_signature(b))
    # numbered in first-seen order: %a's time (2.0) first, then tensor<8x4xf32>, which
    # every operand and result is, whichever object carries it; %c's time (3.0) next
    assert numbered[0] == ("test.op", (1,), (1,), (), (("lancet.time_us", 0),))
    assert numbered[2] == ("test.op", (1,), (1,), (), (("lancet.time_us", 2),))
    # the allreduce carries its default reduction (sum) as a property
    assert numbered[3] == ("comm.allreduce", (1,), (1,), (("reduction", 3),), ())
    # with the identity map emptied at every new object, keys stay the same
    keys.numbers.identity_limit = 1
    assert [keys.key(op) for op in function_graph(parse(MEMO_TEXT)).ops] == numbered
    # 2.0, tensor<8x4xf32>, 3.0, the reduction and foo.bar's name (an unregistered op holds it
    # as an attribute)
    assert len(keys.numbers) == 5


def test_a_dropped_best_candidate_is_freed_though_it_was_frozen() -> None:
    import gc
    import weakref

    from lancet_mlir.passes.candidate_run import collect_dropped

    class Node:
        """A cycle (as a module's ops are, through their parents): only the collector frees it."""

        def __init__(self) -> None:
            self.me = self

    frozen = gc.get_freeze_count()
    try:
        best, loser = Node(), Node()
        kept, lost = weakref.ref(best), weakref.ref(loser)
        del loser
        collect_dropped(False)  # the loser is freed, the best so far frozen
        assert lost() is None
        assert kept() is not None
        assert gc.get_freeze_count() > frozen
        del best  # a faster candidate replaced it: frozen, it would never be freed
        gc.collect()
        assert kept() is not None  # (a frozen cycle is not collected)
        collect_dropped(True)
        assert kept() is None
    finally:
        gc.unfreeze()
