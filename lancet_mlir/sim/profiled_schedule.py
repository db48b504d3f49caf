"""Lancet's profiled FIFO list schedule on plain data (the algorithm of `lancet-schedule`,
used by the pass, the benchmarks and the tools)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lancet_mlir.graph.core import Graph, node_flags
from lancet_mlir.sim.engine import evaluate_fixed_order, list_schedule, weight_update_first
from lancet_mlir.sim.options import SimOptions


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
    graph: Graph, durations: Sequence[float], options: SimOptions | None = None
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
        **node_flags(graph, options.copy_stream),
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
