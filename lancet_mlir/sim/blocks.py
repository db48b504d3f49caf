"""Simulation of a module's blocks in their current order: which blocks (`simulated_blocks`),
their fixed-order timelines (`simulate_module`, `simulate_graph`; ops with regions and calls
costed by their bodies, `sim/regions.py`) and the `lancet.*` timing annotations
(`annotate_module`). Used by the `simulate` pass, lancet-opt's outputs and bench.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from xdsl.dialects.builtin import Float64Type, FloatAttr, IntegerAttr, ModuleOp, i64
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, Operation

from lancet_mlir import attrs
from lancet_mlir.dialects.vocab import CollectiveKind
from lancet_mlir.graph.core import node_flags
from lancet_mlir.graph.dataflow import DataflowGraph, op_display_name
from lancet_mlir.graph.rewrite import schedulable_blocks
from lancet_mlir.sim.engine import evaluate_fixed_order
from lancet_mlir.sim.makespan_floor import comm_window_floor_us, release_floor_us
from lancet_mlir.sim.metrics import NestedWork, TimelineSummary, summarize, with_nested_work
from lancet_mlir.sim.model import Timeline
from lancet_mlir.sim.options import SimOptions
from lancet_mlir.sim.regions import CALL_OPS, BodyPlan, body_plan, callee_name

_F64 = Float64Type()
_COMPUTE, _OTHER = 0, -1
"""Stream classes of `ModuleSimulation._least_durations` (a copy queue is > 0)."""


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

    `top_level` is True for the body of a function nothing calls (or the module body
    holding bare ops): those blocks add up to the module's totals. Blocks nested in ops,
    and the bodies of called functions, are simulated on their own (times relative to the
    block's start) and reported separately; an op whose bodies cost it (`sim/regions.py`)
    takes their makespans as its duration, and its block's `summary` includes their work
    (`with_nested_work`). `runs`: how many times the block runs per execution of the op
    holding it (a loop's trip count; 1 otherwise); `in_parent`: its makespan is part of
    the time of the op holding it (or calling it). `notes`: what the costing of the block's
    region ops could not know (a loop costed once).
    """

    label: str
    function: str | None
    top_level: bool
    graph: DataflowGraph
    durations: list[float]
    timeline: Timeline
    summary: TimelineSummary
    runs: int = 1
    in_parent: bool = False
    notes: list[str] = field(default_factory=list)


def _is_container(block: Block) -> bool:
    """A block of symbol-table ops (a module body holding functions): nothing to simulate."""
    return any(isinstance(op, FuncOp | ModuleOp) for op in block.ops)


def _enclosing_function(op: Operation | None) -> FuncOp | None:
    while op is not None and not isinstance(op, FuncOp):
        op = op.parent_op()
    return op


def _called_functions(module: ModuleOp) -> set[str]:
    """Names of the functions some call op of `module` calls."""
    found: set[str] = set()
    for op in module.walk():
        if op_display_name(op) in CALL_OPS:
            name = callee_name(op)
            if name is not None:
                found.add(name)
    return found


def simulated_blocks(module: ModuleOp) -> list[SimBlock]:
    """Every block `simulate` and `lancet-schedule` work on, outermost first.

    Function bodies, the module body when it holds bare ops, and blocks nested in ops; module
    bodies that hold functions are skipped. Labels carry the block's path: `@f` for the body
    of func `@f`, `<module>` for bare top-level ops, and `PARENT/<op>#k` for the blocks of
    the k-th op with regions of block PARENT (`PARENT/<op>#k:j` for its j-th block when it
    has several, e.g. a while's condition `:0` and body `:1`). The bodies of functions that
    some op calls are not top level (their work is costed where they are called).
    """
    out: list[SimBlock] = []
    labels: dict[Block, str] = {}
    op_count: dict[Block, int] = {}
    op_label: dict[Operation, str] = {}
    called = _called_functions(module)
    for block in schedulable_blocks(module):
        parent = block.parent_op()
        if isinstance(parent, FuncOp):
            fname = parent.sym_name.data
            labels[block] = f"@{fname}"
            if not _is_container(block):
                out.append(SimBlock(block, f"@{fname}", fname, fname not in called))
            continue
        if isinstance(parent, ModuleOp) or parent is None:
            labels[block] = "<module>"
            if not _is_container(block):
                out.append(SimBlock(block, "<module>", None, True))
            continue
        if _is_container(block):
            continue
        func = _enclosing_function(parent)
        fname = func.sym_name.data if func is not None else None
        if parent not in op_label:
            outer = parent.parent_block()
            base = (
                labels.get(outer, f"@{fname}" if fname is not None else "<module>")
                if outer is not None
                else "<module>"
            )
            k = op_count.get(outer, 0) if outer is not None else 0
            if outer is not None:
                op_count[outer] = k + 1
            op_label[parent] = f"{base}/{op_display_name(parent)}#{k}"
        blocks = [b for r in parent.regions for b in r.blocks]
        label = (
            op_label[parent] if len(blocks) == 1 else f"{op_label[parent]}:{blocks.index(block)}"
        )
        labels[block] = label
        out.append(SimBlock(block, label, fname, False))
    return out


