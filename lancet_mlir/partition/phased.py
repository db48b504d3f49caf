"""Lancet's phased pipeline simulator (lancet-algorithms.md §5.3), on plain data.

Two streams (compute and communication) each run one op at a time; an op is ready when
all its producers have finished. Every op has a phase: `PRELUDE` (0), part k of a
pipeline (k + 1), `EPILOGUE` (-1) or `ARBITRARY` (-2). Each stream keeps a current phase:
an idle stream launches the highest-priority ready op of its current phase (earliest
readiness first among equals); when that phase has nothing ready it moves on cyclically
through the phases 0..max, and only when no pipeline phase has ready work it takes
arbitrary, then epilogue ops. Each stream thus works on one part until it runs dry and
then rotates, which software-pipelines part k's compute with part k±1's collectives.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from lancet_mlir.graph.core import topological_order

PRELUDE = 0
EPILOGUE = -1
ARBITRARY = -2


@dataclass(frozen=True)
class PhasedResult:
    """Start and end time of every op (µs), the launch order and the makespan."""

    start: list[float]
    end: list[float]
    order: list[int]
    makespan_us: float


def part_phase(k: int) -> int:
    """The phase of part k of a pipeline."""
    return k + 1


def phased_simulate(
    preds: Sequence[Sequence[int]],
    is_comm: Sequence[bool],
    durations: Sequence[float],
    phases: Sequence[int],
    priorities: Sequence[float] | None = None,
) -> PhasedResult:
    """Simulate the phased list schedule of a DAG (node i's producers are `preds[i]`).

    Deterministic: ties in priority go to the op that became ready first, then to the
    smaller node index; ops finishing at the same time are all retired before the idle
    streams pick new work. `order` lists ops by start time, compute before communication
    at equal start. Raises ValueError on a cycle.
    """
    n = len(preds)
    prio = list(priorities) if priorities is not None else [0.0] * n
    max_phase = max((p for p in phases if p >= 0), default=0)
    succs: list[list[int]] = [[] for _ in range(n)]
    missing = [0] * n
    for i, ps in enumerate(preds):
        missing[i] = len(ps)
        for p in ps:
            succs[p].append(i)
    queues: dict[tuple[bool, int], list[tuple[float, int, int]]] = {}
    seq = 0

    def push(i: int) -> None:
        nonlocal seq
        heapq.heappush(queues.setdefault((is_comm[i], phases[i]), []), (-prio[i], seq, i))
        seq += 1

    def pick(comm: bool) -> int | None:
        phase = current[comm]
        for step in range(max_phase + 1):
            p = (phase + step) % (max_phase + 1)
            q = queues.get((comm, p))
            if q:
                current[comm] = p
                return heapq.heappop(q)[2]
        for p in (ARBITRARY, EPILOGUE):
            q = queues.get((comm, p))
            if q:
                return heapq.heappop(q)[2]
        return None

    for i in range(n):
        if missing[i] == 0:
            push(i)
    current = {False: PRELUDE, True: PRELUDE}
    busy = {False: False, True: False}
    start = [0.0] * n
    end = [0.0] * n
    launch_seq = [0] * n
    events: list[tuple[float, int, int]] = []
    launched = 0
    t = 0.0
    while True:
        for comm in (False, True):
            if busy[comm]:
                continue
            i = pick(comm)
            if i is None:
                continue
            start[i], end[i] = t, t + float(durations[i])
            launch_seq[i] = launched
            busy[comm] = True
            heapq.heappush(events, (end[i], launched, i))
            launched += 1
        if not events:
            break
        t = events[0][0]
        while events and events[0][0] == t:
            i = heapq.heappop(events)[2]
            busy[is_comm[i]] = False
            for c in succs[i]:
                missing[c] -= 1
                if missing[c] == 0:
                    push(c)
    if launched != n:
        raise ValueError("phased_simulate: the graph has a cycle")
    key = [(start[i], is_comm[i], launch_seq[i]) for i in range(n)]
    # by start, moved later only where a producer would otherwise follow its consumer
    # (zero-time ops starting together on different streams)
    order = topological_order(preds, succs, key)
    return PhasedResult(start, end, order, max(end, default=0.0))
