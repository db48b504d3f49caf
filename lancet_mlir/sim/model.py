"""The simulator's data model: the simulated execution of a block (`Timeline`). What a graph
must provide is `graph.core.Graph` (`DataflowGraph` and the plain `graph.core.Problem` do).

Streams: stream 0 is the compute stream (`COMPUTE_STREAM`); collectives run on the
communication streams 1..k; memcpy / memset ops, where a block has them, on the copy-engine
streams k + 1.. (`Timeline.copy_stream`, one per copy queue used: `Timeline.copy_queues`); a
host sync runs on no stream (`HOST_STREAM`). **Launch order** (`Timeline.order`): all ops sorted by start time;
at equal start compute before communication; then by launch sequence (the order in which the
simulator launched them; for a fixed-order evaluation, the block order). A zero-duration
collective and its compute consumer can start at the same instant: then the producer still
comes first (the order is always a topological order of the data and stream-order edges).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from lancet_mlir.dialects.vocab import CopyQueue
from lancet_mlir.graph.core import topological_order

COMPUTE_STREAM = 0
"""Stream id of the compute stream; communication streams are 1..k."""
HOST_STREAM = -1
"""`Timeline.stream` of a host sync: it takes no GPU stream and is in no chain."""


@dataclass
class Timeline:
    """The simulated execution of one block.

    Lists are indexed by node: `start`/`end` in µs, `stream` (0 compute, 1..k comm, k + 1..
    the copy engines, `HOST_STREAM` for a host sync) and `launch_seq` (the order in which the simulator launched the ops). `chains[s]` is the
    launch order on stream s. `order` is the total launch order (see the module docstring).
    """

    start: list[float]
    end: list[float]
    stream: list[int]
    launch_seq: list[int]
    chains: list[list[int]]
    makespan_us: float
    num_comm_streams: int = 1
    overlap_slowdown: float = 1.0
    preds: list[list[int]] = field(default_factory=list, repr=False, compare=False)
    copy_stream: int | None = None
    """Stream id of the first copy engine (k + 1) when the block has memcpy / memset ops
    (sim/engine.py "Copy engines"), else None: then `chains` has k + 1 entries."""
    copy_queues: tuple[int, ...] = ()
    """The `CopyQueue` of each copy stream k + 1, k + 2, ... (one per queue the block uses)."""

    def stream_label(self, s: int) -> str:
        """Display name of stream `s`: "compute", "comm <k>", "copy", "copy HtoD", ..."""
        if self.copy_stream is not None and s >= self.copy_stream:
            queues = self.copy_queues or (CopyQueue.OTHER,)
            return CopyQueue(queues[s - self.copy_stream]).label
        if s == HOST_STREAM:
            return "host"
        return "compute" if s == COMPUTE_STREAM else f"comm {s}"

    def __len__(self) -> int:
        return len(self.start)

    @cached_property
    def order(self) -> list[int]:
        """Total launch order: by start, compute before comm, then launch sequence."""
        n = len(self.start)
        key = [(self.start[i], self.stream[i] > 0, self.launch_seq[i]) for i in range(n)]
        order = sorted(range(n), key=key.__getitem__)
        if self._respects_edges(order):
            return order
        return self._topological_by_key(key)

    def chain_pred(self) -> list[int]:
        """For each node, the op launched just before it on its stream (-1 if first)."""
        prev = [-1] * len(self.start)
        for chain in self.chains:
            for a, b in zip(chain, chain[1:], strict=False):
                prev[b] = a
        return prev

    def _respects_edges(self, order: Sequence[int]) -> bool:
        position = [0] * len(order)
        for k, i in enumerate(order):
            position[i] = k
        for chain in self.chains:
            if any(position[a] > position[b] for a, b in zip(chain, chain[1:], strict=False)):
                return False
        return all(position[p] < position[i] for i, ps in enumerate(self.preds) for p in ps)

    def _topological_by_key(self, key: list[tuple[float, bool, int]]) -> list[int]:
        # Only reached when zero-duration ops of different streams tie at one instant.
        n = len(key)
        preds = self.preds or [[] for _ in range(n)]
        succs: list[list[int]] = [[] for _ in range(n)]
        for i, ps in enumerate(preds):
            for p in ps:
                succs[p].append(i)
        return topological_order(preds, succs, key, self.chains)
