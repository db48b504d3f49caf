"""A provable floor under the exposed communication of every schedule of a graph.

Schedulers only reorder a block (the graph and its durations stay), so some communication
is exposed whatever the order. `exposed_comm_floor` bounds it from below with two facts of
the simulator's semantics (`sim/engine.py`: an op starts after all its producers ended, each
stream runs one op at a time):

* **Unhideable collectives.** A collective `c` such that every compute op of positive
  duration is an ancestor or a descendant of `c` never runs alongside compute: ancestors end
  before it starts, descendants start after it ends. Their time is exposed in every schedule:
  a chain of them (each reaching the next) runs one after the other, and k communication
  streams run at most k of them at once, so they expose at least
  max(longest chain, Σ / k) (`unhideable_us`).
* **Overlap capacity** (one communication stream). Then collectives run one at a time, and
  compute ops too, so the overlap of a schedule is Σ over (compute x, collective c) of the
  time both run, and exposed = Σ durations of collectives - overlap. That time is 0 unless x
  and c are unordered (neither reaches the other); at most x's time (f·d(x) under an overlap
  slowdown f) summed over all c; at most d(c) summed over all x. Moreover, x can overlap at
  most ONE collective of a *separated chain*: collectives c1, c2, ... each of which reaches
  the next through a compute op of positive duration, since that op has to run between the
  two on the one compute stream, so x would have to contain it. These bounds are the
  capacities of a flow network (source -> compute -> [compute, chain] -> collective -> sink);
  its maximum flow bounds the overlap from above, hence `floor_us` = Σ d(c) - max flow
  bounds the exposed time from below. Any split into separated chains gives a valid floor;
  the one used here is greedy per collective kind (in topological order, each collective
  joins the first chain of its kind whose last member reaches it through compute).

Compute ops with identical sets of unordered collectives are merged into one network node
(they are interchangeable), so the network has a few hundred nodes even for graphs of
thousands of ops. Reachability uses `graph/reach.py` bitsets; no O(V^2) Python sets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lancet_mlir.graph.core import Graph, topological_order
from lancet_mlir.graph.flow import max_flow
from lancet_mlir.graph.reach import ancestor_bits, bits_of, descendant_bits

MAX_NETWORK_EDGES = 2_000_000
"""Largest overlap-capacity network solved (about a minute of max flow in Python); larger
graphs get the unhideable floor alone."""


@dataclass(frozen=True)
class ExposedFloor:
    """What `exposed_comm_floor` found (all times in µs).

    `floor_us`: no schedule of the graph exposes less communication (the overlap-capacity
    bound with one communication stream, else `unhideable_us`). `unhideable`: the collectives
    that no compute op can overlap (topological order); `unhideable_us`: the floor they alone
    give. `uncovered_us[c]`: for each collective, the part of it that one maximum overlap
    assignment leaves exposed (they sum to `floor_us`; with several streams only the
    unhideable collectives are listed). `chains`: the separated chains used (one stream).
    `overlap_bound`: whether `floor_us` is the overlap-capacity bound (else the unhideable one).
    """

    floor_us: float
    unhideable: list[int]
    unhideable_us: float
    uncovered_us: dict[int, float]
    chains: list[list[int]]
    overlap_bound: bool


def exposed_comm_floor(
    graph: Graph,
    durations: Sequence[float],
    num_comm_streams: int = 1,
    overlap_slowdown: float = 1.0,
    max_edges: int = MAX_NETWORK_EDGES,
) -> ExposedFloor:
    """A lower bound on the exposed communication of every order of `graph` (module doc).

    The overlap-capacity bound is skipped (`overlap_bound` False, the floor is then the
    unhideable one) with several communication streams and when its network would have more
    than `max_edges` edges."""
    n = len(graph.preds)
    if len(durations) != n:
        raise ValueError(f"{len(durations)} durations for a graph of {n} ops")
    if num_comm_streams < 1:
        raise ValueError(f"num_comm_streams must be >= 1, got {num_comm_streams}")
    if not overlap_slowdown >= 1.0:
        raise ValueError(f"overlap_slowdown must be >= 1.0, got {overlap_slowdown}")
    order = topological_order(graph.preds, graph.succs)
    anc = ancestor_bits(graph.preds, order)
    desc = descendant_bits(graph.succs, order)
    work = 0  # compute ops that take time: the only ones that can hide a collective
    for v in range(n):
        if not graph.is_comm[v] and durations[v] > 0:
            work |= 1 << v
    comms = [v for v in order if graph.is_comm[v] and durations[v] > 0]
    free = {c: work & ~(anc[c] | desc[c]) for c in comms}
    unhideable = [c for c in comms if not free[c]]
    alone = _unhideable_bound(unhideable, anc, durations, num_comm_streams)
    if num_comm_streams > 1:
        return ExposedFloor(
            alone, unhideable, alone, {c: durations[c] for c in unhideable}, [], False
        )
    chains = separated_chains(comms, graph.comm_kind, anc, desc, work)
    uncovered = _overlap_capacity(comms, free, chains, work, durations, overlap_slowdown, max_edges)
    if uncovered is None:
        return ExposedFloor(
            alone, unhideable, alone, {c: durations[c] for c in unhideable}, chains, False
        )
    floor = max(sum(uncovered.values()), alone)
    return ExposedFloor(floor, unhideable, alone, uncovered, chains, True)


def _unhideable_bound(
    unhideable: list[int], anc: list[int], durations: Sequence[float], k: int
) -> float:
    """max(longest chain by duration, Σ / k) over the unhideable collectives."""
    longest: dict[int, float] = {}
    for c in unhideable:  # topological order: every chain predecessor is already done
        before = max((longest[p] for p in unhideable if anc[c] >> p & 1), default=0.0)
        longest[c] = before + durations[c]
    total = sum(durations[c] for c in unhideable)
    return max(max(longest.values(), default=0.0), total / k)


def separated_chains(
    comms: Sequence[int],
    comm_kind: Sequence[str | None],
    anc: Sequence[int],
    desc: Sequence[int],
    work: int,
) -> list[list[int]]:
    """Split `comms` (topological order) into chains in which each member reaches the next
    through a compute op of `work` (greedy per kind: first chain whose last member fits)."""
    chains: list[list[int]] = []
    for c in comms:
        for chain in chains:
            last = chain[-1]
            if comm_kind[last] == comm_kind[c] and desc[last] & anc[c] & work:
                chain.append(c)
                break
        else:
            chains.append([c])
    return chains


def _overlap_capacity(
    comms: list[int],
    free: dict[int, int],
    chains: list[list[int]],
    work: int,
    durations: Sequence[float],
    slowdown: float,
    max_edges: int,
) -> dict[int, float] | None:
    """Per collective, its duration minus the overlap a maximum flow assigns to it; None if
    the network would have more than `max_edges` edges."""
    classes = [work] if work else []
    for free_set in dict.fromkeys(free[c] for c in comms if free[c]):
        # refine: the members of a class are unordered with the same collectives
        refined: list[int] = []
        for members in classes:
            inside, outside = members & free_set, members & ~free_set
            refined += [m for m in (inside, outside) if m]
        classes = refined
    # a class lies inside or outside each free set: test one member's bit, O(1) on bytes
    width = (len(durations) + 7) // 8
    free_bytes = {c: free[c].to_bytes(width, "little") for c in comms}
    representative = [(m & -m).bit_length() - 1 for m in classes]
    neighbours = [
        [c for c in comms if free_bytes[c][r >> 3] >> (r & 7) & 1] for r in representative
    ]
    if sum(len(ns) for ns in neighbours) + len(classes) + len(comms) > max_edges:
        return None
    chain_of = {c: k for k, chain in enumerate(chains) for c in chain}
    comm_node = {c: 2 + k for k, c in enumerate(comms)}
    source, sink, next_node = 0, 1, 2 + len(comms)
    edges: list[tuple[int, int, float]] = []
    for members, targets_of_class in zip(classes, neighbours, strict=True):
        times = [slowdown * durations[x] for x in bits_of(members)]
        cls = next_node
        next_node += 1
        edges.append((source, cls, sum(times)))
        by_chain: dict[int, list[int]] = {}
        for c in targets_of_class:
            by_chain.setdefault(chain_of[c], []).append(c)
        for targets in by_chain.values():
            if len(targets) == 1:
                edges.append((cls, comm_node[targets[0]], float("inf")))
                continue
            widest = max(durations[c] for c in targets)
            via = next_node
            next_node += 1
            edges.append((cls, via, sum(min(t, widest) for t in times)))
            edges += [(via, comm_node[c], float("inf")) for c in targets]
    first_sink_edge = len(edges)
    edges += [(comm_node[c], sink, float(durations[c])) for c in comms]
    flow = max_flow(next_node, edges, source, sink)
    return {
        c: max(0.0, durations[c] - flow.edge_flow[first_sink_edge + k]) for k, c in enumerate(comms)
    }
