"""Weight-gradient (dW) scheduling into all-to-all windows and all-reduce gap filling.

Lancet §6.2-6.3 (lancet-algorithms.md), deterministic and robust:

1. **Initial schedule**: Lancet's FIFO list schedule (every op priority 1; ops consuming an
   all-reduce result priority 0 and held back until nothing else runs).
2. **Labelling**: a dW candidate is a compute op that is unordered (neither reaches the
   other) with at least one all-to-all, is not an optimizer update (a descendant of an
   all-reduce, or `lancet.role = "update"`), and whose `lancet.role`, when present, is
   `"dw"`. Reachability uses Python-int bitsets.
3. **Placement** (greedy best fit + deadline pass): for each all-to-all in launch order,
   pick available candidates overlappable with it whose duration best fits the time left
   in its window (stop when the window is full, or a candidate would overshoot by more than
   the window's rest); then every unplaced candidate whose last overlappable all-to-all
   this is, with its unplaced dW ancestors, goes here too. Placed dWs launch right after
   their all-to-all.
4. **Gap filling**: with the compute chain and the non-all-reduce collectives fixed, the
   all-reduces fill the idle gaps of the communication stream between consecutive
   collectives, largest fitting first (they never delay a collective there); the rest run
   after the last collective, earliest ready first. Optimizer updates follow as their
   inputs arrive.

Unlike Lancet, orders are repaired to be topological (a candidate may depend on a non-dW op
launched after its window), graphs with all-reduces but no all-to-all are handled (gap
filling only), and graphs without collectives are left alone. Copies keep their own
copy-engine chains and host syncs and virtual nodes are on no stream (`optimize.chains`):
none is ever a dW candidate.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from lancet_mlir.dialects.vocab import Role
from lancet_mlir.graph.core import Problem, node_flags, topological_order
from lancet_mlir.optimize.chains import (
    ChainTimes,
    Reach,
    bits_of,
    block_order,
    evaluate,
    reachability,
    split_chains,
)
from lancet_mlir.sim import Timeline, list_schedule, weight_update_first


def fifo_list_schedule(problem: Problem) -> Timeline:
    """Lancet's profiled FIFO list schedule (§1.4 steps 2-3) on one comm stream."""
    delayed = weight_update_first(problem)
    priorities = [1.0] * len(problem)
    for v in delayed:
        priorities[v] = 0.0
    return list_schedule(
        problem, problem.durations, priorities=priorities, delayed=delayed, **node_flags(problem)
    )


@dataclass(frozen=True)
class DwLabels:
    """The result of labelling: windows, candidates and their relations.

    `windows`: all-to-all nodes in launch order. `candidates`: dW candidates in launch order.
    `overlappable[d]`: indices into `windows` of the all-to-alls unordered with `d`.
    `dw_preds[d]`: the other candidates that reach `d`. `updates`: bitset of the optimizer
    updates (descendants of all-reduces and ops with role "update").
    """

    windows: list[int]
    candidates: list[int]
    overlappable: dict[int, list[int]]
    dw_preds: dict[int, list[int]]
    updates: int


def update_mask(problem: Problem, desc: Sequence[int]) -> int:
    """Bitset of the optimizer-update side: all-reduce descendants and role "update" ops,
    less any of them that reaches an op outside that side. The update side runs after the
    body (`append_tail`), so it must be closed under successors: an op labelled "update"
    that feeds the body (a mislabelled role, e.g. from an importer's guess) is body work,
    not a cycle. One pass suffices: `desc` is transitive, so whatever reaches a removed op
    reaches the body op that removed it."""
    mask = 0
    for v in range(len(problem)):
        if problem.is_allreduce(v):
            mask |= desc[v]
        elif problem.role[v] == Role.UPDATE:
            mask |= 1 << v
    outside = ~mask
    closed = mask
    for v in bits_of(mask):
        if desc[v] & outside & ~(1 << v):
            closed &= ~(1 << v)
    return closed


