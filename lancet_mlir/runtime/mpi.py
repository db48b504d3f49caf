"""Multi-rank execution on MPI: one rank per process, collectives through mpi4py.

mpi4py is imported only when a program runs as one of several MPI ranks (`in_mpi_job`), so
the rest of the runtime works without an MPI library.

Fault handling (no rank ever waits forever on a rank that failed):

* every collective step and the end of a run are preceded by an *agreement*: an allgather
  of "ok" or the rank's error message over the world communicator. A rank that fails between
  two agreements skips to the next one with its message; then every rank raises `RankFailure`
  naming the lowest failing rank, and the tools exit non-zero (rank 0 prints the one line);
* an exception inside the MPI calls themselves (after the agreement) prints one line
  `tool: error: rank R: ...` and calls `Abort` on the world communicator.

Sub-communicators for `groups` are created once, before the run, by `Comm.Split` with color
= the index of the rank's group and key = the rank's position in that group, so the group
rank order is the order written in the op.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

import numpy as np

from lancet_mlir.dialects.comm import AllToAllOp, AllToAllVOp, CollectiveOp, ReduceScatterOp
from lancet_mlir.dialects.vocab import CollectiveKind
from lancet_mlir.runtime.collectives import (
    CollectiveError,
    check_counts,
    finish_average,
    op_label,
    reduce_arrays,
    reduction_of,
    resolve_groups,
    valid_rows,
)
from lancet_mlir.support.errors import AgreedError
from lancet_mlir.support.mpi_job import fault_point
from lancet_mlir.support.mpi_job import world_comm as world_comm  # re-exported for the tools

# dtypes MPI reduces natively; other dtypes (f16, bool, ...) are gathered and reduced locally
_TYPED_REDUCE = {np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64)}


class RankFailure(AgreedError):
    """A rank failed; every rank raises this after the agreement that detected it."""

    def __init__(self, rank: int, message: str):
        super().__init__(f"rank {rank}: {message}")
        self.rank = rank
        self.message = message


def agree(comm: Any, error: str | None) -> None:
    """Allgather every rank's error (None when fine); raise RankFailure for the lowest failure."""
    errors = comm.allgather(error)
    for rank, message in enumerate(errors):
        if message is not None:
            raise RankFailure(rank, message)


def abort(comm: Any, tool: str, message: str) -> NoReturn:
    """Print `tool: error: rank R: message` and abort every rank."""
    sys.stderr.write(f"{tool}: error: rank {comm.Get_rank()}: {message}\n")
    sys.stderr.flush()
    comm.Abort(1)
    raise SystemExit(1)  # not reached: Abort ends the process


