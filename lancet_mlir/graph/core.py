"""The graph core: what every graph of the project provides (`Graph`) and the one
topological order (`topological_order`).

Two graph types satisfy `Graph`: `DataflowGraph` (`graph/dataflow.py`, one block of IR and
its edges) and `Problem` (here: the same edges as plain data with per-node durations and
roles; what the optimizers, the simulator's tests and the benchmarks build).
Every algorithm that orders nodes by a priority (launch order by start time, the order
closest to a preferred one, a block order realising two stream chains) calls
`topological_order` with a `key` instead of running its own Kahn loop.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from lancet_mlir.dialects.collectives import exchange_kinds
from lancet_mlir.dialects.vocab import CollectiveKind

A2A_KINDS = exchange_kinds()
"""Collective kinds whose windows dW computation can fill (the MoE exchanges: the collective
registry's exchange kinds)."""


class Graph(Protocol):
    """What the simulator and the optimizers read from a graph: per-node sorted,
    duplicate-free producer/consumer lists, comm flags and collective kinds (`comm_kind[i]`:
    `allreduce`, `all_to_all`, ..., None for compute). `DataflowGraph` and `Problem` have
    these fields."""

    preds: list[list[int]]
    succs: list[list[int]]
    is_comm: list[bool]
    comm_kind: list[str | None]


def topological_order(
    preds: Sequence[Sequence[int]],
    succs: Sequence[Sequence[int]],
    key: Sequence[Any] | None = None,
    chains: Sequence[Sequence[int]] = (),
) -> list[int]:
    """Kahn's algorithm: among the ready nodes, the one with the smallest `(key[v], v)` goes
    first (without `key`, the smallest node index: the identity for a program-order graph).

    `chains` adds ordering edges: consecutive members of each chain (a stream's launch
    order) keep their order; a node belongs to at most one chain. O((V + E) log V).
    Raises ValueError("graph has a cycle") when the edges form a cycle.
    """
    n = len(preds)
    indeg = [len(ps) for ps in preds]
    nxt: list[int] | None = None
    if chains:
        nxt = [-1] * n
        for chain in chains:
            for a, b in zip(chain, chain[1:], strict=False):
                nxt[a] = b
                indeg[b] += 1
    order: list[int] = []
    if key is None:
        ready = [v for v in range(n) if indeg[v] == 0]
        heapq.heapify(ready)
        while ready:
            v = heapq.heappop(ready)
            order.append(v)
            for s in succs[v]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, s)
            if nxt is not None and nxt[v] >= 0:
                s = nxt[v]
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, s)
    else:
        heap = [(key[v], v) for v in range(n) if indeg[v] == 0]
        heapq.heapify(heap)
        while heap:
            v = heapq.heappop(heap)[1]
            order.append(v)
            for s in succs[v]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, (key[s], s))
            if nxt is not None and nxt[v] >= 0:
                s = nxt[v]
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, (key[s], s))
    if len(order) != n:
        raise ValueError("graph has a cycle")
    return order


@dataclass
class Problem:
    """A DAG as plain data with per-node durations (µs), collective kinds and optional roles.

    `comm_kind[v]` is the collective kind (`allreduce`, `all_to_all`, ...) or None for
    compute; `role[v]` the op's `lancet.role` (`fwd`, `dx`, `dw`, `update`) or None.
    """

    preds: list[list[int]]
    succs: list[list[int]]
    comm_kind: list[str | None]
    durations: list[float]
    role: list[str | None] = field(default_factory=list)
    is_comm: list[bool] = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.preds)
        if not self.role:
            self.role = [None] * n
        if not (
            len(self.succs) == len(self.comm_kind) == len(self.durations) == len(self.role) == n
        ):
            raise ValueError("problem lists differ in length")
        self.is_comm = [k is not None for k in self.comm_kind]

    @classmethod
    def from_edges(
        cls,
        durations: Sequence[float] | int,
        edges: Iterable[tuple[int, int]],
        comm: Iterable[int] | dict[int, str] | None = None,
        role: dict[int, str] | None = None,
    ) -> Problem:
        """Build from (producer, consumer) pairs. `durations` gives one µs value per node,
        or the number of nodes (all durations 0); `comm` maps collectives to their kind (a
        plain iterable makes them allreduces); ValueError on a self edge."""
        if isinstance(durations, int):
            durations = [0.0] * durations
        n = len(durations)
        preds: list[set[int]] = [set() for _ in range(n)]
        for p, c in edges:
            if p == c:
                raise ValueError(f"self edge on node {p}")
            preds[c].add(p)
        pred_lists = [sorted(s) for s in preds]
        succs: list[list[int]] = [[] for _ in range(n)]
        for c, ps in enumerate(pred_lists):
            for p in ps:
                succs[p].append(c)
        kinds: list[str | None] = [None] * n
        comm_map = (
            comm if isinstance(comm, dict) else dict.fromkeys(comm or (), CollectiveKind.ALLREDUCE)
        )
        for v, k in comm_map.items():
            kinds[v] = k
        roles: list[str | None] = [None] * n
        for v, r in (role or {}).items():
            roles[v] = r
        return cls(pred_lists, succs, kinds, [float(d) for d in durations], roles)

    def __len__(self) -> int:
        return len(self.preds)

    def is_a2a(self, v: int) -> bool:
        """True for all-to-all exchanges (the windows of dW scheduling)."""
        return self.comm_kind[v] in A2A_KINDS

    def is_allreduce(self, v: int) -> bool:
        """True for all-reduces (gradient synchronisation)."""
        return self.comm_kind[v] == CollectiveKind.ALLREDUCE