def label_dw(problem: Problem, launch_order: Sequence[int], reach: Reach | None = None) -> DwLabels:
    """Find the dW candidates of `problem` (module docstring, step 2); `reach`: its
    `reachability`, when the caller has it."""
    reach = reach if reach is not None else reachability(problem)
    updates = update_mask(problem, reach.descendants)
    windows = [v for v in launch_order if problem.is_a2a(v)]
    eligible = 0
    for v in range(len(problem)):
        if not problem.is_compute(v) or updates >> v & 1 or problem.role[v] not in (None, Role.DW):
            continue
        eligible |= 1 << v
    # per op, the windows it reaches and those that reach it, as len(windows)-bit sets
    # (`Reachability` keeps no per-node ancestor sets): d is overlappable with window k iff
    # neither bit k is set
    before = reach.descendants_among(windows)
    after = reach.ancestors_among(windows)
    every_window = (1 << len(windows)) - 1
    found = []
    for d in bits_of(eligible):
        unordered = bits_of(every_window & ~(before[d] | after[d]))
        if unordered:
            found.append((d, unordered))
    del before, after  # V sets each: not alive with the next ones
    # keyed in the order a scan of the windows first meets each candidate (window, then op)
    found.sort(key=lambda item: (item[1][0], item[0]))
    overlappable = dict(found)
    position = {v: k for k, v in enumerate(launch_order)}
    candidates = sorted(overlappable, key=position.__getitem__)
    # the candidates that reach each candidate: bit k = the k-th candidate by node number,
    # so the lists come out ascending as node numbers
    numbered = sorted(candidates)
    cand_before = reach.ancestors_among(numbered)
    dw_preds = {d: [numbered[k] for k in bits_of(cand_before[d])] for d in candidates}
    return DwLabels(windows, candidates, overlappable, dw_preds, updates)


def place_dw(problem: Problem, labels: DwLabels) -> list[list[int]]:
    """Greedy best fit + deadline pass (module docstring, step 3): dWs per window."""
    dur = problem.durations
    rank = {d: k for k, d in enumerate(labels.candidates)}
    waiting = {d: len(labels.dw_preds[d]) for d in labels.candidates}
    dw_succs: dict[int, list[int]] = {d: [] for d in labels.candidates}
    for d in labels.candidates:
        for p in labels.dw_preds[d]:
            dw_succs[p].append(d)
    per_window: list[list[int]] = [[] for _ in labels.windows]
    for d in labels.candidates:
        for w in labels.overlappable[d]:
            per_window[w].append(d)
    last_window = {d: labels.overlappable[d][-1] for d in labels.candidates}
    used: set[int] = set()
    placed: list[list[int]] = [[] for _ in labels.windows]

    def assign(d: int, w: int) -> None:
        used.add(d)
        placed[w].append(d)
        for s in dw_succs[d]:
            waiting[s] -= 1

    for w, a in enumerate(labels.windows):
        remaining = dur[a]
        count = 0
        while remaining > 0:
            options = [d for d in per_window[w] if d not in used and waiting[d] == 0]
            if not options:
                break
            best = min(options, key=lambda d: (abs(dur[d] - remaining), rank[d]))
            if count > 0 and dur[best] > 2 * remaining:
                break
            assign(best, w)
            remaining -= dur[best]
            count += 1
        due = _with_unplaced_ancestors(
            [d for d in per_window[w] if d not in used and last_window[d] == w], labels, used
        )
        while due:
            ready = [d for d in due if waiting[d] == 0]
            if not ready:  # cannot happen: `due` is closed under unplaced dW ancestors
                raise AssertionError("dW deadline pass made no progress")
            for d in ready:
                assign(d, w)
            due = [d for d in due if d not in used]
    return placed


def _with_unplaced_ancestors(due: list[int], labels: DwLabels, used: set[int]) -> list[int]:
    closure = set(due)
    for d in due:
        closure.update(p for p in labels.dw_preds[d] if p not in used)
    rank = {d: k for k, d in enumerate(labels.candidates)}
    return sorted(closure, key=rank.__getitem__)


def desired_order(
    launch_order: Sequence[int], labels: DwLabels, placed: list[list[int]]
) -> list[int]:
    """Launch order with every placed dW moved right after its window's all-to-all."""
    moved = {d for ds in placed for d in ds}
    after = {labels.windows[w]: ds for w, ds in enumerate(placed) if ds}
    out: list[int] = []
    for v in launch_order:
        if v in moved:
            continue
        out.append(v)
        out.extend(after.get(v, ()))
    return out


def topological_by_preference(problem: Problem, preferred: Sequence[int]) -> list[int]:
    """The topological order closest to `preferred` (Kahn, earliest preferred position first)."""
    position = [0] * len(problem)
    for k, v in enumerate(preferred):
        position[v] = k
    return topological_order(problem.preds, problem.succs, position)


