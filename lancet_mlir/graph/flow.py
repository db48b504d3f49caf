"""Maximum flow on a small directed network with real capacities (Dinic's algorithm).

Plain data: nodes are integers, edges `(tail, head, capacity)` with `capacity >= 0` (`inf`
allowed). Used by the exposed-communication floor (`sim/floor.py`), whose networks have a few
hundred nodes. Iterative (no recursion limit), deterministic (edges are tried in input order).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FlowResult:
    """The maximum flow value and the flow on each input edge (same order as the input)."""

    value: float
    edge_flow: list[float]


def max_flow(
    num_nodes: int,
    edges: Sequence[tuple[int, int, float]],
    source: int,
    sink: int,
    eps: float = 1e-9,
) -> FlowResult:
    """Maximum `source` -> `sink` flow. Residual capacities at or below `eps` count as full
    (floating-point capacities: this only ever stops augmenting early by at most `eps` per
    augmenting path)."""
    if not (0 <= source < num_nodes and 0 <= sink < num_nodes) or source == sink:
        raise ValueError("source and sink must be two distinct nodes of the network")
    head: list[int] = []
    cap: list[float] = []
    out: list[list[int]] = [[] for _ in range(num_nodes)]
    for u, v, c in edges:
        if not (c >= 0.0):
            raise ValueError(f"edge {u}->{v} has capacity {c}; capacities must be >= 0")
        out[u].append(len(head))
        head.append(v)
        cap.append(float(c))
        out[v].append(len(head))
        head.append(u)
        cap.append(0.0)
    original = list(cap)
    total = 0.0
    while True:
        level = _levels(out, head, cap, source, eps)
        if level[sink] < 0:
            break
        total += _blocking_flow(out, head, cap, level, source, sink, eps)
    flows = [original[2 * k] - cap[2 * k] for k in range(len(edges))]
    return FlowResult(total, flows)


def _levels(
    out: list[list[int]], head: list[int], cap: list[float], source: int, eps: float
) -> list[int]:
    """BFS distance from `source` in the residual network (-1: unreachable)."""
    level = [-1] * len(out)
    level[source] = 0
    queue = deque([source])
    while queue:
        u = queue.popleft()
        for e in out[u]:
            v = head[e]
            if level[v] < 0 and cap[e] > eps:
                level[v] = level[u] + 1
                queue.append(v)
    return level


def _blocking_flow(
    out: list[list[int]],
    head: list[int],
    cap: list[float],
    level: list[int],
    source: int,
    sink: int,
    eps: float,
) -> float:
    """Augment along shortest residual paths until none is left (one Dinic phase)."""
    cursor = [0] * len(out)
    pushed = 0.0
    path: list[int] = []  # edge ids from source to the current node
    u = source
    while True:
        if u == sink:
            amount = min(cap[e] for e in path)
            if math.isinf(amount):
                raise ValueError("the network has a path of infinite capacity")
            for e in path:
                cap[e] -= amount
                cap[e ^ 1] += amount
            pushed += amount
            path.clear()
            u = source
            continue
        edges_u = out[u]
        while cursor[u] < len(edges_u):
            e = edges_u[cursor[u]]
            if cap[e] > eps and level[head[e]] == level[u] + 1:
                break
            cursor[u] += 1
        if cursor[u] < len(edges_u):
            e = edges_u[cursor[u]]
            path.append(e)
            u = head[e]
            continue
        if u == source:
            return pushed
        level[u] = -1  # dead end: never enter it again in this phase
        e = path.pop()
        u = head[e ^ 1]
        cursor[u] += 1
