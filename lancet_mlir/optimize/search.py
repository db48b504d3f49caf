"""The near-optimal scheduler: several starting schedules, each improved by local search.

Starting points (each a launch order): the input order, Lancet's FIFO list schedule, the
upward-rank list schedule and the dW schedule (placement + gap filling). The starts are
improved in order of their makespan (best first) by the critical-path local search
(`local_search`); each gets an equal share of the evaluation budget still left, so what a
start leaves unused (it reached a local optimum) goes to the next ones. The best result
wins (ties: the better start). The budget counts chain evaluations, so results are
deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lancet_mlir.optimize.chains import block_order, evaluate_chains, split_chains
from lancet_mlir.optimize.dw import dw_schedule, fifo_list_schedule
from lancet_mlir.optimize.local_search import improve
from lancet_mlir.optimize.problem import Problem
from lancet_mlir.optimize.ranks import rank_list_schedule


@dataclass(frozen=True)
class SearchOutcome:
    """The best order found, its makespan (one comm stream, no slowdown), which start it
    came from, and the evaluations spent."""

    order: list[int]
    makespan_us: float
    start: str
    evaluations: int


def starting_orders(problem: Problem, input_order: Sequence[int] | None = None) -> list[tuple[str, list[int]]]:
    """The named starting schedules of the search (module docstring)."""
    identity = list(input_order) if input_order is not None else list(range(len(problem)))
    return [
        ("input", identity),
        ("fifo", fifo_list_schedule(problem).order),
        ("rank", rank_list_schedule(problem).order),
        ("dw", dw_schedule(problem).order),
    ]


def search_schedule(
    problem: Problem,
    budget: int,
    starts: Sequence[tuple[str, Sequence[int]]] | None = None,
    progress: Callable[[int], None] | None = None,
) -> SearchOutcome:
    """Improve the starts within `budget` evaluations in all (module docstring)."""
    starts = starts if starts is not None else starting_orders(problem)
    ranked = []
    for index, (name, order) in enumerate(starts):
        comp, comm = split_chains(problem.is_comm, order)
        times = evaluate_chains(problem.preds, problem.durations, comp, comm)
        if times is None:
            raise ValueError(f"start '{name}' is not a valid order")
        ranked.append((times.makespan_us, index, name, comp, comm))
    ranked.sort(key=lambda r: (r[0], r[1]))
    best: SearchOutcome | None = None
    spent = len(ranked)
    for left, (_, _, name, comp, comm) in zip(range(len(ranked), 0, -1), ranked, strict=True):
        share = (budget - spent) // left
        if share > 0:
            result = improve(problem, comp, comm, share, progress)
            comp, comm, times, used = result.comp, result.comm, result.times, result.evaluations
        else:
            times = evaluate_chains(problem.preds, problem.durations, comp, comm)
            assert times is not None
            used = 0
        spent += used
        if best is None or times.makespan_us < best.makespan_us:
            best = SearchOutcome(block_order(problem, comp, comm, times.start), times.makespan_us, name, 0)
    assert best is not None
    return SearchOutcome(best.order, best.makespan_us, best.start, spent)
