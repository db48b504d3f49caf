"""The graph core: what every graph of the project provides (`Graph`) and the one
topological order (`topological_order`).

Two graph types satisfy `Graph`: `DataflowGraph` (`graph/dataflow.py`, one block of IR and
its edges) and `Problem` (`graph/problem.py`, the same edges as plain data with per-node
durations and roles, what the optimizers, the simulator's tests and the benchmarks build).
Every algorithm that orders nodes by a priority (launch order by start time, the order
closest to a preferred one, a block order realising two stream chains) calls
`topological_order` with a `key` instead of running its own Kahn loop.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any, Protocol


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
