"""Re-evaluating chains after a local change by propagating it, not by replaying the suffix.

`evaluate_chains` with `resume` recomputes every op that starts after a change, O(V + E) per
trial however little moves. The fusion planner (`optimize.fusion`) tries one merge of two
all-reduces at a time: it delays or advances the merged op and the consumers of its first
member, and on the 24-layer p3dn model only about 1 % of the ops after the change end at
another time. Here the times of the ops whose inputs changed (the `seeds`) are recomputed
and each change is pushed to the ops that read it (data successors and the next op of the
stream), so the work is proportional to what moves.

The fixed-order formula is the one of `optimize.chains`: an op of a chain starts at the
latest end among its producers and its predecessor on the chain (0 for a chain's first op);
an op in no chain keeps its time (`evaluate_chains` treats it as finished). Recomputation
takes ops in the order of their base start times and recomputes an op again when one of its
inputs changes after it was taken (label-correcting), so the result is the unique solution
of the formula whatever the order: the same floats as `evaluate_chains` (same `max` and
`+` on the same operands). That needs the change to close no cycle, which the caller checks
first (`fusion._closes_cycle`: a cycle can settle here when its times round away, e.g. a
1e-15 µs op next to 101 µs ones); as a guard against pathological recomputation, after
`max_steps` the caller is told (`UNSETTLED`) and evaluates from scratch.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence

from lancet_mlir.optimize.chains import ChainTimes


class ChainLinks:
    """The predecessor and successor of every op on its chain (-1: none) and whether it is on
    a chain, kept in step with chains that lose ops (`unlink`, undone by `relink`)."""

    def __init__(self, chains: Sequence[Sequence[int]], n: int) -> None:
        self.prev = [-1] * n
        self.next = [-1] * n
        self.chained = [False] * n
        for chain in chains:
            for k, v in enumerate(chain):
                self.chained[v] = True
                if k:
                    self.prev[v] = chain[k - 1]
                    self.next[chain[k - 1]] = v

    def unlink(self, v: int) -> tuple[int, int]:
        """Take `v` off its chain; returns (its predecessor, its successor) for `relink`."""
        p, s = self.prev[v], self.next[v]
        if p >= 0:
            self.next[p] = s
        if s >= 0:
            self.prev[s] = p
        self.prev[v] = self.next[v] = -1
        self.chained[v] = False
        return p, s

    def relink(self, v: int, neighbours: tuple[int, int]) -> None:
        """Put `v` back between the neighbours `unlink` returned."""
        p, s = neighbours
        self.prev[v], self.next[v] = p, s
        if p >= 0:
            self.next[p] = v
        if s >= 0:
            self.prev[s] = v
        self.chained[v] = True


UNSETTLED = None
"""What `propagate` returns when the change did not settle within `max_steps` (a cycle the
caller did not rule out, or more recomputation than a fresh evaluation would cost)."""


def propagate(
    preds: Sequence[Sequence[int]],
    durations: Sequence[float],
    chains: Sequence[Sequence[int]],
    links: ChainLinks,
    base: ChainTimes,
    seeds: Iterable[int],
    readers: Callable[[int], Iterable[int]],
    max_steps: int,
    first: int | None = None,
) -> ChainTimes | None:
    """The times of `chains` (with `preds`, `durations` and `links` in step with them) where
    only the `seeds` have other inputs or durations than in `base`'s evaluation; `readers(v)`
    are the ops whose producers include v. `UNSETTLED` after `max_steps` recomputations.
    `first`: a seed taken before all others (one whose inputs the change cannot reach: its
    readers then see its final time at once, not a stale one to correct later)."""
    start = list(base.start)
    end = list(base.end)
    base_start = base.start
    prev, nxt, chained = links.prev, links.next, links.chained
    heap = [(-math.inf if v == first else base_start[v], v) for v in set(seeds) if chained[v]]
    heapq.heapify(heap)
    queued = {v for _, v in heap}
    steps = 0
    while heap:
        _, v = heapq.heappop(heap)
        queued.discard(v)
        steps += 1
        if steps > max_steps:
            return UNSETTLED
        p = prev[v]
        t = end[p] if p >= 0 else 0.0
        for u in preds[v]:
            e = end[u]
            if e > t:
                t = e
        start[v] = t
        finish = t + durations[v]
        if finish == end[v]:
            continue
        end[v] = finish
        s = nxt[v]
        if s >= 0 and s not in queued:
            queued.add(s)
            heapq.heappush(heap, (base_start[s], s))
        for w in readers(v):
            if chained[w] and w not in queued:
                queued.add(w)
                heapq.heappush(heap, (base_start[w], w))
    makespan = max((end[chain[-1]] for chain in chains if chain), default=0.0)
    return ChainTimes(start, end, makespan)
