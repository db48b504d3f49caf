"""Lancet's FIFO launch order (lancet-algorithms.md §2), made deterministic."""

from __future__ import annotations

from collections import deque

from lancet_mlir.graph.dataflow import DataflowGraph


def fifo_order(graph: DataflowGraph) -> list[int]:
    """Topological order that postpones direct consumers of collectives.

    Two FIFO queues: `ready` and `comm_succ` (ops that consume a collective's result).
    The initially ready ops enter `ready` in program order; ops that become ready when an
    op is emitted enter in program order too. `ready` is drained completely (including ops
    appended meanwhile), then `comm_succ` is drained completely, and so on. Compute launched
    before a collective's consumers can then overlap the collective.
    """
    n = len(graph)
    consumes_comm = [any(graph.is_comm[p] for p in ps) for ps in graph.preds]
    indeg = [len(ps) for ps in graph.preds]
    ready: deque[int] = deque(i for i in range(n) if indeg[i] == 0)
    comm_succ: deque[int] = deque()
    order: list[int] = []

    def emit(i: int) -> None:
        order.append(i)
        for s in graph.succs[i]:  # sorted: program order
            indeg[s] -= 1
            if indeg[s] == 0:
                (comm_succ if consumes_comm[s] else ready).append(s)

    while ready or comm_succ:
        while ready:
            emit(ready.popleft())
        while comm_succ:
            emit(comm_succ.popleft())
    if len(order) != n:
        raise ValueError("dataflow graph has a cycle")
    return order
