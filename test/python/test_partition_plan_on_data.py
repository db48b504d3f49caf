"""moe-partition{axis=token} plans on data and builds the IR once (issue 17, deliverable 7):
the planned block (`planned_graph`) is exactly the block the applied plans give, and a block
whose plans are not faster keeps its own ops (no clone, no restore); lancet-schedule's
partitioned candidates (`partition/candidates.py`)."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import function_graph, to_text
from test_token_partition import CFG
from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir import attrs
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.models.gpt2_moe import build_gpt2_moe
from lancet_mlir.partition.candidates import count_parts, partition_candidates
from lancet_mlir.partition.region import erase_unused
from lancet_mlir.partition.token_block import (
    TokenSearch,
    discard_plans,
    middle,
    plan_token_block,
    planned_graph,
)
from lancet_mlir.partition.token_plan import apply_plans, layout_plans
from lancet_mlir.passes.moe_partition import MoePartitionPass

CFG4 = dataclasses.replace(CFG, layers=4)  # two MoE layers (1 and 3)


def _time_of(module):
    model = MoePartitionPass(axis="token", cluster="p3dn").cost_model(module)
    return lambda op: float(model.op_time_us(op, 2))


@pytest.mark.parametrize(
    ("cfg", "parts", "extend"),
    [(CFG, 2, "forward"), (CFG, 3, "all"), (CFG4, 2, "all"), (CFG4, 4, "none")],
)
def test_the_planned_block_is_the_applied_block(cfg, parts, extend) -> None:
    module = build_gpt2_moe(cfg)
    graph = function_graph(module)
    time_of = _time_of(module)
    chosen = plan_token_block(graph, time_of, TokenSearch(parts, 4, extend))
    assert chosen  # every layer was planned
    planned = planned_graph(graph, chosen)
    laid_out = len(layout_plans(graph, chosen)[0])
    apply_plans(graph, chosen)
    erase_unused([op for plan, _ in chosen for op in plan.epilogues()])
    assert graph.block is not None
    applied = DataflowGraph.from_block(graph.block)
    assert applied.ops == planned.ops  # the same op objects in the same order
    assert applied.preds == planned.preds
    assert applied.succs == planned.succs
    if (cfg, extend) == (CFG4, "all"):  # rebuilds that later layers read in parts are gone
        assert len(applied.ops) < laid_out


def test_discarded_plans_leave_the_block_as_it_was() -> None:
    module = build_gpt2_moe(CFG4)
    before = to_text(module)
    graph = function_graph(module)
    uses = [len(list(r.uses)) for op in graph.ops for r in op.results]
    chosen = plan_token_block(graph, _time_of(module), TokenSearch(2, 4, "all"))
    discard_plans(chosen)
    assert [len(list(r.uses)) for op in graph.ops for r in op.results] == uses
    assert to_text(module) == before


def test_a_block_that_gains_nothing_keeps_its_own_ops() -> None:
    # the tiny model's collectives are latency on p3dn: token parts only add work
    module = build_gpt2_moe(CFG)
    ops = list(function_graph(module).ops)
    before = to_text(module)
    MoePartitionPass(axis="token", cluster="p3dn").apply(Context(), module)
    assert to_text(module) == before
    assert function_graph(module).ops == ops  # not clones put back: the very same ops


def test_middle_splits_by_time() -> None:
    module = build_gpt2_moe(CFG)
    graph = function_graph(module)
    times = {op: t for op, t in zip(graph.ops, [1.0, 1.0, 4.0, 1.0, 1.0], strict=False)}
    # ops 0..4 take 1, 1, 4, 1, 1 µs: half of 8 µs is reached after op 2
    assert middle(graph, 0, 5, lambda op: times[op]) == 3
    assert middle(graph, 0, 2, lambda op: times[op]) == 1
    assert middle(graph, 3, 3, lambda op: times[op]) == 3  # an empty span


def test_candidates_are_clones_and_refusals_are_reported() -> None:
    module = build_gpt2_moe(CFG)
    before = to_text(module)

    def tag(m) -> None:  # partitions something: one op gets a part index
        next(op for op in m.walk() if op.results).attributes[attrs.PART] = IntegerAttr(0, 64)

    def refuse(m) -> None:
        raise PassFailedException("no axis")

    refused: list[tuple[str, str]] = []
    trials = partition_candidates(
        module,
        [("nothing", lambda m: None), ("no", refuse), ("tag", tag)],
        lambda label, reason: refused.append((label, reason)),
    )
    assert [label for label, _ in trials] == ["tag"]
    assert refused == [("no", "no axis")]
    assert count_parts(trials[0][1]) == 1
    assert count_parts(module) == 0
    assert to_text(module) == before  # every stage ran on its own clone
