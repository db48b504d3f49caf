"""Lancet's optimization pipeline (lancet-algorithms.md §1.4) on plain data.

Stages, each reported with its makespan and exposed communication (measured when read):

1. `list schedule`: Lancet's FIFO list schedule with weight-update ops delayed (§6.1);
2. `dw placement` (heuristic `dw`): dW ops into all-to-all windows, all-reduces into the
   gaps (§6.2-6.3, `optimize.dw`);
3. `local search` (budget > 0): the near-optimal search (`optimize.search`) from the
   pipeline's schedule, the input order, FIFO and the upward-rank list schedule, within the
   evaluation budget;
4. `fusion` (optional): non-critical all-reduce fusion (§7.5, `optimize.fusion`), then a
   short local search on the fused problem (a tenth of the budget). With a search, fusion
   runs on both the searched schedule and the one before the search (the heuristic's), and
   the faster fused schedule goes on: a schedule the search made faster unfused can fuse
   worse (fusion accepts merges along the order it is given), and the search must never
   leave the pipeline slower than no search.

(The partition stage of §1.4 runs on the IR before this pipeline; see
`passes/lancet_schedule.py`.) Stages 3 and 4 run in the internal model: one communication
stream, no overlap slowdown, no launch overhead; copies on their copy-engine queues, host
syncs and virtual nodes on no stream (`optimize.chains`). Every stage is measured by the
simulator with the problem's node flags (`graph.core.node_flags`). The caller applies the
never-worse rule with its own simulator options.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from lancet_mlir.graph.core import Problem, node_flags
from lancet_mlir.optimize.chains import block_order, reachability, split_chains
from lancet_mlir.optimize.contract import contract
from lancet_mlir.optimize.dw import dw_schedule, fifo_list_schedule
from lancet_mlir.optimize.fusion import plan_noncritical_fusion
from lancet_mlir.optimize.ranks import rank_list_schedule
from lancet_mlir.optimize.search import search_schedule
from lancet_mlir.sim import evaluate_fixed_order, exposed_comm_us

HEURISTICS = ("fifo", "dw")


@dataclass(frozen=True)
class FusionHooks:
    """How the fusion stage prices and matches collectives: `fused_time(group)` (µs of one
    collective over the group's operands) and `compatible(a, b)`."""

    fused_time: Callable[[list[int]], float]
    compatible: Callable[[int, int], bool]


class Stage:
    """One reported stage: its name, makespan and exposed communication (µs). `Stage.of`
    measures when first asked: only `--verbose` and tests read the stages, and measuring
    every stage of every block (the exposed communication above all) was 2 % of a run."""

    __slots__ = ("_figures", "_order", "_problem", "name")

    def __init__(self, name: str, makespan_us: float, exposed_comm_us: float) -> None:
        self.name = name
        self._figures: tuple[float, float] | None = (makespan_us, exposed_comm_us)
        self._problem: Problem | None = None
        self._order: list[int] = []

    @classmethod
    def of(cls, name: str, problem: Problem, order: list[int]) -> Stage:
        """The stage `name` of `order` on `problem`, measured in the internal model when its
        figures are first read (of a copy of `order`; `problem` is not changed after)."""
        stage = cls(name, 0.0, 0.0)
        stage._figures, stage._problem, stage._order = None, problem, list(order)
        return stage

    @property
    def makespan_us(self) -> float:
        """The stage's makespan (µs)."""
        return self._measured()[0]

    @property
    def exposed_comm_us(self) -> float:
        """The stage's exposed communication (µs)."""
        return self._measured()[1]

    def _measured(self) -> tuple[float, float]:
        if self._figures is None:
            assert self._problem is not None
            self._figures = measure(self._problem, self._order)
            self._problem, self._order = None, []
        return self._figures

    def __repr__(self) -> str:
        return f"Stage({self.name!r}, {self.makespan_us!r}, {self.exposed_comm_us!r})"


@dataclass
class PipelineResult:
    """The final problem (fused if fusion merged anything), its order, the fused groups (old
    indices) and, for each final node, its index in the input problem."""

    problem: Problem
    order: list[int]
    groups: list[list[int]]
    old_index: list[int]
    stages: list[Stage] = field(default_factory=list)
    evaluations: int = 0
    fifo: list[int] | None = None
    """FIFO of the input problem (`fifo_list_schedule`), where the pipeline made it."""


def measure(problem: Problem, order: list[int]) -> tuple[float, float]:
    """(makespan, exposed comm) of `order` in the internal model."""
    timeline = evaluate_fixed_order(problem, problem.durations, order=order, **node_flags(problem))
    return timeline.makespan_us, exposed_comm_us(timeline)


def makespan_of(problem: Problem, order: list[int]) -> float:
    """The makespan of `order` in the internal model (`measure`'s first figure)."""
    flags = node_flags(problem)
    return evaluate_fixed_order(problem, problem.durations, order=order, **flags).makespan_us


def run_pipeline(
    problem: Problem,
    heuristic: str,
    budget: int,
    fusion: FusionHooks | None = None,
    progress: Callable[[int], None] | None = None,
) -> PipelineResult:
    """Run the stages of the module docstring; `budget` counts chain evaluations."""
    if heuristic not in HEURISTICS:
        raise ValueError(f"unknown heuristic {heuristic!r}")
    stages: list[Stage] = []

    def report(name: str, order: list[int], where: Problem = problem) -> None:
        stages.append(Stage.of(name, where, order))

    identity = list(range(len(problem)))
    report("input", identity)
    fifo = fifo_list_schedule(problem).order
    report("list schedule", fifo)
    current = fifo
    # a function of the edges alone: dW placement and the search share it
    reach = reachability(problem) if heuristic == "dw" or budget > 0 else None
    if heuristic == "dw":
        current = dw_schedule(problem, fifo, reach).order
        report("dw placement", current)
    evaluations = 0
    unsearched = current
    if budget > 0:
        starts = [
            ("pipeline", current),
            ("input", identity),
            ("fifo", fifo),
            ("rank", rank_list_schedule(problem).order),
        ]
        main_budget = budget if fusion is None else budget - budget // 10
        outcome = search_schedule(problem, main_budget, starts, progress, reach)
        current = outcome.order
        evaluations = outcome.evaluations
        report("local search", current)
    reach = None  # O(V^2) bits: not kept alive while fusion and the fused search run
    if fusion is None or not any(problem.is_allreduce(v) for v in range(len(problem))):
        return PipelineResult(problem, current, [], identity, stages, evaluations, fifo)
    starts = [current] if unsearched == current else [current, unsearched]
    fusions = [_fuse(problem, order, fusion) for order in starts]
    evaluations += sum(f.evaluations for f in fusions)
    # the faster fused schedule (measured in the internal model); the searched one on a tie
    best = min(fusions, key=lambda f: makespan_of(f.problem, f.order))
    if not best.groups:
        report("fusion", best.order)
        return PipelineResult(problem, best.order, [], identity, stages, evaluations, fifo)
    fused, order, old_index = best.problem, best.order, best.old_index
    report("fusion", order, fused)
    if budget // 10 > 0:
        polish = search_schedule(fused, budget // 10, [("fused", order)], progress)
        evaluations += polish.evaluations
        order = polish.order
        report("local search (fused)", order, fused)
    return PipelineResult(fused, order, best.groups, old_index, stages, evaluations, fifo)


@dataclass(frozen=True)
class _Fused:
    """One fusion attempt: the (fused) problem, its order, the groups and old indices."""

    problem: Problem
    order: list[int]
    groups: list[list[int]]
    old_index: list[int]
    evaluations: int


def _fuse(problem: Problem, order: list[int], fusion: FusionHooks) -> _Fused:
    """Non-critical fusion (§7.5) of `order`; the problem unchanged when nothing merges."""
    chains = split_chains(problem, order)
    plan = plan_noncritical_fusion(problem, chains, fusion.fused_time, fusion.compatible)
    if not plan.groups:
        return _Fused(problem, order, [], list(range(len(problem))), plan.evaluations)
    fused, old_index = contract(problem, plan.groups, [fusion.fused_time(g) for g in plan.groups])
    new_index = {old: k for k, old in enumerate(old_index)}
    fused_order = block_order(
        fused,
        [[new_index[v] for v in chain] for chain in plan.chains],
        [plan.times.start[v] for v in old_index],
    )
    return _Fused(fused, fused_order, plan.groups, old_index, plan.evaluations)
