"""The near-optimal scheduler: several starting schedules, each improved by local search.

Starting points (each a launch order): the input order, Lancet's FIFO list schedule, the
upward-rank list schedule and the dW schedule (placement + gap filling). The starts are
improved in order of their makespan (best first) by the critical-path local search
(`local_search`); each gets an equal share of the evaluation budget still left, so what a
start leaves unused (it reached a local optimum) goes to the next ones. The best result
wins (ties: the better start). What budget is left then goes to an iterated local search:
the best chains are perturbed (a few ops moved to other positions of their stream, never
before an ancestor or after a descendant on it, drawn from a fixed-seed generator) and
improved again, each with a share of at least `KICK_SHARE_MIN` evaluations per op; a better
result replaces the best. It stops after `KICKS_WITHOUT_GAIN` perturbations in a row bring
nothing, or when the budget is spent.
The critical-path moves alone get stuck in local optima that need two coordinated moves
(e.g. an all-reduce and the dW op that has to make room for it). Last, with what budget is
left, tail deferral (`optimize.tail`): compute that hides nothing moves behind the most exposed
collective, with everything that depends on it. Then, in two more evaluations whatever the
budget, sink filling (`optimize.sinks`): ops nothing waits for (the optimizer updates) move
into idle gaps of the compute stream, out of the tail. The budget counts chain evaluations and
the generator is seeded, so results are deterministic.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lancet_mlir.graph.core import Problem
from lancet_mlir.optimize.chains import (
    ChainTimes,
    Reach,
    block_order,
    evaluate,
    reachability,
    split_chains,
)
from lancet_mlir.optimize.dw import dw_schedule, fifo_list_schedule
from lancet_mlir.optimize.local_search import improve
from lancet_mlir.optimize.ranks import rank_list_schedule
from lancet_mlir.optimize.sinks import fill_sinks
from lancet_mlir.optimize.tail import defer_to_tail


@dataclass(frozen=True)
class SearchOutcome:
    """The best order found, its makespan (one comm stream, no slowdown), which start it
    came from, and the evaluations spent."""

    order: list[int]
    makespan_us: float
    start: str
    evaluations: int


def starting_orders(
    problem: Problem, input_order: Sequence[int] | None = None
) -> list[tuple[str, list[int]]]:
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
    reach: Reach | None = None,
) -> SearchOutcome:
    """Improve the starts within `budget` evaluations in all (module docstring); `reach`:
    the problem's `reachability`, when the caller has it (computed here else)."""
    starts = starts if starts is not None else starting_orders(problem)
    # the edges do not change: every search below shares one reachability
    reach = reach if reach is not None else reachability(problem)
    ranked = []
    for index, (name, order) in enumerate(starts):
        chains = split_chains(problem, order)
        times = evaluate(problem, chains)
        if times is None:
            raise ValueError(f"start '{name}' is not a valid order")
        ranked.append((times.makespan_us, index, name, chains))
    ranked.sort(key=lambda r: (r[0], r[1]))
    best: SearchOutcome | None = None
    spent = len(ranked)
    for left, (_, _, name, chains) in zip(range(len(ranked), 0, -1), ranked, strict=True):
        share = (budget - spent) // left
        if share > 0:
            result = improve(problem, chains, share, progress, reach)
            chains, times, used = result.chains, result.times, result.evaluations
        else:
            times = evaluate(problem, chains)
            assert times is not None
            used = 0
        spent += used
        if best is None or times.makespan_us < best.makespan_us:
            best = SearchOutcome(
                block_order(problem, chains, times.start), times.makespan_us, name, 0
            )
    assert best is not None
    chains = split_chains(problem, best.order)
    kicked = _kick_search(problem, chains, best.makespan_us, budget - spent, progress, reach)
    spent += kicked.evaluations
    if kicked.times is not None and kicked.times.makespan_us < best.makespan_us - 1e-9:
        order = block_order(problem, kicked.chains, kicked.times.start)
        best = SearchOutcome(order, kicked.times.makespan_us, f"{best.start}+kicks", spent)
        chains = kicked.chains
    tail = defer_to_tail(problem, chains, budget - spent, progress, reach)
    spent += tail.evaluations
    if tail.times is not None and tail.times.makespan_us < best.makespan_us - 1e-9:
        order = block_order(problem, tail.chains, tail.times.start)
        best = SearchOutcome(order, tail.times.makespan_us, f"{best.start}+tail", spent)
        chains = tail.chains
    return _with_sinks_filled(problem, best, chains, spent)


