"""fuse-noncritical-comm: merge all-reduces off the critical path when it does not hurt."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.optimize.chains import block_order, split_chains
from lancet_mlir.optimize.contract import contract
from lancet_mlir.optimize.fusion import plan_noncritical_fusion
from lancet_mlir.optimize.pipeline import PipelineResult
from lancet_mlir.passes.costing import CostOptions
from lancet_mlir.passes.options import CheckedOptions
from lancet_mlir.passes.scheduling import (
    apply_result,
    block_problem,
    fusion_hooks,
    simulated_makespan,
)


@dataclass(frozen=True)
class FuseNoncriticalCommPass(CostOptions, CheckedOptions, ModulePass):
    """Lancet's non-critical all-reduce fusion (lancet-algorithms.md §7.5), index bug fixed.

    Per block, in its current order: consecutive compatible all-reduces on the communication
    stream (same op, properties and element types; neither with a measured `lancet.time_us`,
    e.g. an imported NCCL kernel, whose time includes waiting for the peers and so says
    nothing of a fused op's: `graph.buckets.measured_collective`) whose fused op could start
    before the second one ends are merged when the simulated makespan does not grow; equal makespan
    with one op fewer counts as better. The fused collective takes the later member's place
    (`fuse_collectives`), its time comes from the cost model. The other ops keep their
    relative order. Blocks are visited innermost first; an op with regions (or a call) costs
    its bodies' simulated makespan (`sim.blocks.ModuleSimulation`). Algorithm:
    `lancet_mlir.optimize.fusion`.

    Options (all optional; each overrides the module attribute of the same name; see
    `CostOptions`):
      device=NAME, cluster=NAME, profile="FILE", comm-table="FILE",
      gpus-per-node=N, network-gbps=F   the cost model
      comm-streams=K       communication streams of the never-worse check (default 1)
      overlap-slowdown=F   compute slowdown while a collective runs, for the check (default 1.0)
    The merge decisions use one communication stream, no slowdown and no launch overhead
    (copies on their copy engines, host syncs and virtual nodes on no stream); the result is
    kept only if it is not slower than the input under the given options.
    """

    name = "fuse-noncritical-comm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        sim = self.module_simulation(op)
        options = sim.options
        cost_model = self.cost_model(op)
        check_dominance(op)
        for item in sim.innermost_first():
            costed = sim.costed(item.block)
            graph = costed.graph
            if sum(1 for c in graph.is_comm if c) < 2:
                continue
            problem = block_problem(graph, costed.durations, options)
            hooks = fusion_hooks(graph, cost_model)
            chains = split_chains(problem, range(len(problem)))
            plan = plan_noncritical_fusion(problem, chains, hooks.fused_time, hooks.compatible)
            if not plan.groups:
                continue
            fused, old_index = contract(
                problem, plan.groups, [hooks.fused_time(g) for g in plan.groups]
            )
            new_index = {old: k for k, old in enumerate(old_index)}
            order = block_order(
                fused,
                [[new_index[v] for v in chain] for chain in plan.chains],
                [plan.times.start[v] for v in old_index],
            )
            before = simulated_makespan(problem, list(range(len(problem))), options)
            if simulated_makespan(fused, order, options) > before:
                continue
            apply_result(graph, PipelineResult(fused, order, plan.groups, old_index))
            sim.invalidate(item.block)
