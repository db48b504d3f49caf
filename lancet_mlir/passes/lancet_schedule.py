"""lancet-schedule: Lancet's profiled list schedule, never slower than the input order."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import apply_order, check_dominance
from lancet_mlir.passes.costing import CostOptions
from lancet_mlir.passes.options import CheckedOptions
from lancet_mlir.sim.blocks import simulated_blocks
from lancet_mlir.sim.profiled_schedule import ScheduleDecision, profiled_fifo_schedule

__all__ = ["LancetSchedulePass", "ScheduleDecision", "profiled_fifo_schedule"]


@dataclass(frozen=True)
class LancetSchedulePass(CostOptions, CheckedOptions, ModulePass):
    """Reorder every block into Lancet's profiled FIFO list schedule (§6.1), never worse.

    Each block is list-scheduled with the cost model of its options and the module
    (`lancet.time_us` > profile > roofline/comm table; `passes/costing.py`): priority 1 for
    every op, 0 for ops that consume an allreduce result, which are also held back until
    nothing else can run. The simulated launch order (by start time, compute first at equal
    start) becomes the block order, but only if the fixed-order simulation of the new order
    is strictly faster than the input order; otherwise the block is left as it is.
    Deterministic; terminators stay last.

    Options (all optional; each overrides the module attribute of the same name,
    `lancet.device`, `lancet.cluster`, ...; see `CostOptions`):
      device=NAME, cluster=NAME, profile="FILE", comm-table="FILE",
      gpus-per-node=N, network-gbps=F   the cost model
      comm-streams=K       number of communication streams (default 1)
      overlap-slowdown=F   compute runs F times slower while a collective runs (default 1.0)
    """

    name = "lancet-schedule"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        options = self.sim_options(op)
        cost_model = self.cost_model(op)
        check_dominance(op)
        for item in simulated_blocks(op):
            graph = DataflowGraph.from_block(item.block)
            if len(graph) < 2:
                continue
            durations = [float(d) for d in cost_model.graph_times(graph)]
            decision = profiled_fifo_schedule(graph, durations, options)
            if decision.changed:
                apply_order(graph, decision.order)
