"""A block plans each distinct MoE layer once (issue #21, `partition/layer_key.py`): a pair or
layer whose planning problem equals an earlier one's takes that decision at its own offset,
and the plans are exactly those planned without the memo."""

from __future__ import annotations

from helpers import function_graph, to_text

from lancet_mlir import attrs
from lancet_mlir.models.gpt2_moe import GPT2MoEConfig, build_gpt2_moe
from lancet_mlir.partition.capacity_plan import (
    CapacitySearch,
    layer_range,
    plan_capacity_block,
)
from lancet_mlir.partition.expert_span import all_to_all_pairs
from lancet_mlir.partition.layer_key import MemoStats, layer_key
from lancet_mlir.partition.layout import apply_layout
from lancet_mlir.partition.region import erase_unused
from lancet_mlir.partition.token_block import TokenSearch, plan_token_block
from lancet_mlir.partition.token_plan import apply_plans
from lancet_mlir.passes.moe_partition import MoePartitionPass

CFG = GPT2MoEConfig(layers=3, hidden=256, heads=4, seq=128, batch=8, world_size=16,
                    experts_per_rank=2, vocab=16, moe_every=1)  # fmt: skip
"""Three identical MoE layers whose pairs take 2 capacity parts on p4de."""

DP = CapacitySearch("dp", None, 4)


def _time_of(module, slower=None):
    """The p4de cost model's time; `slower`: one op costed 5 µs more."""
    world = module.attributes[attrs.WORLD_SIZE].value.data
    model = MoePartitionPass(cluster="p4de").cost_model(module)
    return lambda op: float(model.op_time_us(op, world)) + (5.0 if op is slower else 0.0)


def _capacity(memo: bool, slow_layer: int | None = None):
    """(stats, the choices as data, the block's text once applied) of the dp plan."""
    module = build_gpt2_moe(CFG)
    graph = function_graph(module)
    slower = None
    if slow_layer is not None:  # the first expert op of that layer's forward pair
        entry, _ = all_to_all_pairs(graph)[slow_layer]
        slower = graph.ops[entry + 1]
    stats = MemoStats()
    plan = plan_capacity_block(graph, _time_of(module, slower), DP, memo, stats)
    choices = [
        (c.range_nodes, c.parts, c.solution and c.solution.options, c.base_us, c.cost_us)
        for c in plan.choices
    ]
    # every pair is split (2 or 3 parts with this cost model): the remembered choices build
    assert len(plan.choices) == 6
    assert all(c.parts is not None and c.parts >= 2 for c in plan.choices)
    apply_layout(graph, plan.layout())
    erase_unused(plan.epilogues())
    return stats, (plan.pairs, plan.ranges, choices), to_text(module)


def test_identical_layers_are_planned_once_with_the_same_plan() -> None:
    stats, plan, text = _capacity(memo=True)
    # the 3 forward pairs are one problem; of the 3 backward pairs, the first in program
    # order (the last layer's) reads the final layer norm's gradient, the others a residual
    # add's (another origin for the border split): 3 problems, 3 pairs found again
    assert stats == MemoStats(hits=3, misses=3, unkeyed=0)
    fresh, fresh_plan, fresh_text = _capacity(memo=False)
    assert fresh == MemoStats()
    assert plan == fresh_plan
    assert text == fresh_text
    # the remembered choice lands at the pair's own offset: one layer is 34 nodes on
    ranges = plan[1]
    assert ranges[1] == [i + 34 for i in ranges[0]]
    assert ranges[2] == [i + 34 for i in ranges[1]]


def test_a_layer_with_another_op_time_is_its_own_problem() -> None:
    stats, plan, text = _capacity(memo=True, slow_layer=1)
    # forward: layers 0 and 2 are one problem, layer 1 (an expert op 5 µs slower) another
    assert stats == MemoStats(hits=2, misses=4, unkeyed=0)
    _, fresh_plan, fresh_text = _capacity(memo=False, slow_layer=1)
    assert plan == fresh_plan
    assert text == fresh_text


def test_the_key_holds_what_earlier_regions_offer() -> None:
    module = build_gpt2_moe(CFG)
    graph = function_graph(module)
    time_of = _time_of(module)
    (e0, x0), (e1, x1) = all_to_all_pairs(graph)[:2]
    first, second = layer_range(graph, e0, x0), layer_range(graph, e1, x1)
    a = layer_key(graph, [first], time_of, {}, (e0 - first[0], x0 - first[0]))
    b = layer_key(graph, [second], time_of, {}, (e1 - second[0], x1 - second[0]))
    assert a is not None
    assert b is not None
    assert a.key == b.key
    assert b.nodes == tuple(i + 34 for i in a.nodes)
    # the same layer with parts of its input on offer from an earlier region
    x = graph.ops[second[0]].operands[0]
    offered = {x: {((0, 1), 2): [x, x]}}
    c = layer_key(graph, [second], time_of, offered, (e1 - second[0], x1 - second[0]))
    assert c is not None
    assert c.key != b.key


CFG4 = GPT2MoEConfig(layers=4, hidden=256, heads=4, seq=128, batch=8, world_size=16,
                     experts_per_rank=2, vocab=16, moe_every=1)  # fmt: skip
"""Four MoE layers: the first and the last have their own spans, the middle two are one."""


def _token(memo: bool, parts: int | None):
    module = build_gpt2_moe(CFG4)
    graph = function_graph(module)
    stats = MemoStats()
    chosen = plan_token_block(
        graph, _time_of(module), TokenSearch(parts, 4, "forward"), memo, stats
    )
    summary = [(plan.n, plan.ranges(), [len(o) for o in orders]) for plan, orders in chosen]
    apply_plans(graph, chosen)
    erase_unused([op for plan, _ in chosen for op in plan.epilogues()])
    return stats, summary, to_text(module)


def test_token_layers_take_an_equal_layers_decision() -> None:
    for parts in (2, None):  # a forced count, then the count the search chooses
        stats, summary, text = _token(True, parts)
        # layer 0's span starts at the block's start, layer 3's ends at the forward's end,
        # layer 2 is layer 1 one layer on (with layer 1's parts on offer as layer 2's are)
        assert stats == MemoStats(hits=1, misses=3, unkeyed=0)
        assert [n for n, _, _ in summary] == [2, 2, 2, 2]
        fresh, fresh_summary, fresh_text = _token(False, parts)
        assert fresh == MemoStats()
        assert summary == fresh_summary
        assert text == fresh_text
