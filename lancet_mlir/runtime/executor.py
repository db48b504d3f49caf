"""The reference executor: runs one function of a module with numpy, on one or more ranks.

Ops run in block order. What each op does:

* `comp.<kernel>`: the kernel's reference implementation with numpy
  (`runtime.kernels.kernel_runner(kernel_of(op), kernel_params(op))`);
* `comm.*` collectives: real multi-rank semantics (`collectives.py`), either across N
  simulated ranks held in this process (lockstep: every rank runs the same op sequence and a
  collective combines all ranks' values) or through MPI, one rank per process (`mpi.py`);
* `arith.constant`, `func.return`;
* any other op that carries `lancet.time_us` (a timing placeholder such as `"test.op"`) runs
  as an opaque deterministic function of its inputs (see `opaque_results`), enough to check
  that a pass kept the dataflow;
* anything else is a UserError naming the op.

Every result is checked against its declared type (shape and dtype). Values are freed after
their last use, so big graphs run in bounded memory.

An in-place `comp.concat` (`dialects.destination.in_place_concat`) runs in destination-passing
style, as a GPU runs it: its buffer is allocated when the first of its parts is produced,
the op that writes each part (seen through reshapes) writes into the part's slice (`out=`
where the kernel has it, `kernels.kernel_runner_into`; a collective's result is assigned to
the slice), its readers read the slice, and the concat itself copies nothing (a part that
did not land in its slice, which the structure rules out, is assigned there). A partial sum
accumulated in place (`destination.accumulates_in_place`) adds its part into the running
sum's buffer (`out=`), which only it reads.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from xdsl.dialects.arith import ConstantOp
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue

from lancet_mlir import attrs
from lancet_mlir.dialects.comm import CollectiveOp, module_world_size
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.runtime import collectives
from lancet_mlir.runtime.collectives import op_label
from lancet_mlir.runtime.values import (
    check_value,
    constant_value,
    make_inputs,
    shape_and_dtype,
)
from lancet_mlir.support.errors import OptionError, UserError, one_line

Progress = Callable[[int, int, str], None]
"""A progress callback: (ops done, ops in total, the op just run)."""


class Collectives(Protocol):
    """How collectives run: over simulated ranks in this process, or over MPI."""

    world_size: int

    @property
    def local_ranks(self) -> tuple[int, ...]:
        """The ranks whose values this process holds."""
        ...

    def prepare(self, ops: Sequence[CollectiveOp]) -> None:
        """Set up before the run (e.g. create sub-communicators)."""
        ...

    def run(
        self, op: CollectiveOp, per_rank: Sequence[Sequence[np.ndarray]]
    ) -> list[list[np.ndarray]]:
        """Results of `op` for every local rank, from every local rank's operands."""
        ...

    def finish(self) -> None:
        """Called once after the last op of a successful run."""
        ...


class SimulatedCollectives:
    """All ranks of the world live in this process; collectives combine them directly."""

    def __init__(self, world_size: int):
        self.world_size = world_size

    @property
    def local_ranks(self) -> tuple[int, ...]:
        """Every rank of the world."""
        return tuple(range(self.world_size))

    def prepare(self, ops: Sequence[CollectiveOp]) -> None:
        """Check every op's groups against the world before running anything."""
        for op in ops:
            collectives.resolve_groups(op, self.world_size)

    def run(
        self, op: CollectiveOp, per_rank: Sequence[Sequence[np.ndarray]]
    ) -> list[list[np.ndarray]]:
        """The op's results on every rank."""
        return collectives.simulate(op, per_rank, self.world_size)

    def finish(self) -> None:
        """Nothing to agree on in one process."""


@dataclass
class ExecResult:
    """Results of one execution: `outputs[r]` holds rank r's function results.

    After an MPI run `outputs` holds only the local rank, unless `gather_results` collected
    every rank on rank 0.
    """

    func_name: str
    world_size: int
    outputs: dict[int, list[np.ndarray]] = field(default_factory=dict)

    def flat(self) -> dict[str, np.ndarray]:
        """The results under the keys `rank<r>/<result index>` (the npz layout)."""
        return {
            f"rank{r}/{i}": value
            for r in sorted(self.outputs)
            for i, value in enumerate(self.outputs[r])
        }


# ---- function selection and world size ------------------------------------------------------


