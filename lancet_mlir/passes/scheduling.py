"""Glue shared by the optimizing schedulers (dw-schedule, fuse-noncritical-comm,
lancet-schedule): the plain-data problem of a block, the never-worse rule, fusion pricing
and applying a (fused, reordered) result to the IR. Costing comes from the `CostOptions`
mixin (`passes/costing.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from xdsl.dialects.builtin import StringAttr

from lancet_mlir import attrs
from lancet_mlir.cost.cost_model import CostModel
from lancet_mlir.dialects.comm import module_world_size
from lancet_mlir.graph.buckets import fusion_key
from lancet_mlir.graph.core import Problem, node_flags
from lancet_mlir.graph.dataflow import (
    DataflowGraph,
    block_ops,
    collective_kind,
    first_forward_use,
)
from lancet_mlir.graph.rewrite import (
    ScheduleError,
    fuse_collectives,
    fused_collective,
    member_signature,
    relink,
)
from lancet_mlir.optimize.pipeline import FusionHooks
from lancet_mlir.sim import evaluate_fixed_order
from lancet_mlir.sim.options import SimOptions


def block_problem(
    graph: DataflowGraph, durations: Sequence[float], options: SimOptions | None = None
) -> Problem:
    """The scheduling problem of one block: edges, kinds, durations, `lancet.role`s and the
    graph's node flags (copies, with `options.copy_stream`, the default; host syncs; virtual
    nodes), so the schedulers see what the simulator sees."""
    roles: list[str | None] = []
    for op in graph.ops:
        role = op.attributes.get(attrs.ROLE)
        roles.append(role.data if isinstance(role, StringAttr) else None)
    kinds = [collective_kind(op) for op in graph.ops]
    flags = node_flags(graph, options.copy_stream if options is not None else True)
    return Problem(
        graph.preds,
        graph.succs,
        kinds,
        [float(d) for d in durations],
        roles,
        flags["copies"],
        flags["host_syncs"],
        flags["virtual"],
    )


def simulated_makespan(problem: Problem, order: Sequence[int], options: SimOptions) -> float:
    """Fixed-order makespan of `order` under the pass's simulator options (and the
    problem's node flags)."""
    return evaluate_fixed_order(
        problem,
        problem.durations,
        order=order,
        num_comm_streams=options.num_comm_streams,
        overlap_slowdown=options.overlap_slowdown,
        launch_overhead_us=options.launch_overhead_us,
        **node_flags(problem),
    ).makespan_us


def never_worse(problem: Problem, candidate: Sequence[int], options: SimOptions) -> list[int]:
    """`candidate` if it simulates strictly faster than the input (node) order, else the
    input order."""
    identity = list(range(len(problem)))
    if list(candidate) == identity:
        return identity
    if simulated_makespan(problem, candidate, options) < simulated_makespan(
        problem, identity, options
    ):
        return list(candidate)
    return identity


@dataclass
class FusionPrices:
    """Fused-collective prices that blocks costed alike share (`fusion_hooks`): member
    signatures numbered in first-seen order, and the price of each (cost model, world size,
    member numbers)."""

    numbers: dict[tuple, int] = field(default_factory=dict)
    prices: dict[tuple, float] = field(default_factory=dict)


def fusion_hooks(
    graph: DataflowGraph, cost_model: CostModel, shared: FusionPrices | None = None
) -> FusionHooks:
    """How fusion prices a group (the cost model's time for the fused collective, built
    as a temporary op and erased again) and matches two collectives (`fusion_key`).
    Both are memoised per block: fusion asks again for the groups it priced from another
    start, and a collective's key does not change while the block is planned; a group
    whose members' signatures (`member_signature`) equal, in order, those of a group
    already priced (the same kinds, types and attributes, as the layers of a model give)
    fuses into an equal op and takes that price without building it (a group's key is a
    tuple of small integers, cheap to hash however long the group). `shared` lets blocks
    costed by the same model share those prices (lancet-schedule's candidates: their
    gradient all-reduces are alike)."""
    world = module_world_size(graph.ops[0]) if graph.ops else None
    prices: dict[tuple[int, ...], float] = {}
    shared = FusionPrices() if shared is None else shared
    numbers, by_signature = shared.numbers, shared.prices
    member: dict[int, int] = {}
    keys: dict[int, tuple | None] = {}

    def number(v: int) -> int:
        known = member.get(v)
        if known is None:
            known = member[v] = numbers.setdefault(member_signature(graph.ops[v]), len(numbers))
        return known

    def fused_time(group: list[int]) -> float:
        known = prices.get(tuple(group))
        if known is not None:
            return known
        signature = (id(cost_model), world, *map(number, group))
        price = by_signature.get(signature)
        if price is None:
            temp, _ = fused_collective([graph.ops[m] for m in group])
            try:
                price = by_signature[signature] = float(cost_model.op_time_us(temp, world))
            finally:
                temp.erase()
        prices[tuple(group)] = price
        return price

    def key_of(v: int) -> tuple | None:
        if v not in keys:
            keys[v] = fusion_key(graph.ops[v])
        return keys[v]

    def compatible(a: int, b: int) -> bool:
        key = key_of(a)
        return key is not None and key == key_of(b)

    return FusionHooks(fused_time, compatible)


class BlockSchedule(Protocol):
    """What `apply_result` reads of a schedule (`PipelineResult` has it): the groups of
    collectives to fuse, the original node of each node of the fused problem, and the order
    of those nodes."""

    @property
    def groups(self) -> list[list[int]]: ...

    @property
    def old_index(self) -> list[int]: ...

    @property
    def order(self) -> list[int]: ...


def apply_result(graph: DataflowGraph, result: BlockSchedule) -> None:
    """Fuse the result's groups in the IR and relink the block in the result's order."""
    block = graph.block
    assert block is not None
    fused = {group[-1]: fuse_collectives([graph.ops[m] for m in group]) for group in result.groups}
    ops = [fused.get(old, graph.ops[old]) for old in result.old_index]
    if not result.groups and result.order == list(range(len(ops))):
        return
    relink(block, [ops[i] for i in result.order], graph.terminator)
    if first_forward_use(block_ops(block)[0]) is not None:  # the relinked block's graph
        raise ScheduleError("internal error: schedule is not a topological order")
