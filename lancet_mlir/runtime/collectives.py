"""Reference semantics of the `comm` collectives on numpy arrays (simulated ranks).

Every function takes the arrays of the members of one group, in group order (the order
the ranks are written in the op's `groups`, rank order for the default all-ranks group), and
returns the members' results in the same order. The MPI back-end computes the same values
with real MPI calls; these functions are the definition it is tested against.

* `allreduce` reduces element-wise in group order: sum, prod, max, min, or avg (the sum
  divided by the group size; integer tensors use floor division, and i1 the floor of the
  mean of 0/1: True where every member holds True).
* `allgather` concatenates the members' tensors along `axis`.
* `reduce_scatter` reduces like allreduce, splits the result into group-size equal chunks
  along `axis` and gives member i chunk i.
* `all_to_all` splits each member's tensor into group-size chunks along `split_axis`,
  sends chunk j to member j, and concatenates what member i receives along `concat_axis`
  in group order.
* `all_to_allv` sends the first `counts[j]` rows of chunk j of a `[G, C, ...]` tensor to
  member j; member i's chunk j holds the rows received from member j, zero padded to C, and
  its count tensor says how many there are. Counts may also have shape `data.shape[:r]`
  (1 <= r < data rank): `counts[j, i1, ..]` rows along axis r of `data[j, i1, ..]` move.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from xdsl.ir import Operation

from lancet_mlir.dialects.comm import AllReduceOp, CollectiveOp, ReduceScatterOp
from lancet_mlir.dialects.vocab import CollectiveKind

REDUCTIONS = ("sum", "prod", "max", "min", "avg")

_BINARY = {"sum": np.add, "avg": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


class CollectiveError(ValueError):
    """A collective cannot run on the given values (bad counts, indivisible dims, ...)."""


def op_label(op: Operation) -> str:
    """`name %result` for messages (the first result's name if it has one)."""
    from lancet_mlir.graph.dataflow import op_display_name

    hints = [r.name_hint for r in op.results if r.name_hint]
    return f"{op_display_name(op)} %{hints[0]}" if hints else op_display_name(op)


# ---- groups ----------------------------------------------------------------------------------


def resolve_groups(op: CollectiveOp, world_size: int) -> tuple[tuple[int, ...], ...]:
    """The op's groups, checked against the world: every rank in exactly one group."""
    if op.groups is None:
        return (tuple(range(world_size)),)
    groups = op.groups.rank_lists
    flat = sorted(r for g in groups for r in g)
    if flat != list(range(world_size)):
        bad = [r for r in flat if r >= world_size]
        if bad:
            raise CollectiveError(
                f"{op_label(op)}: group rank {bad[0]} is outside the world of {world_size} ranks"
            )
        missing = sorted(set(range(world_size)) - set(flat))
        raise CollectiveError(
            f"{op_label(op)}: rank {missing[0]} is in no group (groups must cover all "
            f"{world_size} ranks)"
        )
    return groups


def reduction_of(op: CollectiveOp) -> str:
    """The reduction name of an allreduce/reduce_scatter ('sum' for other kinds)."""
    if isinstance(op, AllReduceOp | ReduceScatterOp):
        return str(op.reduction.data.value)
    return "sum"


# ---- per-kind reference implementations --------------------------------------------------------


def finish_average(total: np.ndarray, size: int) -> np.ndarray:
    """The group average from the group sum (floor division for integer tensors)."""
    if total.dtype.kind in "iub":
        return (total // size).astype(total.dtype)
    return (total / total.dtype.type(size)).astype(total.dtype)


def reduce_arrays(arrays: Sequence[np.ndarray], reduction: str) -> np.ndarray:
    """Element-wise reduction of equally shaped arrays, left to right in the given order."""
    if reduction not in _BINARY:
        raise CollectiveError(f"unknown reduction '{reduction}'")
    _same_shapes(arrays)
    if reduction == "avg" and np.asarray(arrays[0]).dtype.kind == "b":
        # i1: the floor of the mean of 0/1, True where every member holds True (np.add of
        # booleans is `or`, and True // 2 was False where every rank held True)
        count = sum(np.asarray(a, dtype=np.int64) for a in arrays)
        return np.asarray(count // len(arrays)).astype(np.bool_)
    fn = _BINARY[reduction]
    acc = np.array(arrays[0], copy=True)
    for a in arrays[1:]:
        acc = fn(acc, a).astype(acc.dtype)
    return finish_average(acc, len(arrays)) if reduction == "avg" else acc


def allreduce(arrays: Sequence[np.ndarray], reduction: str) -> list[np.ndarray]:
    """Every member gets the reduction of all members' arrays."""
    total = reduce_arrays(arrays, reduction)
    return [total.copy() for _ in arrays]


def allgather(arrays: Sequence[np.ndarray], axis: int) -> list[np.ndarray]:
    """Every member gets the members' arrays concatenated along `axis`."""
    _same_shapes(arrays)
    _check_axis(arrays[0], axis)
    total = np.concatenate(list(arrays), axis=axis)
    return [total.copy() for _ in arrays]


def reduce_scatter(arrays: Sequence[np.ndarray], reduction: str, axis: int) -> list[np.ndarray]:
    """Member i gets chunk i (along `axis`) of the reduction of all members' arrays."""
    _check_axis(arrays[0], axis)
    _check_divisible(arrays[0], axis, len(arrays))
    total = reduce_arrays(arrays, reduction)
    return [np.ascontiguousarray(c) for c in np.split(total, len(arrays), axis=axis)]


def all_to_all(arrays: Sequence[np.ndarray], split_axis: int, concat_axis: int) -> list[np.ndarray]:
    """Member i gets chunk i of every member (split along `split_axis`), concatenated along
    `concat_axis` in group order."""
    _same_shapes(arrays)
    _check_axis(arrays[0], split_axis)
    _check_axis(arrays[0], concat_axis)
    size = len(arrays)
    _check_divisible(arrays[0], split_axis, size)
    chunks = [np.split(a, size, axis=split_axis) for a in arrays]
    return [
        np.concatenate([chunks[j][i] for j in range(size)], axis=concat_axis) for i in range(size)
    ]


def check_counts(data: np.ndarray, counts: np.ndarray, size: int) -> None:
    """Validate an all_to_allv (data, counts) pair of one member.

    `counts` must have a leading shape of `data`, `data.shape[:r]` with 1 <= r < data rank,
    whose first dim is the group size; every count lies in [0, data.shape[r]]."""
    if data.ndim < 2 or data.shape[0] != size:
        raise CollectiveError(
            f"all_to_allv data must be [{size}, capacity, ...], got shape {data.shape}"
        )
    if not 1 <= counts.ndim < data.ndim or counts.shape != data.shape[: counts.ndim]:
        if counts.ndim == 1:  # the common [G] form: name the one shape expected
            expected = f"({size},)"
        else:
            expected = " or ".join(str(data.shape[:r]) for r in range(1, data.ndim))
        raise CollectiveError(
            f"all_to_allv counts must have shape {expected} (a leading shape of the data "
            f"{data.shape}), got {counts.shape}"
        )
    if counts.dtype.kind not in "iu":
        raise CollectiveError(f"all_to_allv counts must be integers, got dtype {counts.dtype}")
    rows = data.shape[counts.ndim]
    bad = counts[(counts < 0) | (counts > rows)]
    if bad.size:
        raise CollectiveError(f"all_to_allv count {int(bad[0])} is outside [0, {rows}]")


def valid_rows(data: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """A boolean mask broadcastable to `data`: True on the leading `counts[...]` rows along
    axis `counts.ndim` (the rows an all_to_allv moves)."""
    axis = counts.ndim
    rows = np.arange(data.shape[axis]).reshape((1,) * axis + (-1,))
    mask = rows < counts[..., None]
    return mask.reshape(mask.shape + (1,) * (data.ndim - axis - 1))


def all_to_allv(
    datas: Sequence[np.ndarray], counts: Sequence[np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Uneven exchange of (data [G, ...], counts data.shape[:r]) pairs; see the module doc.

    Member i's result chunk j is the part of member j's chunk i that member j's counts mark
    valid (zero elsewhere); its result counts[j] are member j's counts[i]."""
    size = len(datas)
    _same_shapes(datas)
    for d, c in zip(datas, counts, strict=True):
        check_counts(d, c, size)
    _same_shapes(counts)
    masks = [valid_rows(d, c) for d, c in zip(datas, counts, strict=True)]
    out_data = [np.zeros_like(d) for d in datas]
    out_counts = [np.zeros_like(c) for c in counts]
    for i in range(size):
        for j in range(size):
            out_data[i][j] = np.where(masks[j][i], datas[j][i], out_data[i][j])
            out_counts[i][j] = counts[j][i]
    return out_data, out_counts


# ---- whole op over simulated ranks ---------------------------------------------------------


Members = Sequence[Sequence[np.ndarray]]
GroupRun = Callable[[CollectiveOp, Members], list[list[np.ndarray]]]
"""A simulated implementation: (op, every member's operands) -> every member's results."""


def _per_tensor(run: Callable[[CollectiveOp, list[np.ndarray]], list[np.ndarray]]) -> GroupRun:
    """The implementation of a kind that exchanges each operand on its own."""

    def run_members(op: CollectiveOp, members: Members) -> list[list[np.ndarray]]:
        nops = len(op.operands)
        per_tensor = [run(op, [m[n] for m in members]) for n in range(nops)]
        return [[per_tensor[n][m] for n in range(nops)] for m in range(len(members))]

    return run_members


def _all_to_allv_members(op: CollectiveOp, members: Members) -> list[list[np.ndarray]]:
    nops = len(op.operands)
    half = nops // 2
    outs: list[list[np.ndarray]] = [[None] * nops for _ in members]  # type: ignore[list-item]
    for n in range(half):
        data, counts = all_to_allv([m[n] for m in members], [m[half + n] for m in members])
        for m in range(len(members)):
            outs[m][n], outs[m][half + n] = data[m], counts[m]
    return outs


SIMULATED: dict[CollectiveKind, GroupRun] = {
    CollectiveKind.ALLREDUCE: _per_tensor(lambda op, xs: allreduce(xs, reduction_of(op))),
    CollectiveKind.ALLGATHER: _per_tensor(lambda op, xs: allgather(xs, *op.axes())),
    CollectiveKind.REDUCE_SCATTER: _per_tensor(
        lambda op, xs: reduce_scatter(xs, reduction_of(op), *op.axes())
    ),
    CollectiveKind.ALL_TO_ALL: _per_tensor(lambda op, xs: all_to_all(xs, *op.axes())),
    CollectiveKind.ALL_TO_ALLV: _all_to_allv_members,
}
"""The simulated-ranks implementation of every collective kind of the registry
(`dialects/collectives.py`; runtime/mpi.py holds the MPI ones)."""


def run_group(op: CollectiveOp, members: Members) -> list[list[np.ndarray]]:
    """Results of `op` for the members of one group; `members[m]` holds member m's operands."""
    run = SIMULATED.get(op.KIND)
    if run is None:
        raise CollectiveError(f"{op_label(op)}: unsupported collective")
    return run(op, members)


def simulate(
    op: CollectiveOp, per_rank: Sequence[Sequence[np.ndarray]], world_size: int
) -> list[list[np.ndarray]]:
    """Results of `op` on every rank of a simulated world; `per_rank[r]` = rank r's operands."""
    results: list[list[np.ndarray] | None] = [None] * world_size
    for group in resolve_groups(op, world_size):
        outs = run_group(op, [per_rank[r] for r in group])
        for r, out in zip(group, outs, strict=True):
            results[r] = out
    return [r for r in results if r is not None]


# ---- checks ------------------------------------------------------------------------------------


def _same_shapes(arrays: Sequence[np.ndarray]) -> None:
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise CollectiveError(f"members hold different shapes {sorted(shapes)}")


def _check_axis(a: np.ndarray, axis: int) -> None:
    if not 0 <= axis < a.ndim:
        raise CollectiveError(f"axis {axis} is out of range for shape {a.shape}")


def _check_divisible(a: np.ndarray, axis: int, size: int) -> None:
    if a.shape[axis] % size:
        raise CollectiveError(
            f"dim {axis} of shape {a.shape} is not divisible by the group size {size}"
        )