def fill_allreduce_gaps(
    problem: Problem,
    chains: Sequence[Sequence[int]],
    fillers: Sequence[int],
    reach: Reach | None = None,
) -> list[int]:
    """Interleave the all-reduces `fillers` into the collective chain `fixed_comm` =
    `chains[1]`; returns the new collective chain.

    The chains (compute, `fixed_comm`, the copy queues) are evaluated alone (fillers and
    their descendants absent; they never feed the compute chain). Each idle gap of the comm stream before a collective of
    `fixed_comm` takes the largest filler that is ready, still fits and does not depend on
    that collective or a later one (with zero durations, "ready in time" alone would not say
    so), repeatedly, so no collective of `fixed_comm` is delayed; the rest follow the last
    collective in order of readiness. Should zero durations still hide a cycle through the
    compute chain, every filler goes after the last collective instead. `reach`:
    `reachability(problem)`, when the caller has it.
    """
    fixed_comm = chains[1]
    times = evaluate(problem, chains)
    if times is None:
        raise ValueError("compute and collective chains form a cycle")
    if reach is None:
        reach = reachability(problem)
    # a filler depends on fixed_comm[k] or a later collective iff the last collective of
    # fixed_comm that reaches it is at k or after (-1: none reaches it)
    comm_before = reach.ancestors_among(fixed_comm)
    last_before = {f: comm_before[f].bit_length() - 1 for f in fillers}
    del comm_before
    dur = problem.durations
    ready = {f: max((times.end[p] for p in problem.preds[f]), default=0.0) for f in fillers}
    left = sorted(fillers, key=lambda f: (ready[f], f))
    out: list[int] = []
    t = 0.0
    for k, c in enumerate(fixed_comm):
        gap_end = times.start[c]
        while left:
            fits = [f for f in left if max(t, ready[f]) + dur[f] <= gap_end and last_before[f] < k]
            if not fits:
                break
            best = max(fits, key=lambda f: (dur[f], -ready[f], -f))
            out.append(best)
            left.remove(best)
            t = max(t, ready[best]) + dur[best]
        out.append(c)
        t = times.end[c]
    out.extend(left)
    if evaluate(problem, [chains[0], out, *chains[2:]]) is None:
        # only with zero durations can "fits in time" hide a cycle through the compute chain
        return [*fixed_comm, *sorted(fillers, key=lambda f: (ready[f], f))]
    return out


def append_tail(
    problem: Problem, chains: Sequence[Sequence[int]], tail: Sequence[int]
) -> tuple[list[list[int]], ChainTimes]:
    """Append the `tail` nodes (optimizer updates) to the chains as their inputs arrive.

    A small list schedule: the chains are evaluated without the tail; then tail nodes are
    taken earliest-ready first (ties: node index) and appended to their stream (a
    stream-less one happens when its inputs arrive).
    """
    times = evaluate(problem, chains)
    if times is None:
        raise ValueError("chains form a cycle")
    in_tail = set(tail)
    end = list(times.end)
    free = [end[chain[-1]] if chain else 0.0 for chain in chains]
    waiting = {v: sum(1 for p in problem.preds[v] if p in in_tail) for v in tail}
    heap: list[tuple[float, int]] = []

    def push(v: int) -> None:
        heapq.heappush(heap, (max((end[p] for p in problem.preds[v]), default=0.0), v))

    for v in tail:
        if waiting[v] == 0:
            push(v)
    out = [list(chain) for chain in chains]
    while heap:
        ready, v = heapq.heappop(heap)
        s = problem.stream[v]
        if s < 0:
            end[v] = ready
        else:
            end[v] = free[s] = max(free[s], ready) + problem.durations[v]
            out[s].append(v)
        for c in problem.succs[v]:
            if c in waiting:
                waiting[c] -= 1
                if waiting[c] == 0:
                    push(c)
    final = evaluate(problem, out)
    if final is None:
        raise ValueError("chains form a cycle")
    return out, final


@dataclass(frozen=True)
class DwSchedule:
    """The dW schedule of a block: its order, makespan and what was placed where."""

    order: list[int]
    makespan_us: float
    labels: DwLabels
    placed: list[list[int]]


def dw_schedule(
    problem: Problem,
    initial: Sequence[int] | None = None,
    reach: Reach | None = None,
) -> DwSchedule:
    """dW placement + all-reduce gap filling (module docstring); returns a block order.

    `initial` is the launch order to start from (default: Lancet's FIFO list schedule);
    `reach`: the problem's `reachability`, when the caller has it (computed here else).
    """
    launch = list(initial) if initial is not None else fifo_list_schedule(problem).order
    reach = reach if reach is not None else reachability(problem)
    labels = label_dw(problem, launch, reach)
    placed = place_dw(problem, labels) if labels.windows else [[] for _ in labels.windows]
    merged = topological_by_preference(problem, desired_order(launch, labels, placed))
    updates = labels.updates
    body = [v for v in merged if not updates >> v & 1]
    chains = split_chains(problem, body)
    fillers = [v for v in chains[1] if problem.is_allreduce(v)]
    chains[1] = [v for v in chains[1] if not problem.is_allreduce(v)]
    chains[1] = fill_allreduce_gaps(problem, chains, fillers, reach)
    tail = [v for v in merged if updates >> v & 1]
    chains, times = append_tail(problem, chains, tail)
    order = block_order(problem, chains, times.start)
    return DwSchedule(order, times.makespan_us, labels, placed)