def simulate_module(
    module: ModuleOp,
    cost_model: GraphCostModel,
    options: SimOptions | None = None,
    *,
    annotate: bool = False,
) -> list[BlockResult]:
    """Fixed-order simulation of every block of `module` (see `simulated_blocks`) with
    `cost_model` and `options` (default: 1 comm stream, no slowdown), in module order.

    An op whose bodies cost it (`sim/regions.py`: regions run once, the costliest branch, a
    static loop's trips, a call's callee) takes the simulated makespan of its bodies as its
    duration; its bodies are simulated first (`ModuleSimulation`).

    With `annotate`, writes `lancet.start_us`, `lancet.end_us` (f64) and `lancet.stream`
    (i64) on every op of every simulated block (terminators excluded) and
    `lancet.makespan_us`/`lancet.exposed_comm_us` on every func.func (sums over its body
    blocks).
    """
    results = ModuleSimulation(module, cost_model, options).results()
    if annotate:
        annotate_module(module, results)
    return results


@dataclass
class CostedBlock:
    """A block's graph and the duration of each of its nodes (µs), region ops and calls
    costed by their bodies' simulated makespans; `nested`: the work of those bodies,
    `notes`: what the costing could not know (a loop costed once)."""

    graph: DataflowGraph
    durations: list[float]
    nested: list[NestedWork] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class ModuleSimulation:
    """The blocks of a module costed and simulated on demand, each once, cached per block.

    The one way both the simulator (`simulate_module`) and the scheduling passes get a
    block's per-op durations: `costed(block)` gives every op the cost model's time, except
    an op whose bodies cost it (`sim/regions.py`), which takes its bodies' simulated
    makespans in their current order (times a static trip count; the costliest branch of a
    `case`/`if`). A pass that reorders blocks visits them `innermost_first()` and calls
    `invalidate(block)` after it changed a block, so each body is simulated after it was
    scheduled, and once; the blocks that used its makespan are costed again when asked.
    """

    def __init__(
        self, module: ModuleOp, cost_model: GraphCostModel, options: SimOptions | None = None
    ) -> None:
        self.cost_model = cost_model
        self.options = options or SimOptions()
        self.items = simulated_blocks(module)
        self._by_block = {item.block: item for item in self.items}
        self.functions = {
            op.sym_name.data: op.body.blocks.first
            for op in module.walk()
            if isinstance(op, FuncOp) and op.body.blocks.first is not None
        }
        self._model: dict[Block, tuple[DataflowGraph, dict[int, BodyPlan], list[float]]] = {}
        self._costed: dict[Block, CostedBlock] = {}
        self._results: dict[Block, BlockResult] = {}
        self._users: dict[Block, set[Block]] = {}
        self._running: set[Block] = set()
        self._floors: dict[Block, float] = {}

    def item(self, block: Block) -> SimBlock | None:
        """The simulated block `block` is, or None (a container, or not of the module)."""
        return self._by_block.get(block)

    def results(self) -> list[BlockResult]:
        """The simulation of every block, in module order (`simulated_blocks`)."""
        return [r for item in self.items if (r := self.result(item.block)) is not None]

    def result(self, block: Block) -> BlockResult | None:
        """The fixed-order simulation of `block` in its current order, or None when it is
        not simulated or is being costed (a recursive call)."""
        if block in self._results:
            return self._results[block]
        item = self._by_block.get(block) or self._adopt(block)
        if item is None or block in self._running:
            return None
        costed = self.costed(block)
        durations, timeline, summary = simulate_graph(costed.graph, costed.durations, self.options)
        if costed.nested:
            summary = with_nested_work(summary, timeline, costed.nested)
        result = BlockResult(item.label, item.function, item.top_level, costed.graph, durations,
                             timeline, summary, notes=list(costed.notes))  # fmt: skip
        self._results[block] = result
        return result

    def costed(self, block: Block) -> CostedBlock:
        """`block`'s graph and per-node durations (class doc); its bodies are simulated
        first, each once."""
        known = self._costed.get(block)
        if known is not None:
            return known
        item = self._by_block.get(block)
        label = item.label if item is not None else "<block>"
        graph, plans, model = self._modelled(block)
        self._running.add(block)
        try:
            costed = _cost_block(graph, plans, list(model), label, self.cost_model,
                                 lambda b: self._body_result(b, block))  # fmt: skip
        finally:
            self._running.discard(block)
        self._costed[block] = costed
        return costed

    def _modelled(self, block: Block) -> tuple[DataflowGraph, dict[int, BodyPlan], list[float]]:
        """`block`'s graph, the plans of its ops costed by their bodies and the cost model's
        time of every other op (0 for those), cached until `invalidate`."""
        known = self._model.get(block)
        if known is None:
            graph = DataflowGraph.from_block(block)
            plans = {i: p for i, op in enumerate(graph.ops)
                     if (p := body_plan(op, self.functions)) is not None}  # fmt: skip
            known = self._model[block] = (graph, plans, _model_times(graph, self.cost_model, plans))
        return known

    def _adopt(self, block: Block) -> SimBlock | None:
        """A block a pass made after this simulation was (the body of a copied op with
        regions), simulated as a nested block; None for function bodies and containers."""
        parent = block.parent_op()
        if parent is None or isinstance(parent, FuncOp | ModuleOp) or _is_container(block):
            return None
        func = _enclosing_function(parent)
        item = SimBlock(block, f"<new {op_display_name(parent)}>",
                        func.sym_name.data if func is not None else None, False)  # fmt: skip
        self._by_block[block] = item
        return item

    def op_duration(self, op: Operation) -> float | None:
        """The duration of `op` costed by its bodies (their simulated makespans in their
        current order, times their runs; the costliest branch), or None when the cost model
        costs it (no bodies to cost it by, or a body being costed: a recursive call)."""
        plan = body_plan(op, self.functions)
        if plan is None:
            return None
        parts = [(r, runs) for b, runs in plan.parts if (r := self.result(b)) is not None]
        if len(parts) != len(plan.parts):
            return None
        spans = [r.summary.makespan_us * runs for r, runs in parts]
        if plan.alternatives:
            return max(spans, default=0.0)
        return float(sum(spans))

    def durations(self, block: Block) -> list[float]:
        """The duration (µs) of each node of `DataflowGraph.from_block(block)` (class doc)."""
        return list(self.costed(block).durations)

    def _body_result(self, body: Block, user: Block) -> BlockResult | None:
        self._users.setdefault(body, set()).add(user)
        return self.result(body)

    def invalidate(self, block: Block) -> None:
        """Forget what is known of `block` (a pass changed it) and of every block whose
        durations used its makespan, transitively; compute floors are all forgotten (they are
        cheap to recompute and a floor depends on every block below it)."""
        self._floors.clear()
        stack = [block]
        while stack:
            b = stack.pop()
            self._model.pop(b, None)
            self._costed.pop(b, None)
            self._results.pop(b, None)
            stack.extend(self._users.pop(b, ()))

    def innermost_first(self) -> list[SimBlock]:
        """The simulated blocks, each after the blocks nested in its ops and the bodies of
        the functions it calls (recursion cut where it closes): the order in which a pass
        schedules them so a body is scheduled before the op holding it is costed."""
        seen: set[Block] = set()
        out: list[SimBlock] = []

        def visit(block: Block) -> None:
            if block in seen:
                return
            seen.add(block)
            for op in block.ops:
                for region in op.regions:
                    for inner in region.blocks:
                        visit(inner)
                plan = body_plan(op, self.functions) if not op.regions else None
                for callee, _ in plan.parts if plan is not None else ():
                    visit(callee)
            item = self._by_block.get(block)
            if item is not None:
                out.append(item)

        for item in self.items:
            visit(item.block)
        return out

    def compute_floor_us(self, block: Block) -> float:
        """A lower bound of `block`'s makespan under any order of it and of its bodies: the
        compute stream runs one op at a time, and an op costed by its bodies takes at least
        their compute floors (times their runs; the largest branch of alternatives); with the
        copy engines on, each copy queue counts on its own stream (the largest of the sums). Costs
        the ops but simulates nothing."""
        return self._floor(block, set())

    def order_floor_us(self, block: Block) -> float:
        """A lower bound of `block`'s makespan under any order of it and of its bodies, at
        least `compute_floor_us`: also the critical path and the head and tail bounds of its
        compute stream (`sim.makespan_floor`), with each op at its least duration (an op
        costed by its bodies: their compute floors; an all-reduce 0, since fusing it with
        another may shorten it); with one communication stream, also the idle its collectives
        force on the compute stream (`comm_window_floor_us`). Costs the ops but simulates
        nothing."""
        graph, durations, streams = self._least_durations(block, set())
        kinds = graph.comm_kind
        durations = [
            0.0 if k == CollectiveKind.ALLREDUCE else d
            for d, k in zip(durations, kinds, strict=True)
        ]
        on_compute = [s == _COMPUTE for s in streams]
        floor = release_floor_us(graph.preds, graph.succs, durations, on_compute)
        if self.options.num_comm_streams == 1:
            windows = comm_window_floor_us(
                graph.preds, graph.succs, durations, on_compute, graph.is_comm
            )
            floor = max(floor, windows)
        return max(floor, self.compute_floor_us(block))

    def _floor(self, block: Block, running: set[Block]) -> float:
        # memoised per block: without it a function reached along many call paths (a chain
        # of functions each calling the next twice) was walked once per path, 2^depth times.
        # A value cut at a recursion is lower than the uncut one, so it is still a bound.
        known = self._floors.get(block)
        if known is not None:
            return known
        _, durations, streams = self._least_durations(block, running)
        total = 0.0
        copied: dict[int, float] = {}  # per copy queue
        for d, s in zip(durations, streams, strict=True):
            if s == _COMPUTE:
                total += d
            elif s > 0:
                copied[s] = copied.get(s, 0.0) + d
        total = max(total, max(copied.values(), default=0.0))
        self._floors[block] = total
        return total

    def _least_durations(
        self, block: Block, running: set[Block]
    ) -> tuple[DataflowGraph, list[float], list[int]]:
        """`block`'s graph, each node's least duration under any order of its bodies (an op
        costed by them: their compute floors times their runs, the largest branch of
        alternatives; 0 for a recursive call, a host sync and a virtual node; else the cost
        model's time) and its stream: `_COMPUTE`, a copy queue (> 0) when copies have their
        own engines, or `_OTHER` (communication, or no stream)."""
        graph, plans, model = self._modelled(block)
        running.add(block)
        durations = [0.0] * len(graph.ops)
        streams = [_OTHER] * len(graph.ops)
        own_copy_stream = self.options.copy_stream
        for i, is_comm in enumerate(graph.is_comm):
            plan = plans.get(i)
            if plan is None:
                queue = graph.copy_queue[i]
                if graph.is_host_sync[i] or graph.is_virtual[i]:
                    continue  # no stream, no cost
                durations[i] = model[i]
                if not is_comm:
                    streams[i] = queue if own_copy_stream and queue else _COMPUTE
                continue
            streams[i] = _COMPUTE
            if any(b in running or b not in self._by_block for b, _ in plan.parts):
                continue  # a recursive call: no bound from it (0 is a bound)
            parts = [self._floor(b, running) * runs for b, runs in plan.parts]
            durations[i] = (max(parts) if parts else 0.0) if plan.alternatives else sum(parts)
        running.discard(block)
        return graph, durations, streams


