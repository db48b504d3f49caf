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

* **Communication windows** (one communication stream, `comm_window_floor_us`). Then the
  collectives run one at a time, so their running intervals are disjoint. While collective c
  runs, the only compute that can run is an op *unordered* with c (neither reaching c nor
  reached from it): an ancestor ended before c started, a descendant starts after c ended.
  So for any group K of collectives, the compute stream idles for at least
  d(K) - w(U(K)) of their time, d(K) their summed durations and w(U(K)) the summed compute of
  the ops unordered with at least one of them. Groups of a partition of the collectives
  have disjoint windows, so the makespan is at least the compute's sum plus the summed
  idle of the groups. (An op that takes longer than its floor covers more of a window, but
  adds as much to the compute's sum: the bound holds for every duration at least the one
  given, hence for an overlap slowdown and for bodies scheduled any way.) It is what proves
  an unpartitioned or expert-split MoE layer slow: its forward all-to-alls have little
  compute beside them. The groups are built greedily in topological order (a collective
  joins the group before it when that does not lower the bound).

The durations must be lower bounds of what the ops take in every schedule (a collective
whose time a later stage may change, e.g. a fused all-reduce, counts 0), and the bound holds
for every topological order, any number of communication streams (the windows bound: one),
an overlap slowdown >= 1 (compute only gets slower) and any launch overhead (it only delays).
The release bounds cost a topological sort and two sorts of the compute ops, O((V + E) log V);
the windows bound one OR per edge on C-bit integers for C collectives and a C x classes
boolean matrix (compute ops related to the same collectives form one class).

`lancet-schedule` uses it to leave out a partition candidate that cannot beat the best
schedule so far (on the 24-layer d=1024 32-rank p3dn model it proves the unpartitioned
module, Lancet's DP plan and the 2-part expert split slower than the token candidates).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lancet_mlir.graph.core import topological_order
from lancet_mlir.graph.reach import ancestor_bits_among, descendant_bits_among


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


def comm_window_floor_us(
    preds: Sequence[Sequence[int]],
    succs: Sequence[Sequence[int]],
    durations: Sequence[float],
    on_compute: Sequence[bool],
    on_comm: Sequence[bool],
) -> float:
    """No order of the graph ends sooner than this with ONE communication stream (module
    doc, communication windows): the compute of `on_compute` plus the idle the collectives
    of `on_comm` force on it. `durations`: per-node lower bounds (a collective of 0, such as
    an all-reduce that fusion may merge, is left out)."""
    n = len(preds)
    if not (len(succs) == len(durations) == len(on_compute) == len(on_comm) == n):
        raise ValueError("preds, succs, durations, on_compute and on_comm need one entry per node")
    compute = [v for v in range(n) if on_compute[v] and durations[v] > 0]
    work = float(sum(durations[v] for v in compute))
    in_program_order = all(p < v for v in range(n) for p in preds[v])
    order = range(n) if in_program_order else topological_order(preds, succs)
    comms = [v for v in order if on_comm[v] and durations[v] > 0]
    if not comms or not compute:
        return work + sum(durations[c] for c in comms)
    before = ancestor_bits_among(preds, order, comms)
    after = descendant_bits_among(succs, order, comms)
    classes: dict[int, float] = {}  # the collectives an op is ordered with -> its compute
    for v in compute:
        key = before[v] | after[v]
        classes[key] = classes.get(key, 0.0) + durations[v]
    weights = np.fromiter(classes.values(), dtype=np.float64, count=len(classes))
    width = (len(comms) + 7) // 8
    packed = np.frombuffer(b"".join(k.to_bytes(width, "little") for k in classes), np.uint8)
    ordered = np.unpackbits(packed.reshape(len(classes), width), axis=1, bitorder="little")
    ordered = ordered[:, : len(comms)].astype(bool)  # [class, k]: ordered with comms[k]
    idle = 0.0
    group_us, group_idle, covered = 0.0, 0.0, None  # covered: ordered with all of the group
    for k, c in enumerate(comms):
        related = ordered[:, k]
        alone = max(0.0, durations[c] - (work - float(weights @ related)))
        if covered is not None:
            both = covered & related
            merged = max(0.0, group_us + durations[c] - (work - float(weights @ both)))
            if merged >= group_idle + alone:
                group_us, group_idle, covered = group_us + durations[c], merged, both
                continue
            idle += group_idle
        group_us, group_idle, covered = durations[c], alone, related
    return work + idle + group_idle