def _with_sinks_filled(
    problem: Problem, best: SearchOutcome, chains: list[list[int]], spent: int
) -> SearchOutcome:
    """`best` (whose chains are `chains`) after sink filling (`optimize.sinks`) where that
    is faster; its evaluations are counted, the budget already spent or not (two, fixed)."""
    times = evaluate(problem, chains)
    assert times is not None
    filled = fill_sinks(problem, chains, times)
    if filled is None:
        return SearchOutcome(best.order, best.makespan_us, best.start, spent + 1)
    chains, times, used = filled
    order = block_order(problem, chains, times.start)
    return SearchOutcome(order, times.makespan_us, f"{best.start}+sinks", spent + 1 + used)


KICKS_WITHOUT_GAIN = 100
"""Perturbations in a row without a better schedule after which the iterated search stops."""

KICK_MOVES = 3
"""Ops moved by one perturbation."""

KICK_SEED = 20240601
"""Seed of the perturbation generator (fixed: the search is deterministic)."""

KICK_TRIES = 4
"""Draws per perturbation before it counts as failed (streams that wait for each other)."""

KICK_SHARE_MIN = 8
"""Evaluations per op that the local search after a perturbation may use at least: with a
smaller share it stops before it reaches the move that the perturbation made possible."""


@dataclass
class _Kicked:
    chains: list[list[int]]
    times: ChainTimes | None
    evaluations: int


def _kick_search(
    problem: Problem,
    chains: list[list[int]],
    makespan_us: float,
    budget: int,
    progress: Callable[[int], None] | None,
    reach: Reach,
) -> _Kicked:
    """Iterated local search from the best chains (module docstring); `reach`: the
    problem's `reachability`."""
    rng = random.Random(KICK_SEED)
    floor_share = KICK_SHARE_MIN * len(problem)
    best = _Kicked(chains, None, 0)
    best_makespan = makespan_us
    idle = 0
    while idle < KICKS_WITHOUT_GAIN and budget - best.evaluations > 0:
        kicked = _perturb(problem, best.chains, rng, reach)
        best.evaluations += 1
        if kicked is None:
            idle += 1
            continue
        share = min(budget - best.evaluations, max(floor_share, budget // (4 * KICKS_WITHOUT_GAIN)))
        result = improve(problem, kicked, share, progress, reach)
        best.evaluations += result.evaluations
        if result.times.makespan_us <= best_makespan:
            # equal makespans are accepted too (a walk along the plateau), but only a
            # strictly better one resets the count of idle perturbations
            gained = result.times.makespan_us < best_makespan
            best = _Kicked(result.chains, result.times, best.evaluations)
            best_makespan = result.times.makespan_us
            idle = 0 if gained else idle + 1
        else:
            idle += 1
    return best


def _perturb(
    problem: Problem,
    incumbent: list[list[int]],
    rng: random.Random,
    reach: Reach,
) -> list[list[int]] | None:
    """`KICK_MOVES` ops of the compute and communication chains moved to random positions of
    their own stream, each between its last ancestor and its first descendant on that
    stream (copy queues keep their order here; the local search moves them); None if the
    chains no longer have a block order (two streams can still wait for each other: up to
    `KICK_TRIES` draws are made)."""
    reaches = reach.reaches
    for _ in range(KICK_TRIES):
        chains = [list(chain) for chain in incumbent]
        for _ in range(KICK_MOVES):
            chain = chains[0] if len(chains[1]) < 2 or rng.random() < 0.5 else chains[1]
            if len(chain) < 2:
                continue
            op = chain.pop(rng.randrange(len(chain)))
            low = max((k + 1 for k, u in enumerate(chain) if reaches(u, op)), default=0)
            below = reach.descendants[op]  # one full set, not one per chain position
            high = min((k for k, u in enumerate(chain) if below >> u & 1), default=len(chain))
            chain.insert(rng.randint(low, high), op)
        if evaluate(problem, chains) is not None:
            return chains
    return None
