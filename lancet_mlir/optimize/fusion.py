"""Fusing all-reduces that are off the critical path (Lancet's FuseNonCritCommNodes, §7.5).

Walk the communication chain; for each pair of consecutive compatible all-reduces (a, b),
if the fused op could start (both inputs ready and the collective before a finished) before
b ends, evaluate the schedule with a and b merged into one collective at b's place (a's
consumers then wait for it; its duration comes from `fused_time`). The merge is accepted
when the makespan does not get worse: equal makespan with one op fewer counts as better
(fewer launches). One pass over the chain: after an acceptance the scan continues with the merged op and
the next one, so a run of mergeable all-reduces becomes one op. O(#all-reduces)
evaluations. Lancet's index bug (reading the chain at -1 for the first pair)
is fixed: the previous collective is only consulted when there is one.

Plain data: merges are recorded as groups of original node indices; the caller rewrites
the IR (`graph.rewrite.fuse_collectives`). The other chains (compute, copy queues) and the
stream-less nodes are evaluated with the communication chain as they are (`optimize.chains`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lancet_mlir.graph.core import Problem
from lancet_mlir.optimize.chains import ChainTimes, evaluate_chains, resume_point
from lancet_mlir.optimize.propagate import UNSETTLED, ChainLinks, propagate


@dataclass
class FusionPlan:
    """Groups of all-reduces to fuse (each in chain order; the op takes the last one's
    place), the resulting chains (fused groups represented by their last member) and times."""

    groups: list[list[int]]
    chains: list[list[int]]
    times: ChainTimes
    evaluations: int


def plan_noncritical_fusion(
    problem: Problem,
    chains: Sequence[Sequence[int]],
    fused_time: Callable[[list[int]], float],
    compatible: Callable[[int, int], bool],
) -> FusionPlan:
    """Merge consecutive compatible all-reduces of the communication chain (`chains[1]`)
    while the makespan does not grow."""
    preds = [list(ps) for ps in problem.preds]
    succs = [list(ss) for ss in problem.succs]
    durations = list(problem.durations)
    members: dict[int, list[int]] = {}
    fixed = [list(chain) for chain in chains]
    comm = fixed[1]
    free = problem.streamless
    times = evaluate_chains(preds, durations, fixed, streamless=free)
    if times is None:
        raise ValueError("chains form a cycle")
    evaluations = 1
    links = ChainLinks(fixed, len(durations))
    k = 1
    while k < len(comm):
        a, b = comm[k - 1], comm[k]
        if not (problem.is_allreduce(a) and problem.is_allreduce(b) and compatible(a, b)):
            k += 1
            continue
        earliest = max(
            (times.end[p] for p in preds[a] + preds[b] if not problem.is_comm[p]), default=0.0
        )
        if k >= 2:
            earliest = max(earliest, times.end[comm[k - 2]])
        if not earliest < times.end[b]:
            k += 1
            continue
        group = members.get(a, [a]) + members.get(b, [b])
        trial_preds, trial_durations = _merged(preds, succs, durations, a, b, fused_time(group))
        trial_comm = comm[: k - 1] + comm[k:]
        trial_chains = [fixed[0], trial_comm, *fixed[2:]]
        neighbours = links.unlink(a)
        trial = _trial_times(
            trial_preds, succs, trial_durations, trial_chains, links, times, a, b, free
        )
        evaluations += 1
        if trial is None or trial.makespan_us > times.makespan_us:
            links.relink(a, neighbours)
            k += 1
            continue
        succs = _succs_after_merge(succs, preds[a], a, b)
        preds, durations, comm, times = trial_preds, trial_durations, trial_comm, trial
        fixed[1] = comm
        members.pop(a, None)
        members[b] = group
    groups = [g for _, g in sorted(members.items(), key=lambda item: item[1][0])]
    return FusionPlan(groups, fixed, times, evaluations)


def _trial_times(
    preds: list[list[int]],
    succs: list[list[int]],
    durations: list[float],
    chains: list[list[int]],
    links: ChainLinks,
    times: ChainTimes,
    a: int,
    b: int,
    streamless: Sequence[int],
) -> ChainTimes | None:
    """The times of the chains with `a` merged into `b` (`preds`, `durations`, `chains` and
    `links` already merged; `succs` and `times` not yet), None when no block order realises
    them. The merge gives `b` new producers and duration and `a`'s consumers `b` as
    producer, so those are recomputed and what changes is propagated (`optimize.propagate`:
    the same times as evaluating again). A merge that closes a cycle is found first
    (`_closes_cycle`: propagation may not notice one whose times round away). Where
    propagation does not apply (stream-less nodes, a merged op of no or infinite duration)
    or does not settle, the chains are evaluated again from `a`'s start (the merge changes
    nothing that starts before it: `a`'s consumers and `b` start after it ends)."""
    if not streamless and 0 < durations[b] < math.inf:
        consumers = succs[a]
        if _closes_cycle(succs, links, times.start, consumers, b, preds[b]):
            return None
        also_b = set(preds[b])  # b's producers now include a's: they must push to b
        merged_readers = sorted(set(succs[b]) | set(consumers))

        def readers(v: int) -> list[int]:
            if v == b:
                return merged_readers
            return [*succs[v], b] if v in also_b else succs[v]

        # b first: with no cycle nothing b reads can change, so its time is final at once
        found = propagate(
            preds, durations, chains, links, times, [b, *consumers], readers,
            2 * len(durations) + 64, first=b,
        )  # fmt: skip
        if found is not UNSETTLED:
            return found
    return evaluate_chains(
        preds, durations, chains, resume_point(times, chains, times.start[a]), streamless=streamless
    )


