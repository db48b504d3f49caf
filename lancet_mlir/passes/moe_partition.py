"""moe-partition: split MoE layers (forward and backward) into pipelined parts (Lancet §8)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir.cost.cost_model import CostKeys
from lancet_mlir.dialects.comm import module_world_size
from lancet_mlir.graph.core import node_flags
from lancet_mlir.graph.dataflow import DataflowGraph, op_display_name
from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.partition.base import PartitionError
from lancet_mlir.partition.capacity_plan import (
    CapacitySearch,
    ForcedPartsError,
    plan_capacity_block,
)
from lancet_mlir.partition.expert_span import all_to_all_pairs
from lancet_mlir.partition.layout import apply_layout
from lancet_mlir.partition.region import OpCost, erase_unused
from lancet_mlir.partition.token import token_gates
from lancet_mlir.partition.token_block import (
    EXTENDS,
    TokenSearch,
    discard_plans,
    plan_token_block,
    planned_graph,
)
from lancet_mlir.partition.token_plan import apply_plans
from lancet_mlir.passes.costing import CostOptions
from lancet_mlir.passes.options import CheckedOptions, check_int
from lancet_mlir.sim import evaluate_fixed_order
from lancet_mlir.sim.options import SimOptions
from lancet_mlir.sim.regions import CALL_OPS
from lancet_mlir.support.errors import pass_failure

ALGOS = ("dp", "range")
AXES = ("capacity", "token")


MAX_PARTS = 8
"""The default `max-parts`: the largest part count tried when none is forced."""


@dataclass(frozen=True)
class MoePartitionPass(CostOptions, CheckedOptions, ModulePass):
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
      algo=range|dp  range: partition the MoE layer's own ops (the pair, the ops that feed
                     the first and read the second all-to-all, and what lies between);
                     dp: Lancet's DP over ranges (§8.3) within the layer: its ops are cut
                     into groups (the pair's span is one) and the cheapest segmentation
                     by phased simulation decides which range around the pair is
                     partitioned (e.g. the expert span alone when splitting the dispatch
                     costs more than it hides)
      max-parts=N    largest part count tried (default 8); every count 2..N that fits is
                     costed: each split block needs at least n rows, and n need not divide
                     it (uneven parts: the first B mod n parts of a block of B rows get one
                     row more; a plain all-to-all per part, its types static); only an op
                     whose split dimensions differ in size (a reshape merging rows) needs n
                     to divide them
      parts=N        force N parts on every pair (N >= 2, uneven parts too; the pass fails
                     naming the op and dimension when a part would get no row); skips the
                     never-worse checks, so the simulator options (comm-streams,
                     overlap-slowdown, launch-overhead-us) do not change its output; with
                     max-parts other than 8 it is refused (max-parts would be ignored)
      axis=capacity|token
                     capacity (default): the regions above, split along the capacity slots;
                     token: each whole MoE layer (gate, dispatch, expert FFN, combine and
                     their backward) split into n parts of its tokens, exactly: the gate's
                     slot counter is threaded from part to part (`moe_gate_window`), each
                     part moves only its rows with `comm.all_to_allv` and its ops carry
                     `lancet.fill` (their share of the rows) for costing
                     (`lancet_mlir.partition.token`); switch gate only. With `parts`, a
                     layer that cannot be split so fails the pass with the reason; else
                     such a layer is left as it is and the part count 2..max-parts that
                     the phased simulation rates best (if better than none) is kept
      extend=none|forward|all
                     with axis=token, the regions around each layer that are split along
                     the tokens too (any op whose registry rule allows it: attention,
                     layer norms, the dense FFN, ...): none = the MoE layer's own ops;
                     forward (default) = also before its gate (from the middle of the way
                     from the previous MoE layer) and after its combine (to the middle of
                     the way to the next one), so part k's all-to-alls overlap part k±1's
                     attention and FFN and consecutive layers hand parts on; all = also
                     the backward around the layer's gradients, reading the forward's
                     parts (weight gradients stay whole: as n partial sums they cost
                     more); on the headline models the splits and concatenations at those
                     borders cost more than they hide
    and the cost options of every costing pass (device, cluster, profile, comm-table,
    gpus-per-node, network-gbps, comm-streams, overlap-slowdown; see `CostOptions`), over
    the module's `lancet.*` attributes. The phased simulation uses one communication
    stream, as Lancet's; the never-worse check uses the simulator options.
    """

    name = "moe-partition"

    algo: str | None = None
    """`dp` (the DP chooses the range within each layer) or `range` (the layer's whole range);
    None: dp (an explicit algo with axis=token is refused: it would be ignored)."""
    max_parts: int = MAX_PARTS
    """Largest part count tried (>= 2); every count from 2 that fits is costed."""
    parts: int | None = None
    """Force this many parts (>= 2) on every pair, uneven ones too; None: choose."""
    axis: str = "capacity"
    """`capacity` (expert capacity slots) or `token` (whole MoE layers in token parts)."""
    extend: str = "forward"
    """With `axis=token`: the regions around each layer split too (`none`, `forward`, `all`;
    another value than the default with `axis=capacity` is refused: it would be ignored)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.algo is not None and self.axis == "token":
            raise PassFailedException(
                f"{self.name}: option algo={self.algo} applies to axis=capacity only "
                "(axis=token plans each MoE layer's token parts); drop it"
            )
        if (self.algo or "dp") not in ALGOS:
            raise PassFailedException(
                f"{self.name}: option algo must be one of {', '.join(ALGOS)}, got {self.algo}"
            )
        if self.extend not in EXTENDS:
            raise PassFailedException(
                f"{self.name}: option extend must be one of {', '.join(EXTENDS)}, got {self.extend}"
            )
        if self.axis not in AXES:
            raise PassFailedException(
                f"{self.name}: option axis must be one of {', '.join(AXES)}, got {self.axis}"
            )
        if self.axis != "token" and self.extend != "forward":
            raise PassFailedException(
                f"{self.name}: option extend={self.extend} applies to axis=token only "
                f"(axis={self.axis} splits the expert range of each all-to-all pair); drop it"
            )
        check_int(self.name, "max-parts", self.max_parts, 2)
        if self.parts is not None:
            check_int(self.name, "parts", self.parts, 2)
            if self.max_parts != MAX_PARTS:
                raise PassFailedException(
                    f"{self.name}: option max-parts={self.max_parts} applies without parts "
                    f"(parts={self.parts} forces the count); drop one"
                )
        check_dominance(op)
        model = self.cost_model(op)
        sim = self.sim_options(op)
        world = module_world_size(op)
        bodies = self.module_simulation(op)

        times: dict[tuple, float] = {}
        keys = CostKeys()  # cost_signature as small integers

        def time_of(o: Operation) -> float:
            # an op with regions (or a call) costs its bodies' simulated makespan, as the
            # scheduling passes cost it (its bodies were partitioned first)
            if o.regions or op_display_name(o) in CALL_OPS:
                nested = bodies.op_duration(o)
                if nested is not None:
                    return nested
            # per-part copies share shapes: cost each signature once
            key = keys.key(o)
            if key not in times:
                times[key] = float(model.op_time_us(o, world))
            return times[key]

        for item in bodies.innermost_first():
            self._partition_block(item.block, time_of, sim)
            bodies.invalidate(item.block)
        check_dominance(op)

    def _partition_block(self, block: Block, time_of: OpCost, sim: SimOptions) -> None:
        """Capacity parts for every all-to-all pair of the block, planned on the input graph
        (`partition/capacity_plan.py`); the planned block is simulated before the IR
        changes, and the plan is applied only when it is faster (never worse) or the part
        count is forced, else discarded."""
        if self.axis == "token":
            self._token_block(block, time_of, sim)
            return
        graph = DataflowGraph.from_block(block)
        if not all_to_all_pairs(graph):
            return
        base = _fixed_order_us(graph, time_of, sim)
        search = CapacitySearch(self.algo or "dp", self.parts, self.max_parts)
        try:
            plan = plan_capacity_block(graph, time_of, search)
        except ForcedPartsError as exc:
            raise pass_failure(self.name, exc) from None
        if not plan.regions:
            return
        if self.parts is None:
            if not _fixed_order_us(plan.planned_graph(), time_of, sim) < base:
                plan.discard()  # never worse: keep the input
                return
        apply_layout(graph, plan.layout())
        erase_unused(plan.epilogues())

    def _token_block(self, block: Block, time_of: OpCost, sim: SimOptions) -> None:
        """Token parts for every MoE layer of the block (option axis=token), planned on the
        input graph (`partition/token_block.py`); the planned block is simulated before the
        IR changes, and the plans are applied only when it is faster (never worse) or the
        part count is forced, else discarded."""
        graph = DataflowGraph.from_block(block)
        if not token_gates(graph):
            return
        # costed first, also when the count is forced: the cost model's notes keep the
        # order in which it first costs each kind (the block's program order)
        base = _fixed_order_us(graph, time_of, sim)
        search = TokenSearch(self.parts, self.max_parts, self.extend)
        try:
            chosen = plan_token_block(graph, time_of, search)
        except PartitionError as exc:
            raise pass_failure(self.name, exc) from None
        if not chosen:
            return
        if self.parts is None:
            if not _fixed_order_us(planned_graph(graph, chosen), time_of, sim) < base:
                discard_plans(chosen)  # never worse: keep the input
                return
        apply_plans(graph, chosen)
        erase_unused([op for plan, _ in chosen for op in plan.epilogues()])


def _fixed_order_us(graph: DataflowGraph, time_of: OpCost, sim: SimOptions) -> float:
    durations = [time_of(o) for o in graph.ops]
    return evaluate_fixed_order(
        graph,
        durations,
        num_comm_streams=sim.num_comm_streams,
        overlap_slowdown=sim.overlap_slowdown,
        launch_overhead_us=sim.launch_overhead_us,
        **node_flags(graph, sim.copy_stream),
    ).makespan_us
