"""data-parallel-schedule: Lancet's deterministic FIFO communication-aware launch order."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.fifo import fifo_order
from lancet_mlir.graph.rewrite import apply_order, check_dominance, schedulable_blocks
from lancet_mlir.passes.options import CheckedOptions


@dataclass(frozen=True)
class DataParallelSchedulePass(CheckedOptions, ModulePass):
    """Reorder every block into Lancet's FIFO order (lancet-algorithms.md §2).

    Ops that consume a collective's result are postponed until nothing else is ready, so
    compute launched before them overlaps the collective. Ties are broken by program order,
    never by use-list order: the output is deterministic. Terminators stay last and ops with
    regions move as a whole (uses inside their regions count as their own uses).

    Options: none.
    """

    name = "data-parallel-schedule"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        check_dominance(op)
        for block in schedulable_blocks(op):
            graph = DataflowGraph.from_block(block)
            if len(graph) > 1:
                apply_order(graph, fifo_order(graph))