def _closes_cycle(
    succs: list[list[int]],
    links: ChainLinks,
    start: Sequence[float],
    consumers: Sequence[int],
    b: int,
    inputs: Sequence[int],
) -> bool:
    """True when merging into `b` closes a cycle: one of the first member's `consumers` (which
    will read `b`) reaches one of `b`'s `inputs` after the merge (its producers, the two
    members' together) or its new predecessor on the chain (`links`, the first member already
    unlinked). Every new edge touches `b`, so a cycle leaves it through such a consumer and comes
    back through such an input, on edges the merge kept. Those keep base start times in order
    and every input starts by `b`'s start, so the search stays among the ops that start by
    then (`start`: the times before the merge). Ops in no chain count as finished (as in
    `evaluate_chains`), so no path goes through them."""
    targets = set(inputs)
    if links.prev[b] >= 0:
        targets.add(links.prev[b])
    limit = start[b]
    chained = links.chained
    seen: set[int] = set()
    todo = list(consumers)
    while todo:
        v = todo.pop()
        if not chained[v]:
            continue  # an op in no chain counts as finished: it holds nothing back
        if v == b or v in targets:
            return True
        if v in seen or start[v] > limit:
            continue
        seen.add(v)
        todo.extend(succs[v])
        if links.next[v] >= 0:
            todo.append(links.next[v])
    return False


def _merged(
    preds: list[list[int]],
    succs: list[list[int]],
    durations: list[float],
    a: int,
    b: int,
    fused: float,
) -> tuple[list[list[int]], list[float]]:
    """Preds and durations with `a` folded into `b` (a keeps no edges and no time)."""
    new_preds = list(preds)
    new_preds[b] = sorted(set(preds[a]) | set(preds[b]))
    new_preds[a] = []
    for c in succs[a]:
        new_preds[c] = sorted({b if p == a else p for p in preds[c]})
    new_durations = list(durations)
    new_durations[a] = 0.0
    new_durations[b] = fused
    return new_preds, new_durations


def _succs_after_merge(
    succs: list[list[int]], preds_of_a: Sequence[int], a: int, b: int
) -> list[list[int]]:
    """Successor lists once `a` is folded into `b`: `b` reads `a`'s producers (`preds_of_a`,
    before the merge) and is read by `a`'s readers; `a` has no edges."""
    new = list(succs)
    new[b] = sorted(set(succs[a]) | set(succs[b]))
    for p in preds_of_a:
        new[p] = sorted({b if s == a else s for s in succs[p]})
    new[a] = []
    return new
