"""Simulation of a module's blocks in their current order: which blocks (`simulated_blocks`),
their fixed-order timelines (`simulate_module`, `simulate_graph`) and the `lancet.*` timing
annotations (`annotate_module`). Used by the `simulate` pass, lancet-opt's outputs and bench.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from xdsl.dialects.builtin import Float64Type, FloatAttr, IntegerAttr, ModuleOp, i64
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, Operation

from lancet_mlir import attrs
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import schedulable_blocks
from lancet_mlir.sim.engine import evaluate_fixed_order
from lancet_mlir.sim.metrics import TimelineSummary, summarize
from lancet_mlir.sim.model import Timeline
from lancet_mlir.sim.options import SimOptions

START_ATTR = attrs.START_US
END_ATTR = attrs.END_US
STREAM_ATTR = attrs.STREAM
MAKESPAN_ATTR = attrs.MAKESPAN_US
EXPOSED_ATTR = attrs.EXPOSED_COMM_US

_F64 = Float64Type()


class GraphCostModel(Protocol):
    """The part of the cost model the simulator needs (`CostModel` has it)."""

    def graph_times(self, graph: DataflowGraph, world_size: int | None = None) -> list[float]:
        """One duration (µs) per node of `graph`."""
        ...


@dataclass
class SimBlock:
    """A block to simulate: its label, enclosing function and whether it counts in totals."""

    block: Block
    label: str
    function: str | None
    top_level: bool


@dataclass
class BlockResult:
    """The simulation of one block: its graph, per-node durations, timeline and summary.

    `top_level` is True for a function body (or the module body holding bare ops): those
    blocks add up to the module's totals. Blocks nested in ops are simulated on their own
    (times relative to the block's start) and reported separately.
    """

    label: str
    function: str | None
    top_level: bool
    graph: DataflowGraph
    durations: list[float]
    timeline: Timeline
    summary: TimelineSummary


def _is_container(block: Block) -> bool:
    """A block of symbol-table ops (a module body holding functions): nothing to simulate."""
    return any(isinstance(op, FuncOp | ModuleOp) for op in block.ops)


def _enclosing_function(op: Operation | None) -> FuncOp | None:
    while op is not None and not isinstance(op, FuncOp):
        op = op.parent_op()
    return op


def simulated_blocks(module: ModuleOp) -> list[SimBlock]:
    """Every block `simulate` and `lancet-schedule` work on, outermost first.

    Function bodies, the module body when it holds bare ops, and blocks nested in ops; module
    bodies that hold functions are skipped. Labels: `@f` for the body of func `@f`,
    `@f/<op>#k` for the k-th nested block below `@f`, `<module>` for bare top-level ops.
    """
    out: list[SimBlock] = []
    nested_count: dict[str, int] = {}
    for block in schedulable_blocks(module):
        if _is_container(block):
            continue
        parent = block.parent_op()
        func = _enclosing_function(parent)
        fname = func.sym_name.data if func is not None else None
        if isinstance(parent, FuncOp):
            out.append(SimBlock(block, f"@{fname}", fname, True))
            continue
        if isinstance(parent, ModuleOp):
            out.append(SimBlock(block, "<module>", None, True))
            continue
        base = f"@{fname}" if fname is not None else "<module>"
        k = nested_count.get(base, 0)
        nested_count[base] = k + 1
        name = parent.name if parent is not None else "block"
        out.append(SimBlock(block, f"{base}/{name}#{k}", fname, False))
    return out


def simulate_module(
    module: ModuleOp,
    cost_model: GraphCostModel,
    options: SimOptions | None = None,
    *,
    annotate: bool = False,
) -> list[BlockResult]:
    """Fixed-order simulation of every block of `module` (see `simulated_blocks`) with
    `cost_model` and `options` (default: 1 comm stream, no slowdown).

    With `annotate`, writes `lancet.start_us`, `lancet.end_us` (f64) and `lancet.stream`
    (i64) on every op of every simulated block (terminators excluded) and
    `lancet.makespan_us`/`lancet.exposed_comm_us` on every func.func (sums over its body
    blocks).
    """
    options = options or SimOptions()
    results: list[BlockResult] = []
    for item in simulated_blocks(module):
        graph = DataflowGraph.from_block(item.block)
        result = simulate_graph(graph, cost_model.graph_times(graph), options)
        results.append(BlockResult(item.label, item.function, item.top_level, graph,
                                   result[0], result[1], result[2]))
    if annotate:
        annotate_module(module, results)
    return results


def simulate_graph(
    graph: DataflowGraph, durations: Sequence[float], options: SimOptions
) -> tuple[list[float], Timeline, TimelineSummary]:
    """Fixed-order evaluation of one graph: (durations, timeline, summary)."""
    durations = [float(d) for d in durations]
    timeline = evaluate_fixed_order(
        graph,
        durations,
        num_comm_streams=options.num_comm_streams,
        overlap_slowdown=options.overlap_slowdown,
    )
    return durations, timeline, summarize(graph, durations, timeline)


def annotate_module(module: ModuleOp, results: Sequence[BlockResult]) -> None:
    """Write the per-op and per-function attributes of `simulate` (see `simulate_module`).

    Totals are kept per function op, not per name: nested modules may each hold an `@f`.
    """
    per_function: dict[FuncOp, list[float]] = {}
    for r in results:
        tl = r.timeline
        for i, op in enumerate(r.graph.ops):
            op.attributes[START_ATTR] = FloatAttr(tl.start[i], _F64)
            op.attributes[END_ATTR] = FloatAttr(tl.end[i], _F64)
            op.attributes[STREAM_ATTR] = IntegerAttr(tl.stream[i], i64)
        block = r.graph.block
        func = _enclosing_function(block.parent_op()) if block is not None else None
        if r.top_level and func is not None:
            acc = per_function.setdefault(func, [0.0, 0.0])
            acc[0] += r.summary.makespan_us
            acc[1] += r.summary.exposed_comm_us
    for func, (makespan, exposed) in per_function.items():
        func.attributes[MAKESPAN_ATTR] = FloatAttr(makespan, _F64)
        func.attributes[EXPOSED_ATTR] = FloatAttr(exposed, _F64)