def select_function(module: ModuleOp, name: str | None = None) -> FuncOp:
    """The function `name`, else the only/first public function of the module."""
    funcs = [op for op in module.walk() if isinstance(op, FuncOp)]
    if name is not None:
        for f in funcs:
            if f.sym_name.data == name:
                if f.is_declaration:
                    raise UserError(f"@{name}: is a declaration without a body")
                return f
        known = ", ".join("@" + f.sym_name.data for f in funcs) or "none"
        raise UserError(f"no function @{name} in the module (functions: {known})")
    public = [
        f
        for f in funcs
        if not f.is_declaration and (f.sym_visibility is None or f.sym_visibility.data == "public")
    ]
    if not public:
        raise UserError("the module has no public function with a body to run")
    return public[0]


def check_world_size(module: ModuleOp, ranks: int, how: str | None = None) -> None:
    """UserError unless `ranks` equals the module's declared world size (when present); with
    `how` None (simulated ranks) an OptionError naming the parameter `ranks`."""
    declared = module_world_size(module)
    if declared is not None and declared != ranks and how is None:
        raise OptionError(
            "ranks",
            f"runs {ranks} rank{'s' if ranks != 1 else ''}, but the module declares "
            f"{attrs.WORLD_SIZE} = {declared}",
        )
    if declared is not None and declared != ranks:
        raise UserError(
            f"the module declares {attrs.WORLD_SIZE} = {declared} but {how} gives {ranks} "
            f"rank{'s' if ranks != 1 else ''}"
        )