class MpiCollectives:
    """Runs collectives of one rank with mpi4py; see the module doc for fault handling."""

    def __init__(self, comm: Any, tool: str = "lancet-run"):
        self.comm = comm
        self.rank: int = comm.Get_rank()
        self.world_size: int = comm.Get_size()
        self.tool = tool
        self._subcomms: dict[tuple[tuple[int, ...], ...], tuple[Any, int]] = {}

    @property
    def local_ranks(self) -> tuple[int, ...]:
        """The ranks this process executes: only its own."""
        return (self.rank,)

    # ---- setup ----------------------------------------------------------------------------
    def prepare(self, ops: Iterable[CollectiveOp]) -> None:
        """Create the sub-communicators of every distinct `groups` (first-use order)."""
        for op in ops:
            groups = resolve_groups(op, self.world_size)
            if groups in self._subcomms:
                continue
            color, key = _position(groups, self.rank)
            if groups == (tuple(range(self.world_size)),):
                self._subcomms[groups] = (self.comm, key)
                continue
            self._subcomms[groups] = (self.comm.Split(color, key), key)

    def group_comm(self, op: CollectiveOp) -> tuple[Any, int]:
        """(communicator, my position) for the op's group."""
        groups = resolve_groups(op, self.world_size)
        if groups not in self._subcomms:
            raise CollectiveError(f"{op_label(op)}: groups were not prepared")
        return self._subcomms[groups]

    # ---- running ------------------------------------------------------------------------------
    def run(
        self, op: CollectiveOp, per_rank: Sequence[Sequence[np.ndarray]]
    ) -> list[list[np.ndarray]]:
        """Results of `op` for this rank (`per_rank` holds this rank's operands only)."""
        (inputs,) = per_rank
        gc, me = self.group_comm(op)
        self._check_local(op, inputs, gc.Get_size())
        fault_point("collective")
        agree(self.comm, None)
        try:
            return [self._exchange(op, gc, list(inputs))]
        except Exception as exc:  # noqa: BLE001 - peers are inside MPI calls: abort them all
            abort(self.comm, self.tool, f"{op_label(op)}: {exc}")

    def fail(self, message: str) -> NoReturn:
        """Report this rank's failure at the next agreement (raises RankFailure)."""
        agree(self.comm, message)
        raise RankFailure(self.rank, message)  # not reached: agree raised

    def finish(self) -> None:
        """The closing agreement of a successful run."""
        agree(self.comm, None)

    # ---- per-kind exchange ---------------------------------------------------------------------
    def _check_local(self, op: CollectiveOp, inputs: Sequence[np.ndarray], size: int) -> None:
        """Checks that need no communication (so a bad value fails before the exchange)."""
        if isinstance(op, AllToAllVOp):
            half = len(inputs) // 2
            for n in range(half):
                check_counts(inputs[n], inputs[half + n], size)
            return
        for x in inputs:
            axes = op.axes()
            for axis in axes:
                if not 0 <= axis < x.ndim:
                    raise CollectiveError(f"{op_label(op)}: axis {axis} out of range for {x.shape}")
            if isinstance(op, ReduceScatterOp | AllToAllOp) and x.shape[axes[0]] % size:
                raise CollectiveError(
                    f"{op_label(op)}: dim {axes[0]} of shape {x.shape} is not divisible by the "
                    f"group size {size}"
                )

    def _exchange(self, op: CollectiveOp, gc: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
        run = EXCHANGES.get(op.KIND)
        if run is None:
            raise CollectiveError(f"{op_label(op)}: unsupported collective")
        return run(op, gc, inputs)


def _position(groups: Sequence[Sequence[int]], rank: int) -> tuple[int, int]:
    for color, group in enumerate(groups):
        if rank in group:
            return color, list(group).index(rank)
    raise CollectiveError(f"rank {rank} is in no group")


def _mpi_op(reduction: str) -> Any:
    from mpi4py import MPI

    return {"sum": MPI.SUM, "avg": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}[
        reduction
    ]


def _bytes(x: np.ndarray) -> np.ndarray:
    """A flat uint8 view of a C-contiguous copy of `x` (data movement is dtype-agnostic)."""
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


def _gather_all(gc: Any, x: np.ndarray) -> list[np.ndarray]:
    """Every member's array, in group order."""
    size = gc.Get_size()
    send = _bytes(x)
    recv = np.empty(size * send.size, dtype=np.uint8)
    gc.Allgather(send, recv)
    parts = recv.view(x.dtype).reshape(size, *x.shape)
    return [parts[i] for i in range(size)]


def _allreduce(gc: Any, x: np.ndarray, reduction: str) -> np.ndarray:
    if x.dtype not in _TYPED_REDUCE:
        return reduce_arrays(_gather_all(gc, x), reduction)
    send = np.ascontiguousarray(x)
    recv = np.empty_like(send)
    gc.Allreduce(send, recv, op=_mpi_op(reduction))
    return finish_average(recv, gc.Get_size()) if reduction == "avg" else recv


def _allgather(gc: Any, x: np.ndarray, axis: int) -> np.ndarray:
    return np.concatenate(_gather_all(gc, x), axis=axis)


def _reduce_scatter(gc: Any, x: np.ndarray, reduction: str, axis: int) -> np.ndarray:
    size, me = gc.Get_size(), gc.Get_rank()
    if x.dtype not in _TYPED_REDUCE:
        total = reduce_arrays(_gather_all(gc, x), reduction)
        return np.ascontiguousarray(np.split(total, size, axis=axis)[me])
    moved = np.ascontiguousarray(np.moveaxis(x, axis, 0))  # chunk i = rows block i
    recv = np.empty((moved.shape[0] // size, *moved.shape[1:]), dtype=x.dtype)
    gc.Reduce_scatter_block(moved, recv, op=_mpi_op(reduction))
    if reduction == "avg":
        recv = finish_average(recv, size)
    return np.ascontiguousarray(np.moveaxis(recv, 0, axis))


def _alltoall(gc: Any, x: np.ndarray, split: int, concat: int) -> np.ndarray:
    size = gc.Get_size()
    chunks = np.split(x, size, axis=split)
    send = np.ascontiguousarray(np.stack(chunks)).reshape(size, -1).view(np.uint8)
    recv = np.empty_like(send)
    gc.Alltoall(send, recv)
    parts = recv.reshape(-1).view(x.dtype).reshape(size, *chunks[0].shape)
    return np.concatenate([parts[j] for j in range(size)], axis=concat)


def _alltoallv(gc: Any, data: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exchange the count tensors, then move only the valid rows (packed, in index order)."""
    from mpi4py import MPI

    size, axis = gc.Get_size(), counts.ndim
    send_counts = np.ascontiguousarray(counts.astype(np.int64))
    recv_counts = np.empty_like(send_counts)
    gc.Alltoall(send_counts.reshape(size, -1), recv_counts.reshape(size, -1))
    if data.size == 0:  # nothing to move (a zero-sized dim): only the counts travel
        return np.zeros_like(data), recv_counts.astype(counts.dtype)
    # view the data as [G, K, R, row bytes]: K = the count index after G, R = the row axis
    rows = data.shape[axis]
    row = int(np.prod(data.shape[axis + 1 :], dtype=np.int64)) * data.dtype.itemsize
    blocks = _bytes(data).reshape(size, -1, rows, row)
    send_mask = valid_rows(blocks[..., 0], send_counts.reshape(size, -1))
    recv_mask = valid_rows(blocks[..., 0], recv_counts.reshape(size, -1))
    send = np.ascontiguousarray(blocks[send_mask]).reshape(-1)  # rows of chunk 0, then 1, ...
    send_sizes = send_counts.reshape(size, -1).sum(axis=1) * row
    recv_sizes = recv_counts.reshape(size, -1).sum(axis=1) * row
    recv = np.empty(int(recv_sizes.sum()), dtype=np.uint8)
    gc.Alltoallv(
        [send, (_ints(send_sizes), _ints(_starts(send_sizes))), MPI.BYTE],
        [recv, (_ints(recv_sizes), _ints(_starts(recv_sizes))), MPI.BYTE],
    )
    out = np.zeros_like(blocks)
    out[recv_mask] = recv.reshape(-1, row)
    return out.reshape(-1).view(data.dtype).reshape(data.shape), recv_counts.astype(counts.dtype)


def _starts(sizes: np.ndarray) -> np.ndarray:
    """Displacements of consecutive blocks of the given sizes."""
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


def _ints(values: np.ndarray) -> list[int]:
    return [int(v) for v in values]


def _alltoallv_all(op: CollectiveOp, gc: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    half = len(inputs) // 2
    outs: list[np.ndarray] = list(inputs)
    for n in range(half):
        outs[n], outs[half + n] = _alltoallv(gc, inputs[n], inputs[half + n])
    return outs


Exchange = Callable[[CollectiveOp, Any, list[np.ndarray]], list[np.ndarray]]
"""An MPI implementation: (op, the group's communicator, this rank's operands) -> results."""

EXCHANGES: dict[CollectiveKind, Exchange] = {
    CollectiveKind.ALLREDUCE: lambda op, gc, xs: [_allreduce(gc, x, reduction_of(op)) for x in xs],
    CollectiveKind.ALLGATHER: lambda op, gc, xs: [_allgather(gc, x, *op.axes()) for x in xs],
    CollectiveKind.REDUCE_SCATTER: lambda op, gc, xs: [
        _reduce_scatter(gc, x, reduction_of(op), *op.axes()) for x in xs
    ],
    CollectiveKind.ALL_TO_ALL: lambda op, gc, xs: [_alltoall(gc, x, *op.axes()) for x in xs],
    CollectiveKind.ALL_TO_ALLV: _alltoallv_all,
}
"""The MPI implementation of every collective kind of the registry (`dialects/collectives.py`;
runtime/collectives.py holds the simulated ones)."""
