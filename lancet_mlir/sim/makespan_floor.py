"""A lower bound on the makespan of every order of a graph, from heads, tails and the one
compute stream.

Two facts of the simulator's semantics (`sim/engine.py`) give it: an op starts only after all
its producers ended, and the compute stream runs one op at a time. Let the *head* of op v be
the longest path of durations from a source to v's start, and its *tail* the longest path
from v's end to a sink (v excluded from both). In every order v starts no earlier than its
head and the makespan is at least its end plus its tail, so:

* **Critical path.** The makespan is at least head(v) + d(v) + tail(v) for every v.
* **Heads and the compute stream.** The compute ops with head >= h all start at h or later
  and run one at a time: the makespan is at least h + the sum of their durations, for every
  h (the best h is one of the heads; `release_floor_us` tries each).
* **Tails and the compute stream.** Symmetrically, the compute ops with tail >= t all end by
  makespan - t: at least t + the sum of their durations.

The durations must be lower bounds of what the ops take in every schedule (a collective
whose time a later stage may change, e.g. a fused all-reduce, counts 0), and the bound holds
for every topological order, any number of communication streams, an overlap slowdown >= 1
(compute only gets slower) and any launch overhead (it only delays). It costs a topological
sort and two sorts of the compute ops: O((V + E) log V).

`lancet-schedule` uses it to leave out a partition candidate that cannot beat the best
schedule so far (on the 24-layer d=1024 32-rank p3dn model it proves the unpartitioned
module, Lancet's DP plan and the 2-part expert split slower than the token candidates).
"""

from __future__ import annotations

from collections.abc import Sequence

from lancet_mlir.graph.core import topological_order


def heads_and_tails(
    preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]], durations: Sequence[float]
) -> tuple[list[float], list[float]]:
    """Per node: the longest path of `durations` from a source to its start (its head) and
    from its end to a sink (its tail), the node itself excluded from both."""
    n = len(preds)
    in_program_order = all(p < v for v in range(n) for p in preds[v])  # a block's graph
    order = range(n) if in_program_order else topological_order(preds, succs)
    head = [0.0] * n
    for v in order:
        best = 0.0
        for p in preds[v]:
            reach = head[p] + durations[p]
            if reach > best:
                best = reach
        head[v] = best
    tail = [0.0] * n
    for v in reversed(order):
        best = 0.0
        for s in succs[v]:
            reach = tail[s] + durations[s]
            if reach > best:
                best = reach
        tail[v] = best
    return head, tail


def release_floor_us(
    preds: Sequence[Sequence[int]],
    succs: Sequence[Sequence[int]],
    durations: Sequence[float],
    on_compute: Sequence[bool],
) -> float:
    """No order of the graph (`preds`/`succs`, per-node lower-bound `durations`) ends
    sooner than this (module doc): the largest of the critical path and the head and tail
    bounds over the nodes `on_compute` (those that share the one compute stream)."""
    n = len(preds)
    if not (len(succs) == len(durations) == len(on_compute) == n):
        raise ValueError("preds, succs, durations and on_compute must have one entry per node")
    if n == 0:
        return 0.0
    head, tail = heads_and_tails(preds, succs, durations)
    floor = max(head[v] + durations[v] + tail[v] for v in range(n))
    compute = [v for v in range(n) if on_compute[v]]
    for release in (head, tail):
        left = sum(durations[v] for v in compute)  # the ops from the k-th on, by release
        for v in sorted(compute, key=release.__getitem__):
            floor = max(floor, release[v] + left)
            left -= durations[v]
    return floor