def function_inputs(
    func: FuncOp,
    *,
    seed: int,
    rank: int,
    given: Mapping[int, Sequence[np.ndarray]] | None = None,
    replica_cache: dict[int, np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Rank `rank`'s argument values: from `given[rank]` if provided, else deterministic
    (replicated arguments drawn once per `replica_cache`, see `make_inputs`)."""
    arg_types = list(func.function_type.inputs.data)
    if given is not None:
        if rank not in given:
            raise UserError(f"no input values given for rank {rank}")
        values = list(given[rank])
        if len(values) != len(arg_types):
            raise UserError(
                f"@{func.sym_name.data} takes {len(arg_types)} arguments, rank {rank} got "
                f"{len(values)} input values"
            )
        return [
            check_value(v, t, f"input #{i} of rank {rank}")
            for i, (v, t) in enumerate(zip(values, arg_types, strict=True))
        ]
    arg_attrs: list[DictionaryAttr | None] = (
        list(func.arg_attrs.data) if func.arg_attrs is not None else [None] * len(arg_types)
    )
    return make_inputs(arg_types, arg_attrs, seed=seed, rank=rank, replica_cache=replica_cache)


def all_rank_inputs(
    func: FuncOp,
    ranks: Sequence[int],
    *,
    seed: int,
    given: Mapping[int, Sequence[np.ndarray]] | None = None,
) -> dict[int, list[np.ndarray]]:
    """Argument values of every rank in `ranks` (replicated arguments are drawn once)."""
    cache: dict[int, np.ndarray] = {}
    return {
        r: function_inputs(func, seed=seed, rank=r, given=given, replica_cache=cache) for r in ranks
    }


# ---- the reference executor ------------------------------------------------------------------


def opaque_results(op: Operation, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Deterministic stand-in values for a timed placeholder op.

    Result k is a fixed pattern (from the op name and k) plus tanh of a weighted sum of the
    inputs' means: any change of which values feed the op changes its results.
    """
    name = op_display_name(op)
    salt = zlib.crc32(name.encode()) % 997
    mix = sum(
        (i + 1) * float(np.mean(np.asarray(x, dtype=np.float64))) if np.size(x) else 0.0
        for i, x in enumerate(inputs)
    )
    outs = []
    for k, res in enumerate(op.results):
        shape, dtype = shape_and_dtype(res.type)
        n = int(np.prod(shape, dtype=np.int64))
        pattern = np.sin(np.arange(n, dtype=np.float64) * 0.37 + salt + 1.3 * k)
        value = (pattern + np.tanh(mix)).reshape(shape)
        if dtype.kind in "iub":
            value = np.abs(np.round(value * 3)) % 2
        outs.append(value.astype(dtype))
    return outs


class ReferenceExecutor:
    """Runs one function over the local ranks of a `Collectives` back-end."""

    def __init__(self, func: FuncOp, comm: Collectives, progress: Progress | None = None):
        self.func = func
        self.comm = comm
        self.progress = progress
        self.block = func.body.block
        self.ops = list(self.block.ops)
        self.last_use = _last_uses(self.ops)
        self.places = _destinations(self.ops)
        """writer result -> (in-place concat, part index)."""
        self.accumulators = _accumulators(self.ops)
        """The partial sums accumulated in place: their running sum's buffer is updated."""
        self.buffers: dict[Operation, list[np.ndarray]] = {}
        """Per local rank, the buffer of every in-place concat whose first part was made."""

    def collective_ops(self) -> list[CollectiveOp]:
        """The collectives of the function, in block order."""
        return [op for op in self.ops if isinstance(op, CollectiveOp)]

    def run(self, inputs: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
        """Execute with `inputs[k]` = local rank k's arguments; returns its results."""
        nlocal = len(self.comm.local_ranks)
        env: dict[SSAValue, list[np.ndarray]] = {}
        for n, arg in enumerate(self.block.args):
            env[arg] = [np.asarray(inputs[k][n]) for k in range(nlocal)]
        for position, op in enumerate(self.ops):
            if isinstance(op, ReturnOp):
                if self.progress is not None:
                    self.progress(len(self.ops), len(self.ops), op.name)
                return [[env[v][k] for v in op.operands] for k in range(nlocal)]
            args = [_lookup(env, v, op) for v in op.operands]
            per_rank = [[a[k] for a in args] for k in range(nlocal)]
            dests = [self._destination(res, nlocal) for res in op.results]
            if op in self.buffers:
                results = self._assemble(op, per_rank)
            elif op in self.accumulators:  # the part's GEMM adds into the running sum
                results = [[np.add(ins[0], ins[1], out=ins[0])] for ins in per_rank]
            elif any(d is not None for d in dests):
                results = self._run_into(op, per_rank, dests)
            else:
                results = self._run_op(op, per_rank)
            for n, res in enumerate(op.results):
                env[res] = [self._checked(op, n, results[k][n], k) for k in range(nlocal)]
            for v in self.last_use.get(position, ()):
                env.pop(v, None)
            if self.progress is not None:
                self.progress(position + 1, len(self.ops), op.name)
        raise UserError(f"@{self.func.sym_name.data}: the body does not end with func.return")

    def _run_op(self, op: Operation, per_rank: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        if isinstance(op, CollectiveOp):
            return self.comm.run(op, per_rank)
        runner = self._compute_runner(op)
        out = []
        for k, ins in enumerate(per_rank):
            try:
                out.append(list(runner(ins)))
            except UserError:
                raise
            except Exception as exc:  # noqa: BLE001 - kernel failures name the op and rank
                raise UserError(f"{self._where(op, k)}: {one_line(exc)}") from exc
        return out

    # ---- destination passing (in-place concats) -----------------------------------------
    def _destination(self, res: SSAValue, nlocal: int) -> list[np.ndarray] | None:
        """Per local rank, the slice of an in-place concat's buffer that `res` is written
        into (shaped as `res`), or None; allocates the buffer on first need."""
        place = self.places.get(res)
        if place is None:
            return None
        concat, k = place
        buffers = self.buffers.get(concat)
        if buffers is None:
            shape, dtype = shape_and_dtype(concat.results[0].type)
            buffers = self.buffers[concat] = [np.empty(shape, dtype) for _ in range(nlocal)]
        shape, _ = shape_and_dtype(res.type)
        return [_part_slice(concat, k, b).reshape(shape) for b in buffers]

    def _run_into(
        self, op: Operation, per_rank: list[list[np.ndarray]], dests: list[list[np.ndarray] | None]
    ) -> list[list[np.ndarray]]:
        """`op`'s results, those with a destination written into it (module doc)."""
        from lancet_mlir.dialects.comp import kernel_of, kernel_params

        kernel = kernel_of(op)
        if kernel is None:  # a collective (or a timed placeholder): assign the slices
            results = self._run_op(op, per_rank)
            for n, dest in enumerate(dests):
                if dest is None:
                    continue
                for k in range(len(per_rank)):
                    np.copyto(dest[k], self._checked(op, n, results[k][n], k))
                    results[k][n] = dest[k]
            return results
        from lancet_mlir.runtime.kernels import kernel_runner_into

        runner = kernel_runner_into(kernel, kernel_params(op))
        out = []
        for k, ins in enumerate(per_rank):
            targets = [None if d is None else d[k] for d in dests]
            try:
                out.append(list(runner(ins, targets)))
            except UserError:
                raise
            except Exception as exc:  # noqa: BLE001 - kernel failures name the op and rank
                raise UserError(f"{self._where(op, k)}: {one_line(exc)}") from exc
        return out

    def _assemble(self, op: Operation, per_rank: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        """An in-place concat: its buffer, every part already in its slice (else put there)."""
        buffers = self.buffers.pop(op)
        for k, parts in enumerate(per_rank):
            for j, part in enumerate(parts):
                dest = _part_slice(op, j, buffers[k])
                if not _is_view_of(part, dest):
                    np.copyto(dest, part.reshape(dest.shape))
        return [[b] for b in buffers]

    def _compute_runner(self, op: Operation) -> Any:
        from lancet_mlir.dialects.comp import kernel_of, kernel_params

        kernel = kernel_of(op)
        if kernel is not None:
            from lancet_mlir.runtime.kernels import kernel_runner

            return kernel_runner(kernel, kernel_params(op))
        if isinstance(op, ConstantOp):
            value = constant_value(op.value, op.result.type)
            return lambda ins: [value.copy()]
        if op.regions:
            raise UserError(f"{op_label(op)}: ops with regions cannot be executed by the runtime")
        if attrs.TIME_US in op.attributes:
            return lambda ins: opaque_results(op, ins)
        raise UserError(
            f"{op_label(op)}: the runtime cannot execute this op (supported: comp.*, comm.*, "
            f"arith.constant, func.return, and ops annotated with {attrs.TIME_US})"
        )

    def _checked(self, op: Operation, n: int, value: Any, k: int) -> np.ndarray:
        ty = op.results[n].type
        try:
            return check_value(np.asarray(value), ty, f"result #{n}")
        except UserError as exc:
            raise UserError(f"{self._where(op, k)}: {exc}") from exc

    def _where(self, op: Operation, k: int) -> str:
        # under MPI the failure report names the rank already
        if len(self.comm.local_ranks) == 1:
            return op_label(op)
        return f"{op_label(op)} on rank {self.comm.local_ranks[k]}"


def _lookup(
    env: dict[SSAValue, list[np.ndarray]], value: SSAValue, op: Operation
) -> list[np.ndarray]:
    try:
        return env[value]
    except KeyError:
        raise UserError(
            f"{op_label(op)}: uses a value that is not defined before it in the function body"
        ) from None


def _destinations(ops: Sequence[Operation]) -> dict[SSAValue, tuple[Operation, int]]:
    """writer result -> (in-place concat of `ops`, part index): where each part of an
    in-place concat is written (its producer seen through reshapes, `destination.writer_of`)."""
    from lancet_mlir.dialects.destination import in_place_concat, writer_of

    places: dict[SSAValue, tuple[Operation, int]] = {}
    for op in ops:
        if not in_place_concat(op):
            continue
        for k, v in enumerate(op.operands):
            found = writer_of(v)
            assert found is not None  # in_place_concat checked it
            places[found[1][-1]] = (op, k)
    return places


def _accumulators(ops: Sequence[Operation]) -> set[Operation]:
    """The in-place accumulations of `ops` (`destination.accumulates_in_place`): numpy has
    no GEMM with beta = 1, so the executor adds the part into the running sum's buffer (its
    only reader is the accumulation, so nothing else sees it change)."""
    from lancet_mlir.dialects.destination import accumulates_in_place

    return {op for op in ops if accumulates_in_place(op)}


def _part_slice(concat: Operation, k: int, buffer: np.ndarray) -> np.ndarray:
    """Part k's slice of an in-place concat's `buffer` (contiguous: every dimension before
    the axis is 1)."""
    from lancet_mlir.dialects.comp import ConcatOp
    from lancet_mlir.dialects.destination import concat_axis, slice_offsets

    assert isinstance(concat, ConcatOp)
    offsets = slice_offsets(concat)
    index = [slice(None)] * buffer.ndim
    index[concat_axis(concat)] = slice(offsets[k], offsets[k + 1])
    return buffer[tuple(index)]


def _is_view_of(part: np.ndarray, dest: np.ndarray) -> bool:
    """True when `part` is `dest`'s bytes (the same memory, start and size), so nothing moves."""
    return (
        part.size == dest.size
        and part.dtype == dest.dtype
        and part.flags.c_contiguous
        and part.__array_interface__["data"][0] == dest.__array_interface__["data"][0]
    )


def _last_uses(ops: Sequence[Operation]) -> dict[int, list[SSAValue]]:
    """position -> values whose last use in the block is the op at that position."""
    last: dict[SSAValue, int] = {}
    for position, op in enumerate(ops):
        for v in op.operands:
            last[v] = position
    by_position: dict[int, list[SSAValue]] = {}
    for v, position in last.items():
        by_position.setdefault(position, []).append(v)
    return by_position


# ---- public entry points ----------------------------------------------------------------------


def execute(
    module: ModuleOp,
    *,
    ranks: int = 1,
    seed: int = 0,
    func: str | None = None,
    inputs: Mapping[int, Sequence[np.ndarray]] | None = None,
    comm: Any = None,
    progress: Progress | None = None,
) -> ExecResult:
    """Run a function of `module` and return every local rank's results.

    `progress(done, total, op name)` is called after each op (for a progress bar).

    Without `comm`, `ranks` ranks are simulated in this process. With an mpi4py communicator
    (or an `MpiCollectives`), this process is one rank of the MPI world and `ranks` is
    ignored; the result holds this rank only (see `gather_results`). `inputs` maps a rank to
    its argument values (default: deterministic values from `seed`, see `values.py`).
    Raises UserError on bad input; under MPI, RankFailure when any rank failed.
    """
    backend = _backend(comm, ranks)
    # a kernel that overflows or divides by zero gives Inf/NaN, as on a GPU, without numpy's
    # warning lines; the summary and --compare say when outputs hold such values
    with np.errstate(all="ignore"):
        if comm is None:
            if ranks < 1:
                raise OptionError("ranks", f"must be >= 1, got {ranks}")
            check_world_size(module, ranks)
            return _execute_local(module, backend, seed, func, inputs, progress)
        return _execute_guarded(module, backend, seed, func, inputs, progress)


def _backend(comm: Any, ranks: int) -> Collectives:
    if comm is None:
        return SimulatedCollectives(ranks)
    from lancet_mlir.runtime.mpi import MpiCollectives

    return comm if isinstance(comm, MpiCollectives) else MpiCollectives(comm)


def _execute_local(
    module: ModuleOp,
    backend: Collectives,
    seed: int,
    func_name: str | None,
    inputs: Mapping[int, Sequence[np.ndarray]] | None,
    progress: Progress | None = None,
) -> ExecResult:
    func = select_function(module, func_name)
    executor = ReferenceExecutor(func, backend, progress)
    try:
        backend.prepare(executor.collective_ops())
    except collectives.CollectiveError as exc:
        raise UserError(str(exc)) from exc
    by_rank = all_rank_inputs(func, backend.local_ranks, seed=seed, given=inputs)
    local_inputs = [by_rank[r] for r in backend.local_ranks]
    try:
        results = executor.run(local_inputs)
    except collectives.CollectiveError as exc:
        raise UserError(str(exc)) from exc
    backend.finish()
    outputs = dict(zip(backend.local_ranks, results, strict=True))
    return ExecResult(func.sym_name.data, backend.world_size, outputs)


def _execute_guarded(
    module: ModuleOp,
    backend: Collectives,
    seed: int,
    func_name: str | None,
    inputs: Mapping[int, Sequence[np.ndarray]] | None,
    progress: Progress | None = None,
) -> ExecResult:
    """An MPI run: any local failure is reported at the next agreement (never a hang)."""
    from lancet_mlir.runtime.mpi import MpiCollectives, RankFailure

    assert isinstance(backend, MpiCollectives)
    try:
        check_world_size(module, backend.world_size, "the MPI world")
        return _execute_local(module, backend, seed, func_name, inputs, progress)
    except RankFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - reported to every rank, then raised there
        backend.fail(one_line(exc))
        raise  # not reached: fail() raises RankFailure
