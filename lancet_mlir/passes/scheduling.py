"""Glue shared by the optimizing schedulers (dw-schedule, fuse-noncritical-comm,
lancet-schedule): the plain-data problem of a block, the never-worse rule. Costing comes from
the `CostOptions` mixin (`passes/costing.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import StringAttr

from lancet_mlir import attrs
from lancet_mlir.graph.dataflow import DataflowGraph, collective_kind
from lancet_mlir.optimize.problem import Problem
from lancet_mlir.sim import evaluate_fixed_order
from lancet_mlir.sim.options import SimOptions

ROLE_ATTR = attrs.ROLE


def block_problem(graph: DataflowGraph, durations: Sequence[float]) -> Problem:
    """The scheduling problem of one block: edges, kinds, durations, `lancet.role`s."""
    roles: list[str | None] = []
    for op in graph.ops:
        role = op.attributes.get(ROLE_ATTR)
        roles.append(role.data if isinstance(role, StringAttr) else None)
    kinds = [collective_kind(op) for op in graph.ops]
    return Problem(graph.preds, graph.succs, kinds, [float(d) for d in durations], roles)


def simulated_makespan(problem: Problem, order: Sequence[int], options: SimOptions) -> float:
    """Fixed-order makespan of `order` under the pass's simulator options."""
    return evaluate_fixed_order(
        problem,
        problem.durations,
        order=order,
        num_comm_streams=options.num_comm_streams,
        overlap_slowdown=options.overlap_slowdown,
    ).makespan_us


def never_worse(
    problem: Problem, candidate: Sequence[int], options: SimOptions
) -> list[int]:
    """`candidate` if it simulates strictly faster than the input (node) order, else the
    input order."""
    identity = list(range(len(problem)))
    if list(candidate) == identity:
        return identity
    if simulated_makespan(problem, candidate, options) < simulated_makespan(problem, identity, options):
        return list(candidate)
    return identity
