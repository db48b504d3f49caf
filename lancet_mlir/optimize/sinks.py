"""Sink filling: compute ops nothing waits for move into the compute stream's idle gaps.

A sink (an op no other node depends on: the optimizer updates of a training step, a loss
that is only returned) holds nothing back wherever it runs, but where it runs in a chain it
delays every op after it. The critical-path moves of `local_search` see that only where the
sink itself is on the critical path, one op per evaluation; at the end of a training step
they are not: after the gradient all-reduce of a tied embedding the updates of every layer
wait behind the embedding's update in program order, although their own gradients arrived
long before, while the compute stream idles under that all-reduce.

The step, on the compute chain (`chains[0]`): take the sinks out (no other op starts later
for it: an op's start is the max of its producers' and its stream predecessor's ends), then
put each back, in the order its producers end (ties: chain position), into the first idle
gap after that time where it fits whole, else after the last op. A sink that fits a gap
ends before the op after the gap starts, so it delays nothing; the result is evaluated and
kept only if its makespan is strictly smaller. Two evaluations, no randomness.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from lancet_mlir.graph.core import Problem
from lancet_mlir.optimize.chains import ChainTimes, evaluate


def fill_sinks(
    problem: Problem, chains: Sequence[Sequence[int]], times: ChainTimes
) -> tuple[list[list[int]], ChainTimes, int] | None:
    """(chains, times, evaluations spent) with the compute chain's sinks moved into idle
    gaps (module docstring), or None where that is not strictly faster than `times`."""
    comp = chains[0]
    sinks = [v for v in comp if not problem.succs[v]]
    if not sinks:
        return None
    rest = [v for v in comp if problem.succs[v]]
    trimmed = [rest, *(list(c) for c in chains[1:])]
    base = evaluate(problem, trimmed)
    if base is None:  # removing ops from a valid chain keeps it valid: defensive only
        return None
    filled = _placed(problem, rest, sinks, base)
    candidate = [filled, *trimmed[1:]]
    result = evaluate(problem, candidate)
    if result is None or result.makespan_us >= times.makespan_us - 1e-9:
        return None
    return candidate, result, 2


def _placed(problem: Problem, rest: list[int], sinks: list[int], base: ChainTimes) -> list[int]:
    """`rest` with each sink inserted into the first gap of `base` it fits after its ready
    time, else appended; the sinks in order of ready time, ties by their chain position."""
    start, end = base.start, base.end
    ready = {v: max((end[p] for p in problem.preds[v]), default=0.0) for v in sinks}
    position = {v: i for i, v in enumerate(sinks)}
    # the idle gaps: gap k lies before rest[at[k]], from free[k] (where the stream is free:
    # after the op before it and the sinks already put there) to limit[k]
    at = [g for g, op in enumerate(rest) if start[op] > (end[rest[g - 1]] if g else 0.0)]
    free = [end[rest[g - 1]] if g else 0.0 for g in at]
    limit = [start[rest[g]] for g in at]
    before: dict[int, list[int]] = {}
    after: list[int] = []
    for v in sorted(sinks, key=lambda s: (ready[s], position[s])):
        d, r = problem.durations[v], ready[v]
        # the gaps end in chain order: skip those that end before the sink is ready
        for k in range(bisect.bisect_left(limit, r), len(at)):
            begin = max(free[k], r)
            if begin + d <= limit[k]:
                before.setdefault(at[k], []).append(v)
                free[k] = begin + d
                break
        else:
            after.append(v)
    out: list[int] = []
    for g, op in enumerate(rest):
        out.extend(before.get(g, ()))
        out.append(op)
    out.extend(after)
    return out
