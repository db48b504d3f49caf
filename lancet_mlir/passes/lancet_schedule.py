"""lancet-schedule: Lancet's profiled list schedule, never slower than the input order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import apply_order, check_dominance
from lancet_mlir.passes.costing import CostOptions
from lancet_mlir.passes.options import CheckedOptions
from lancet_mlir.passes.simulate import simulated_blocks
from lancet_mlir.sim.options import SimOptions
from lancet_mlir.sim.timeline import (
    GraphLike,
    evaluate_fixed_order,
    list_schedule,
    weight_update_first,
)


@dataclass(frozen=True)
class ScheduleDecision:
    """The outcome for one block: the order to emit and both fixed-order makespans."""

    order: list[int]
    input_makespan_us: float
    output_makespan_us: float

    @property
    def changed(self) -> bool:
        """True if `order` differs from the input (block) order."""
        return self.order != list(range(len(self.order)))


def profiled_fifo_schedule(
    graph: GraphLike, durations: Sequence[float], options: SimOptions | None = None
) -> ScheduleDecision:
    """Lancet's profiled FIFO scheduler (lancet-algorithms.md §6.1, §1.4 steps 2-3, §9.5).

    Every op has priority 1 except the weight-update-first ops (consumers of an allreduce
    result), which get priority 0 and are delayed until nothing else can run. The list
    schedule's total launch order is the candidate; it is kept only if its fixed-order
    evaluation is strictly faster than the input order's ("never worse"), otherwise the
    input order (node order) is returned.
    """
    options = options or SimOptions()
    n = len(graph.preds)
    kwargs = {
        "num_comm_streams": options.num_comm_streams,
        "overlap_slowdown": options.overlap_slowdown,
    }
    base = evaluate_fixed_order(graph, durations, **kwargs).makespan_us
    delayed = weight_update_first(graph)
    priorities = [1.0] * n
    for i in delayed:
        priorities[i] = 0.0
    candidate = list_schedule(graph, durations, priorities=priorities, delayed=delayed, **kwargs)
    order = candidate.order
    new = evaluate_fixed_order(graph, durations, order=order, **kwargs).makespan_us
    if new < base:
        return ScheduleDecision(order, base, new)
    return ScheduleDecision(list(range(n)), base, base)


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
