"""`Problem`: one block's scheduling problem as plain data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

A2A_KINDS = frozenset({"all_to_all", "all_to_allv"})
"""Collective kinds whose windows dW computation can fill (the MoE exchanges)."""


@dataclass
class Problem:
    """A DAG with per-node durations (µs), collective kinds and optional roles.

    `comm_kind[v]` is the collective kind (`allreduce`, `all_to_all`, ...) or None for
    compute; `role[v]` the op's `lancet.role` (`fwd`, `dx`, `dw`, `update`) or None. The
    field names match what `lancet_mlir.sim` reads, so a Problem is also a simulator graph.
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
        if not (len(self.succs) == len(self.comm_kind) == len(self.durations) == len(self.role) == n):
            raise ValueError("problem lists differ in length")
        self.is_comm = [k is not None for k in self.comm_kind]

    @classmethod
    def from_edges(
        cls,
        durations: Sequence[float],
        edges: Sequence[tuple[int, int]],
        comm: dict[int, str] | None = None,
        role: dict[int, str] | None = None,
    ) -> Problem:
        """Build from (producer, consumer) pairs; `comm` maps collectives to their kind."""
        n = len(durations)
        preds: list[set[int]] = [set() for _ in range(n)]
        for p, c in edges:
            preds[c].add(p)
        pred_lists = [sorted(s) for s in preds]
        succs: list[list[int]] = [[] for _ in range(n)]
        for c, ps in enumerate(pred_lists):
            for p in ps:
                succs[p].append(c)
        kinds: list[str | None] = [None] * n
        for v, k in (comm or {}).items():
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
        return self.comm_kind[v] == "allreduce"
