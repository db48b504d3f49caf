"""The partition library's plan for the MoE layers of an imported PyTorch step.

`plan_moe` runs the library's capacity planner (`partition.capacity_plan`: the MoE region
finder, the axis solver `partition.axes` and Lancet's DP over ranges `partition.dp`, costed
by the phased estimate `partition.estimate`) on the module imported from the FX graph,
exactly as `moe-partition` (algo=dp) plans a block, and returns per all-to-all pair (forward
and backward) whether it is split, along which axis and into how many parts; nothing is
applied to the IR. The FX rewriter (`moe.partition_graph` with the plan's counts and axes)
then realises those pairs as ATen ops, refusing a pair whose axis it finds differently.

The import sees through the span's views (`comp.reshape` / `comp.transpose`, see
`importers.torch.kernels`) and element-wise ATen ops (`partition.rules.ATEN_ELEMENTWISE`);
PyTorch's `all_to_all_single` is an all-to-all whose split and concat axes coincide, whose
row blocks the solver follows through reshapes (`partition.axes`). The axis is the chunking
`(axis, groups)` of the first all-to-all's result: dimension `axis` in `groups` blocks, each
split into the parts (the capacity slots of each expert of each rank's chunk).

What the FX rewrite realises is the span between the two all-to-alls (the pair, the expert
computation, forward and backward alike); where the DP's region also takes ops around the
span (the dispatch's or combine's layout ops), those stay whole in the FX graph, which the
report's `region_ops` / `span_ops` make visible.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Operation

from lancet_mlir import attrs
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.base import shape_of
from lancet_mlir.partition.blocks import Desc
from lancet_mlir.partition.capacity_plan import CapacitySearch, plan_capacity_block

FX_NODE = "lancet.fx_node"


@dataclass(frozen=True)
class PairPlan:
    """The library's decision for one all-to-all pair."""

    first: str
    """FX node of the first all-to-all (the dispatch, or the combine's gradient)."""
    second: str
    """FX node of the second all-to-all."""
    role: str
    """`fwd` or `dx` (the first all-to-all's role)."""
    axis: tuple[int, int]
    """(axis, groups) of the first all-to-all's result."""
    parts: int
    region_ops: int
    """Ops in the library's region."""
    base_us: float
    """Phased-simulation makespan of the range unsplit."""
    cost_us: float
    """The same, split as planned (the DP's estimate)."""

    def desc(self, shape: tuple[int, ...]) -> Desc:
        """The axis as the FX rewriter writes it, for the result shape `shape`."""
        axis, groups = self.axis
        return Desc(axis, shape[axis] // groups, 1)

    def as_dict(self) -> dict[str, object]:
        """The report's entry."""
        return {
            "pair": [self.first, self.second],
            "role": self.role,
            "axis": list(self.axis),
            "parts": self.parts,
            "region_ops": self.region_ops,
            "base_us": self.base_us,
            "cost_us": self.cost_us,
        }


def _name(op: Operation) -> str:
    attr = op.attributes.get(FX_NODE)
    return attr.data if isinstance(attr, StringAttr) else op.name


def plan_moe(module: ModuleOp, block: Block, max_parts: int = 8) -> list[tuple[PairPlan, Desc]]:
    """The library's plan for every all-to-all pair of `block` (the step's body in
    `module`, whose `lancet.*` attributes cost it), in program order, with each pair's axis
    as an FX `Desc` of the first all-to-all's result; pairs left whole are not listed."""
    from lancet_mlir.cost.cost_model import CostModel
    from lancet_mlir.cost.settings import module_cost_settings
    from lancet_mlir.dialects.comm import module_world_size

    model = CostModel.from_config(module_cost_settings(module).config())
    world = module_world_size(module)
    times: dict[Operation, float] = {}

    def time_of(op: Operation) -> float:
        if op not in times:
            times[op] = float(model.op_time_us(op, world))
        return times[op]

    graph = DataflowGraph.from_block(block)
    plan = plan_capacity_block(graph, time_of, CapacitySearch("dp", None, max_parts))
    out: list[tuple[PairPlan, Desc]] = []
    try:
        for (entry, exit_), choice in zip(plan.pairs, plan.choices, strict=True):
            assert choice.solution is not None
            assert choice.parts is not None
            slot = choice.solution.options[entry][1][0]
            assert isinstance(slot, tuple)
            op = graph.ops[entry]
            role = op.attributes.get(attrs.ROLE)
            pair = PairPlan(
                _name(op),
                _name(graph.ops[exit_]),
                str(role.data) if isinstance(role, StringAttr) else "",
                slot,
                choice.parts,
                len(choice.solution.nodes),
                choice.base_us,
                choice.cost_us,
            )
            shape = shape_of(op.results[0])
            assert shape is not None
            out.append((pair, pair.desc(tuple(shape))))
    finally:
        plan.discard()  # nothing was inserted: the IR stays the import
    return out


__all__ = ["PairPlan", "plan_moe"]