def _cost_block(
    graph: DataflowGraph,
    plans: Mapping[int, BodyPlan],
    durations: list[float],
    label: str,
    cost_model: GraphCostModel,
    result_of: Callable[[Block], BlockResult | None],
) -> CostedBlock:
    """One block's durations: `durations` (the cost model's, 0 for the ops of `plans`) with
    each op of `plans` costed by its (simulated) bodies."""
    nested: list[NestedWork] = []
    notes: list[str] = []
    for i, plan in plans.items():
        op = graph.ops[i]
        parts = [(r, runs) for b, runs in plan.parts if (r := result_of(b)) is not None]
        if len(parts) != len(plan.parts):
            notes.append(f"{label}: {op_display_name(op)} (op {i}): a body is not "
                         "simulated (a recursive call); kept the cost model's time")  # fmt: skip
            durations[i] = float(cost_model.graph_times(DataflowGraph.from_ops([op]))[0])
            continue
        for r, runs in parts:
            r.in_parent = True
            r.runs = runs
        if plan.alternatives and parts:
            parts = [max(parts, key=lambda p: p[0].summary.makespan_us * p[1])]
        durations[i] = float(sum(r.summary.makespan_us * runs for r, runs in parts))
        nested.append(NestedWork(i, [(r.summary, runs) for r, runs in parts]))
        if plan.note is not None:
            notes.append(f"{label}: {op_display_name(op)} (op {i}): {plan.note}; "
                         "its bodies are costed once")  # fmt: skip
    return CostedBlock(graph, durations, nested, notes)


