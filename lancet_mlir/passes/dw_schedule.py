"""dw-schedule: weight-gradient ops into all-to-all windows, all-reduces into the gaps."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from lancet_mlir.graph.rewrite import apply_order, check_dominance
from lancet_mlir.optimize.dw import dw_schedule
from lancet_mlir.passes.costing import CostOptions
from lancet_mlir.passes.options import CheckedOptions
from lancet_mlir.passes.scheduling import block_problem, never_worse


@dataclass(frozen=True)
class DwSchedulePass(CostOptions, CheckedOptions, ModulePass):
    """Lancet's dW scheduling (lancet-algorithms.md §6.2-6.3), deterministic, never worse.

    Per block: Lancet's FIFO list schedule; weight-gradient candidates (compute ops unordered
    with some all-to-all, not optimizer updates, `lancet.role = "dw"` when a role is given)
    are placed right after the all-to-all whose window they fill best (greedy best fit, then
    a deadline pass); all-reduces fill the idle gaps between collectives without delaying
    them (largest fitting first), the rest follow the last collective; optimizer updates run
    as their inputs arrive. The new order is kept only if it simulates strictly faster than
    the input order. Blocks are scheduled innermost first; an op with regions (or a call)
    costs its bodies' simulated makespan as scheduled (times a static trip count;
    `sim.blocks.ModuleSimulation`). Blocks without all-to-all get gap filling only; blocks without
    collectives are unchanged. Algorithm: `lancet_mlir.optimize.dw`.

    Options (all optional; each overrides the module attribute of the same name,
    `lancet.device`, `lancet.cluster`, ...; see `CostOptions`):
      device=NAME, cluster=NAME, profile="FILE", comm-table="FILE",
      gpus-per-node=N, network-gbps=F   the cost model
      comm-streams=K       communication streams of the never-worse check (default 1)
      overlap-slowdown=F   compute slowdown while a collective runs, for the check (default 1.0)
    The placement itself assumes one communication stream, no slowdown and no launch overhead
    (copies on their copy engines, host syncs and virtual nodes on no stream).
    """

    name = "dw-schedule"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        sim = self.module_simulation(op)
        check_dominance(op)
        for item in sim.innermost_first():
            costed = sim.costed(item.block)
            graph = costed.graph
            if not any(graph.is_comm):
                continue
            problem = block_problem(graph, costed.durations, sim.options)
            order = never_worse(problem, dw_schedule(problem).order, sim.options)
            apply_order(graph, order)
            sim.invalidate(item.block)
