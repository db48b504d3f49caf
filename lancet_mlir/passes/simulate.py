"""simulate: annotate every op with its simulated start/end time and stream."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.passes.costing import CostOptions
from lancet_mlir.passes.options import CheckedOptions
from lancet_mlir.sim.blocks import (
    END_ATTR,
    EXPOSED_ATTR,
    MAKESPAN_ATTR,
    START_ATTR,
    STREAM_ATTR,
    BlockResult,
    GraphCostModel,
    SimBlock,
    annotate_module,
    simulate_graph,
    simulate_module,
    simulated_blocks,
)

__all__ = [
    "END_ATTR", "EXPOSED_ATTR", "MAKESPAN_ATTR", "START_ATTR", "STREAM_ATTR", "BlockResult",
    "GraphCostModel", "SimBlock", "SimulatePass", "annotate_module", "simulate_graph",
    "simulate_module", "simulated_blocks",
]


@dataclass(frozen=True)
class SimulatePass(CostOptions, CheckedOptions, ModulePass):
    """Simulate every block in its current order and annotate the IR with the timeline.

    Costs ops with the cost model of its options and the module (`lancet.time_us` > profile >
    roofline/comm table; `passes/costing.py`). Every op of every simulated block gets
    `lancet.start_us`, `lancet.end_us` (f64, µs from the start of its block) and
    `lancet.stream` (i64: 0 compute, 1.. communication); every func.func gets
    `lancet.makespan_us` and `lancet.exposed_comm_us`. The order is not changed.

    Options (all optional; each overrides the module attribute of the same name,
    `lancet.device`, `lancet.cluster`, ...; see `CostOptions`):
      device=NAME, cluster=NAME, profile="FILE", comm-table="FILE",
      gpus-per-node=N, network-gbps=F   the cost model
      comm-streams=K       number of communication streams (default 1)
      overlap-slowdown=F   compute runs F times slower while a collective runs (default 1.0)
    """

    name = "simulate"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        options = self.sim_options(op)
        cost_model = self.cost_model(op)
        check_dominance(op)
        simulate_module(op, cost_model, options, annotate=True)