def _model_times(
    graph: DataflowGraph, cost_model: GraphCostModel, plans: Mapping[int, object]
) -> list[float]:
    """The cost model's time of every node not costed by its bodies (those get 0 here): the
    model never sees them, so it does not report them as ops it had no time for."""
    if not plans:
        return [float(d) for d in cost_model.graph_times(graph)]
    others = [i for i in range(len(graph.ops)) if i not in plans]
    times = cost_model.graph_times(DataflowGraph.from_ops([graph.ops[i] for i in others]))
    durations = [0.0] * len(graph.ops)
    for i, t in zip(others, times, strict=True):
        durations[i] = float(t)
    return durations


def simulate_graph(
    graph: DataflowGraph, durations: Sequence[float], options: SimOptions
) -> tuple[list[float], Timeline, TimelineSummary]:
    """Fixed-order evaluation of one graph: (durations, timeline, summary). A host sync or a
    virtual node costs nothing, whatever the cost model said (a `.item()` of an `aten.op` has
    a roofline time)."""
    free = [s or v for s, v in zip(graph.is_host_sync, graph.is_virtual, strict=True)]
    durations = [0.0 if f else float(d) for d, f in zip(durations, free, strict=True)]
    timeline = evaluate_fixed_order(
        graph,
        durations,
        num_comm_streams=options.num_comm_streams,
        overlap_slowdown=options.overlap_slowdown,
        launch_overhead_us=options.launch_overhead_us,
        **node_flags(graph, options.copy_stream),
    )
    return durations, timeline, summarize(graph, durations, timeline)


def annotate_module(module: ModuleOp, results: Sequence[BlockResult]) -> None:
    """Write the per-op and per-function attributes of `simulate` (see `simulate_module`).

    Totals are kept per function op, not per name: nested modules may each hold an `@f`.
    """
    per_function: dict[FuncOp, list[float]] = {}
    for r in results:
        block = r.graph.block
        tl = r.timeline
        for i, op in enumerate(r.graph.ops):
            op.attributes[attrs.START_US] = FloatAttr(tl.start[i], _F64)
            op.attributes[attrs.END_US] = FloatAttr(tl.end[i], _F64)
            op.attributes[attrs.STREAM] = IntegerAttr(tl.stream[i], i64)
        func = block.parent_op() if block is not None else None
        if isinstance(func, FuncOp):  # a function's body (called or not)
            acc = per_function.setdefault(func, [0.0, 0.0])
            acc[0] += r.summary.makespan_us
            acc[1] += r.summary.exposed_comm_us
    for func, (makespan, exposed) in per_function.items():
        func.attributes[attrs.MAKESPAN_US] = FloatAttr(makespan, _F64)
        func.attributes[attrs.EXPOSED_COMM_US] = FloatAttr(exposed, _F64)
