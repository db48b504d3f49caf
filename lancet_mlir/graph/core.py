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
from lancet_mlir.dialects.vocab import CollectiveKind, CopyQueue

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

    The node flags the simulator treats specially (sim/engine.py), None when no node has
    them (every generated model): `copy_queue[v]` the `CopyQueue` of a memcpy / memset (0:
    no copy; `graph.dataflow.copy_queue`), `is_host_sync[v]` a host sync and `is_virtual[v]`
    a virtual node (`trace.payload`). `node_flags(problem)` hands them to the engine. Built
    from the `DataflowGraph` where a block's problem is made (`passes.scheduling.block_problem`).

    Derived once: `stream[v]`, the node's stream in the schedulers' internal model (one
    communication stream): 0 compute, 1 communication, 2 + r the r-th copy queue some node
    uses (in queue order, as the engine numbers its copy streams k + 1 + r with k = 1), -1
    a stream-less node (a host sync or a virtual node: zero cost, no stream);
    `num_streams` = 2 + the copy queues used; `streamless` the stream-less nodes. A
    stream-less node costs nothing: its duration is taken as 0 (the engine ignores it).
    """

    preds: list[list[int]]
    succs: list[list[int]]
    comm_kind: list[str | None]
    durations: list[float]
    role: list[str | None] = field(default_factory=list)
    copy_queue: list[int] | None = None
    is_host_sync: list[bool] | None = None
    is_virtual: list[bool] | None = None
    is_comm: list[bool] = field(init=False)
    stream: list[int] = field(init=False)
    num_streams: int = field(init=False)
    streamless: list[int] = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.preds)
        if not self.role:
            self.role = [None] * n
        if not (
            len(self.succs) == len(self.comm_kind) == len(self.durations) == len(self.role) == n
        ):
            raise ValueError("problem lists differ in length")
        self.is_comm = [k is not None for k in self.comm_kind]
        # no flag set: the same as no list (every path below is the one without them)
        self.copy_queue = _some(self.copy_queue, n, "copy queues")
        self.is_host_sync = _some(self.is_host_sync, n, "host-sync flags")
        self.is_virtual = _some(self.is_virtual, n, "virtual-node flags")
        copies = self.copy_queue
        if copies is not None:
            for v, q in enumerate(copies):
                if int(q) not in _QUEUES:
                    raise ValueError(f"copy queue of node {v} must be a CopyQueue (0..3), got {q}")
                if q and self.is_comm[v]:
                    raise ValueError(f"node {v}: a collective cannot be a copy")
        queues = sorted({int(q) for q in copies if q}) if copies is not None else []
        rank = {q: 2 + r for r, q in enumerate(queues)}
        self.stream = [1 if c else 0 for c in self.is_comm]
        if copies is not None:
            for v, q in enumerate(copies):
                if q:
                    self.stream[v] = rank[int(q)]
        self.num_streams = 2 + len(queues)
        self.streamless = []
        for flags, what in (
            (self.is_host_sync, "a host sync"),
            (self.is_virtual, "a virtual node"),
        ):
            for v, f in enumerate(flags or ()):
                if f and self.stream[v] > 0:
                    raise ValueError(f"node {v}: {what} cannot be a collective or a copy")
                if f and self.stream[v] == 0:  # a host sync flagged virtual too counts once
                    self.stream[v] = -1
                    self.streamless.append(v)
        if self.streamless:
            self.streamless.sort()
            self.durations = [
                0.0 if s < 0 else d for d, s in zip(self.durations, self.stream, strict=True)
            ]

    @classmethod
    def from_edges(
        cls,
        durations: Sequence[float] | int,
        edges: Iterable[tuple[int, int]],
        comm: Iterable[int] | dict[int, str] | None = None,
        role: dict[int, str] | None = None,
        copies: Iterable[int] | dict[int, int] | None = None,
        host_syncs: Iterable[int] | None = None,
        virtual: Iterable[int] | None = None,
    ) -> Problem:
        """Build from (producer, consumer) pairs. `durations` gives one µs value per node,
        or the number of nodes (all durations 0); `comm` maps collectives to their kind (a
        plain iterable makes them allreduces); `copies` maps copies to their `CopyQueue` (a
        plain iterable: the queue of the rest), `host_syncs` and `virtual` list the host
        syncs and virtual nodes; ValueError on a self edge."""
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
        queue_map = copies if isinstance(copies, dict) else dict.fromkeys(copies or (), 1)
        queue = [0] * n
        for v, q in queue_map.items():
            queue[v] = int(q)
        syncs, virt = set(host_syncs or ()), set(virtual or ())
        return cls(
            pred_lists,
            succs,
            kinds,
            [float(d) for d in durations],
            roles,
            queue,
            [v in syncs for v in range(n)],
            [v in virt for v in range(n)],
        )

    def __len__(self) -> int:
        return len(self.preds)

    def is_a2a(self, v: int) -> bool:
        """True for all-to-all exchanges (the windows of dW scheduling)."""
        return self.comm_kind[v] in A2A_KINDS

    def is_allreduce(self, v: int) -> bool:
        """True for all-reduces (gradient synchronisation)."""
        return self.comm_kind[v] == CollectiveKind.ALLREDUCE

    def is_compute(self, v: int) -> bool:
        """True for an op of the compute stream: no collective, no copy, not stream-less."""
        return self.stream[v] == 0


_QUEUES = frozenset(int(q) for q in CopyQueue)


def _some(flags: Sequence[Any] | None, n: int, what: str) -> list[Any] | None:
    """`flags` as a list, or None when no node has the flag; ValueError on a wrong length."""
    if flags is None:
        return None
    if len(flags) != n:
        raise ValueError(f"{len(flags)} {what} for a problem of {n} nodes")
    return list(flags) if any(flags) else None


def node_flags(graph: Any, copy_stream: bool = True) -> dict[str, Any]:
    """The engine's per-node flags of a `DataflowGraph` or a `Problem` (or any graph: None
    where it has none) as keyword arguments of `sim.evaluate_fixed_order` / `list_schedule`:
    `copies` (each node's `CopyQueue`; None with `copy_stream=False`, `SimOptions.copy_stream`:
    copies then run on the compute stream), `host_syncs` and `virtual`. The one place every
    engine call of the schedulers takes them from."""
    return {
        "copies": getattr(graph, "copy_queue", None) if copy_stream else None,
        "host_syncs": getattr(graph, "is_host_sync", None),
        "virtual": getattr(graph, "is_virtual", None),
    }
