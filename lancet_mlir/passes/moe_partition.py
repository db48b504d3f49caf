"""moe-partition: split MoE layers (forward and backward) into pipelined parts (Lancet §8)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir.dialects.comm import module_world_size
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import check_dominance, schedulable_blocks
from lancet_mlir.partition.axes import AxisSolution, indivisible, part_counts, solve_axes
from lancet_mlir.partition.expert_span import all_to_all_pairs
from lancet_mlir.partition.region import (
    OpCost,
    apply_region,
    build_region,
    simulate_range,
)
from lancet_mlir.passes.options import CheckedOptions, check_int
from lancet_mlir.profile.cost_model import CostModel
from lancet_mlir.sim.timeline import evaluate_fixed_order

ALGOS = ("dp", "range")


def _cost_model(module: ModuleOp) -> CostModel:
    """The cost model for `module` (the one place to change when costing gets explicit)."""
    from lancet_mlir.profile.cost_model import active_cost_model

    return active_cost_model()


@dataclass(frozen=True)
class Choice:
    """How one range runs: its nodes, the region solved in it and the chosen part count
    (None: not partitioned), with the simulated makespans."""

    range_nodes: list[int]
    solution: AxisSolution | None
    parts: int | None
    base_us: float
    cost_us: float


@dataclass(frozen=True)
class MoePartitionPass(CheckedOptions, ModulePass):
    """Split every MoE layer's all-to-all pair and the compute around it into n parts
    that pipeline part k's collectives with part k±1's compute (Lancet §8).

    For each pair of all-to-alls (forward: dispatch and return; backward: the gradients'
    way back and forth, which Lancet does not partition) the split axis of every op in a
    range of program order around the pair is inferred from the kernel registry's rules
    (`lancet_mlir.partition.axes`: capacity, expert or hidden axis; ops whose rule does not
    allow the axis are left out and the region shrinks). The region is rewritten into n
    parts: operands from outside are split at the border, results needed outside are
    concatenated (partial sums, e.g. weight gradients and the combine, are added up), each
    op gets n copies tagged `lancet.part = k`, and the range is emitted in the launch
    order of Lancet's phased pipeline simulation (§5.3), which also costs the choice with
    the active cost model (new per-part ops are costed for their own shapes). A range is
    rewritten only when the simulation rates it faster than the unpartitioned range, and
    the block keeps its input when the fixed-order simulation of the result is not faster
    (never worse).

    Options:
      algo=range|dp  range: the MoE layer's own ops (the pair and the ops that feed the
                     first and read the second all-to-all); dp: the same ranges, where the
                     part count is chosen by the simulation (the ranges DP of §8.3 is
                     `lancet_mlir.partition.dp`; see docs/passes.md for the status)
      max-parts=N    largest part count tried (default 8); counts must divide every split
                     dimension
      parts=N        force N parts on every pair (N >= 2; the pass fails naming the op and
                     dimension when N does not divide it); skips the never-worse checks
    """

    name = "moe-partition"

    algo: str = "dp"
    max_parts: int = 8
    parts: int | None = None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.algo not in ALGOS:
            raise PassFailedException(
                f"{self.name}: option algo must be one of {', '.join(ALGOS)}, got {self.algo}"
            )
        check_int(self.name, "max-parts", self.max_parts, 2)
        if self.parts is not None:
            check_int(self.name, "parts", self.parts, 2)
        check_dominance(op)
        model = _cost_model(op)
        world = module_world_size(op)

        def time_of(o: Operation) -> float:
            return float(model.op_time_us(o, world))

        for block in schedulable_blocks(op):
            self._partition_block(block, time_of)
        check_dominance(op)

    def _partition_block(self, block, time_of: OpCost) -> None:
        graph = DataflowGraph.from_block(block)
        pairs = all_to_all_pairs(graph)
        if not pairs:
            return
        base = _fixed_order_us(graph, time_of)
        saved = _copy_ops(block) if self.parts is None else None
        # later pairs first: earlier node indices stay valid while the block changes
        for entry, exit_ in reversed(pairs):
            choice = self._choose(graph, entry, exit_, time_of)
            if choice.parts is None or choice.solution is None:
                continue
            region = build_region(graph, choice.solution, choice.parts)
            cost = simulate_range(graph, choice.range_nodes, time_of, region)
            apply_region(graph, choice.range_nodes, region, cost.order)
        if saved is None:
            return
        after = DataflowGraph.from_block(block)
        if _fixed_order_us(after, time_of) < base:
            _erase_all(saved)
            return
        _restore(block, saved)  # never worse: keep the input

    def _choose(self, graph: DataflowGraph, entry: int, exit_: int, time_of: OpCost) -> Choice:
        nodes = _layer_range(graph, entry, exit_)
        base = simulate_range(graph, nodes, time_of).makespan_us
        weights = {i: max(time_of(graph.ops[i]), 1e-3) for i in nodes}
        min_block = self.parts if self.parts is not None else 2
        solution = solve_axes(graph, nodes, [entry, exit_], weights, min_block=min_block)
        if solution is None:
            return Choice(nodes, None, None, base, base)
        if self.parts is not None:
            reason = indivisible(graph, solution, self.parts)
            if reason is not None:
                raise PassFailedException(f"{self.name}: {reason}")
            return Choice(nodes, solution, self.parts, base, base)
        best = Choice(nodes, solution, None, base, base)
        for n in part_counts(graph, solution, self.max_parts):
            region = build_region(graph, solution, n)
            cost = simulate_range(graph, nodes, time_of, region).makespan_us
            region.discard()
            if cost >= best.cost_us:
                break  # Lancet stops at the first count that does not improve
            best = Choice(nodes, solution, n, base, cost)
        return best


def _layer_range(graph: DataflowGraph, entry: int, exit_: int) -> list[int]:
    """The MoE layer's own ops in program order: from the entry all-to-all's nearest compute
    producer (the dispatch) to the exit's nearest compute consumer (the combine); a backward
    pass's later readers of the forward values are not part of the layer."""
    lo = max([p for p in graph.preds[entry] if not graph.is_comm[p]], default=entry)
    hi = min([s for s in graph.succs[exit_] if not graph.is_comm[s]], default=exit_)
    return list(range(lo, hi + 1))


def _fixed_order_us(graph: DataflowGraph, time_of: OpCost) -> float:
    return evaluate_fixed_order(graph, [time_of(o) for o in graph.ops]).makespan_us


def _copy_ops(block) -> list[Operation]:
    """Detached copies of the block's ops that refer to each other's results."""
    mapper: dict = {}
    return [o.clone(value_mapper=mapper) for o in block.ops]


def _erase_all(ops: list[Operation]) -> None:
    # detach first: drop_all_references clears the parent without unlinking the op
    for o in ops:
        if o.parent_block() is not None:
            o.detach()
    for o in ops:
        o.drop_all_references()
    for o in reversed(ops):
        o.erase(safe_erase=False)


def _restore(block, saved: list[Operation]) -> None:
    """Put the saved copies of the block's ops back in place of its current ops."""
    _erase_all(list(block.ops))
    block.add_ops(saved)
