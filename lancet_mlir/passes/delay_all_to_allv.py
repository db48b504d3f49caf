"""delay-all-to-allv: issue each `comm.all_to_allv` right before its first reader (§9.1)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from lancet_mlir.dialects.comm import AllToAllVOp
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import apply_order, check_dominance, schedulable_blocks
from lancet_mlir.passes.options import CheckedOptions


def delayed_order(graph: DataflowGraph) -> list[int]:
    """The block order with every all_to_allv moved down to just before its first reader.

    An all_to_allv exchanges its counts on the host before the data moves, so the host
    waits for it (Lancet's all_to_allv synchronises its stream); issuing it as late as
    possible lets the compute launched before it be queued first. Each one's target is
    its earliest reader (any result; nested uses count); one read only by the terminator,
    or by nobody, goes to the end of the block (its results cannot be read too early,
    unlike Lancet's, whose unread tuple field could end up before the all_to_allv).
    Targets are clamped so an earlier all_to_allv never moves past a later one: their
    relative order is kept. Ops with the same target keep program order. Topological by
    construction: an op only moves later, and never past a reader.
    """
    n = len(graph)
    moved = [i for i in range(n) if isinstance(graph.ops[i], AllToAllVOp)]
    target: dict[int, int] = {}
    bound = n
    for i in reversed(moved):  # keep the all_to_allvs in program order
        # no reader in the block (only the terminator, or nobody): as late as allowed
        bound = min(bound, min(graph.succs[i], default=n))
        target[i] = bound
    waiting: dict[int, list[int]] = {}
    for i in moved:
        if target[i] != i:
            waiting.setdefault(target[i], []).append(i)
    order: list[int] = []
    for j in range(n):
        order += waiting.get(j, [])
        if j not in target or target[j] == j:
            order.append(j)
    return order + waiting.get(n, [])  # read only by the terminator: last


@dataclass(frozen=True)
class DelayAllToAllvPass(CheckedOptions, ModulePass):
    """Move every `comm.all_to_allv` down to just before the first op that reads one of its
    results (Lancet's `DelayAllToAllv`, §9.1).

    all_to_allv (the per-part exchange of uneven partitions) synchronises the host, so
    issuing it late lets more compute be queued ahead of it. The all_to_allvs keep their
    relative order; one whose results are read by no op of the block (only by the
    terminator, or not at all) goes last (Lancet's version could leave such a result
    before its producer); every other op keeps its order. This
    is an emission rule for real runtimes: the simulator does not model the host wait, so
    the pass is not rated by simulation (and may look slower there). No options.
    """

    name = "delay-all-to-allv"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        check_dominance(op)
        for block in schedulable_blocks(op):
            graph = DataflowGraph.from_block(block)
            if not any(isinstance(o, AllToAllVOp) for o in graph.ops):
                continue
            order = delayed_order(graph)
            assert graph.is_topological(order), "delay-all-to-allv broke the dependencies"
            apply_order(graph, order)
        check_dominance(op)
