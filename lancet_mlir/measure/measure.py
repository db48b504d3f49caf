"""`lancet-profile measure`: time every distinct op key of a module on a real back-end.

For each distinct op key (`keys.op_key`) of the module's compute ops, the back-end runs the
kernel `warmup` times unmeasured and then `iters` times measured, in rounds over all keys
(see `measure_with_stats`), with BLAS threads pinned; each key's samples are summarized by
`robust.robust_summary` (outliers rejected, then the profile layer's trimmed mean) into a
ProfileDB. Back-ends:

* `cpu` (`numpy_backend.py`): the kernel registry's numpy implementation, wall-clock time;
* `cuda` (`cuda_backend.py`): the same implementations on CuPy arrays, timed with CUDA events
  through cuda-python on one stream.

What is measured: ops with a kernel in the registry (`comp.*`). Collectives are *not*
measured by either back-end: their times come from comm tables (`lancet-profile
from-nccl-tests`, the shipped XLA tables). Other ops without a kernel are listed in a note.
Inputs are synthetic and deterministic (`--seed`): floats uniform in [0.5, 1.5) (positive,
so no kernel produces NaN, e.g. Adam's square root); integers (ids, labels) in
[0, b) with b the smallest dimension of the op's float operands (or its `num_embeddings`),
so that every index is valid.

Under mpiexec every rank measures (the cuda back-end on GPU `rank % device count`) and the
ranks' profiles are averaged with `mpi_sync.sync_profile`; rank 0 writes the result. With
`{rank}` in `-o` every rank writes its own profile instead (for a later `sync`); without
mpiexec `{rank}` is 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType
from xdsl.ir import Operation
from xdsl.traits import IsTerminator

from lancet_mlir.cost.keys import op_key
from lancet_mlir.cost.profile_db import ProfileDB
from lancet_mlir.dialects.comm import WORLD_SIZE_ATTR, CollectiveOp
from lancet_mlir.support.errors import AgreedError, UserError, one_line
from lancet_mlir.support.files import commit_outputs
from lancet_mlir.support.mpi_job import fault_point

TOOL = "lancet-profile"


class Backend(Protocol):
    """A measurement back-end: runs one kernel and times it."""

    name: str
    device: str

    def prepare(self, op: Operation, inputs: list[np.ndarray]) -> Callable[[], Any]:
        """A zero-argument callable that runs `op`'s kernel once on `inputs`."""
        ...

    def time(self, fn: Callable[[], Any], warmup: int, iters: int) -> list[float]:
        """`iters` measured durations (µs) of `fn` after `warmup` unmeasured runs."""
        ...

    def metadata(self) -> dict[str, Any]:
        """Back-end facts recorded in the profile (device name, library versions, ...)."""
        ...


@dataclass
class OpCatalog:
    """The module's ops grouped by key: one representative op per measurable key."""

    measurable: dict[str, Operation] = field(default_factory=dict)
    collectives: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)


def catalog_ops(module: ModuleOp) -> OpCatalog:
    """Sort every op of the module's function bodies into measurable / collective / other."""
    from lancet_mlir.dialects.comp import kernel_of

    cat = OpCatalog()
    seen: set[str] = set()
    for op in module.walk():
        if op.regions or op.has_trait(IsTerminator) or op is module:
            continue
        key = op_key(op)
        if key in seen:
            continue
        seen.add(key)
        if isinstance(op, CollectiveOp):
            cat.collectives.append(key)
        elif kernel_of(op) is not None:
            cat.measurable[key] = op
        else:
            cat.unsupported.append(key)
    cat.measurable = dict(sorted(cat.measurable.items()))
    cat.collectives.sort()
    cat.unsupported.sort()
    return cat


def _int_bound(op: Operation) -> int:
    """Exclusive upper bound of synthetic integer operands that indexes stay valid with."""
    from lancet_mlir.dialects.comp import kernel_params

    params = kernel_params(op)
    if "num_embeddings" in params:
        return max(1, int(params["num_embeddings"]))
    dims = [
        d
        for v in op.operands
        if isinstance(v.type, TensorType) and str(v.type.element_type).startswith(("f", "bf"))
        for d in v.type.get_shape()
    ]
    return max(1, min(dims, default=2))


def synthetic_inputs(op: Operation, seed: int) -> list[np.ndarray]:
    """Deterministic operand values of `op` (see the module doc)."""
    from lancet_mlir.dialects.comp import tensor_sig
    from lancet_mlir.runtime.kernels import numpy_dtype

    rng = np.random.default_rng([seed, len(op.operands)])
    bound = _int_bound(op)
    out = []
    for v in op.operands:
        sig = tensor_sig(v.type)
        dtype = numpy_dtype(sig.dtype)
        if dtype.kind == "f":
            # positive values keep every kernel finite (e.g. Adam's sqrt of the second moment)
            out.append(rng.uniform(0.5, 1.5, size=sig.shape).astype(dtype))
        elif dtype.kind == "b":
            out.append(rng.integers(0, 2, size=sig.shape).astype(dtype))
        else:
            out.append(rng.integers(0, bound, size=sig.shape).astype(dtype))
    return out


@dataclass
class MeasureStats:
    """How a measurement went: rounds done, run-to-run spread, time spent, outliers."""

    keys: int = 0
    rounds: int = 0
    """Rounds completed for every key."""
    spread: float = 0.0
    """Run-to-run spread of the iteration total: (max - min) / median over the rounds."""
    seconds: float = 0.0
    rejected: int = 0
    """Samples dropped as outliers, over all keys."""
    budget_hit: bool = False
    """True when --max-seconds stopped the measurement before `iters` runs per key."""


def round_sizes(iters: int, rounds: int, budget: bool) -> list[int]:
    """Timed runs per key in each round: `iters` split into `rounds` near-equal parts; with a
    time budget the first round times each key once, so every key is measured early."""
    if budget and iters > 1:
        return [1, *round_sizes(iters - 1, max(1, rounds - 1), False)]
    rounds = max(1, min(rounds, iters))
    base, extra = divmod(iters, rounds)
    return [base + (1 if r < extra else 0) for r in range(rounds)]


def measure_module(
    module: ModuleOp, backend: Backend, **options: Any
) -> tuple[ProfileDB, OpCatalog]:
    """Measure every measurable op key of `module` with `backend` (options: see
    `measure_with_stats`)."""
    db, cat, _ = measure_with_stats(module, backend, **options)
    return db, cat


def measure_with_stats(
    module: ModuleOp,
    backend: Backend,
    *,
    warmup: int = 5,
    iters: int = 20,
    seed: int = 0,
    world_size: int | None = None,
    rounds: int = 3,
    max_seconds: float | None = None,
    threads: int | None = 1,
    progress: Callable[[int, int, str], None] | None = None,
) -> tuple[ProfileDB, OpCatalog, MeasureStats]:
    """Measure every measurable op key of `module` with `backend`; also say how it went.

    The keys are measured in rounds (every key once per round, `iters` runs split over
    the rounds, the warm-up in the first), so a slow phase of the machine hits all keys
    alike and the rounds give the run-to-run spread. With `max_seconds`, every key is timed
    once and then further rounds run while time is left. BLAS threads are pinned to
    `threads` (threadpoolctl; None leaves them alone). Each key's samples are summarized by
    `robust.robust_summary` (outliers rejected, trimmed mean); the profile metadata records
    the statistic, the per-key median and spread, and `measure_stats` how the run went.
    `progress(done, total, key)` is called after each key of each round.
    """
    import time

    from threadpoolctl import threadpool_limits

    from lancet_mlir.measure.robust import robust_summary, round_spread

    if iters < 1:
        raise UserError(f"--iters must be >= 1, got {iters}")
    if warmup < 0:
        raise UserError(f"--warmup must be >= 0, got {warmup}")
    cat = catalog_ops(module)
    sizes = round_sizes(iters, rounds, max_seconds is not None)
    samples: dict[str, list[list[float]]] = {key: [] for key in cat.measurable}
    stats = MeasureStats(keys=len(cat.measurable))
    began = time.monotonic()
    prepared: dict[str, Callable[[], Any]] = {}
    limits = {} if threads is None else {"limits": threads}
    with threadpool_limits(**limits):  # type: ignore[arg-type]
        for r, size in enumerate(sizes):
            if r > 0 and _over(began, max_seconds):
                stats.budget_hit = True
                break
            for n, (key, op) in enumerate(cat.measurable.items()):
                if r > 0 and _over(began, max_seconds):
                    stats.budget_hit = True
                    break
                samples[key].append(_time_key(backend, prepared, key, op, seed,
                                              warmup if r == 0 else 0, size))  # fmt: skip
                if progress is not None:
                    progress(r * len(cat.measurable) + n + 1, len(sizes) * len(cat.measurable), key)
            else:
                stats.rounds = r + 1
                continue
            break
    stats.seconds = time.monotonic() - began
    db = ProfileDB()
    per_key: dict[str, dict[str, float | int]] = {}
    for key, parts in samples.items():
        robust = robust_summary([x for part in parts for x in part])
        db.entries[key] = robust.entry
        stats.rejected += robust.rejected
        per_key[key] = {"median_us": round(robust.median_us, 3), "spread": round(robust.spread, 4),
                        "rejected": robust.rejected}  # fmt: skip
    totals = [
        sum(_median(parts[r]) for parts in samples.values()) for r in range(stats.rounds)
    ]
    stats.spread = round_spread(totals)
    db.metadata.update(backend.metadata())
    db.metadata.update(
        {
            "backend": backend.name,
            "device": backend.device,
            "warmup": warmup,
            "iters": iters,
            "seed": seed,
            "collectives": "not measured (use comm tables)",
            "statistic": STATISTIC,
            "blas_threads": threads if threads is not None else "not pinned",
            "rounds": stats.rounds,
            "run_to_run_spread": round(stats.spread, 4),
            "max_seconds": max_seconds,
            "budget_exhausted": stats.budget_hit,
            "key_stats": per_key,
        }
    )
    if world_size is not None:
        db.metadata["world_size"] = world_size
    return db, cat, stats


STATISTIC = (
    "mean after rejecting samples beyond 3.5 scaled MADs of the median and trimming 6.25% "
    "at each end (profile/robust.py)"
)


def _over(began: float, max_seconds: float | None) -> bool:
    import time

    return max_seconds is not None and time.monotonic() - began >= max_seconds


def _median(values: list[float]) -> float:
    import statistics

    return statistics.median(values)


def _time_key(
    backend: Backend,
    prepared: dict[str, Callable[[], Any]],
    key: str,
    op: Operation,
    seed: int,
    warmup: int,
    iters: int,
) -> list[float]:
    """`iters` timed runs of one key (prepared once, on first use)."""
    try:
        fn = prepared.get(key)
        if fn is None:
            fn = prepared[key] = backend.prepare(op, synthetic_inputs(op, seed))
        return backend.time(fn, warmup, iters)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - name the op key that failed
        raise UserError(f"{key}: {backend.name} back-end failed: {one_line(exc)}") from exc


# ---- the command ---------------------------------------------------------------------------------


def check_measure_args(args: argparse.Namespace) -> None:
    """Checks of `measure`'s arguments that need no input (run on every rank under mpiexec)."""
    from lancet_mlir.support.mpi_util import under_mpiexec

    if under_mpiexec() and args.module == "-":
        raise UserError("under mpiexec pass the module as a file (stdin reaches rank 0 only)")
    _check_output(args.output)


def _load(path: str, world_size: int | None = None) -> ModuleOp:
    from xdsl.context import Context
    from xdsl.dialects import get_all_dialects as xdsl_dialects
    from xdsl.parser import Parser

    from lancet_mlir.cost.fileio import read_text
    from lancet_mlir.dialects import get_all_dialects
    from lancet_mlir.dialects.checks import check_module

    fault_point("read")
    text = read_text(path)  # `-`: stdin, like lancet-run (`lancet-model ... | ... measure -`)
    if path == "-":
        path = "<stdin>"
    ctx = Context(allow_unregistered=True)
    for name, factory in {**xdsl_dialects(), **get_all_dialects()}.items():
        ctx.register_dialect(name, factory)
    try:
        module = Parser(ctx, text, path).parse_module()
        if world_size is not None:
            # verify against the world size the profile will claim: a module built for 8
            # ranks whose collective shapes need 8 does not verify with --world-size 3
            module.attributes[WORLD_SIZE_ATTR] = IntegerAttr(world_size, 64)
        module.verify()
        check_module(module)
        fault_point("verify")
    except Exception as exc:  # noqa: BLE001 - one line naming the file
        message = one_line(exc)
        raise UserError(message if message.startswith(path) else f"{path}: {message}") from exc
    return module


def _world_size(module: ModuleOp, override: int | None) -> int | None:
    if override is not None:
        return override
    attr = module.attributes.get(WORLD_SIZE_ATTR)
    return attr.value.data if isinstance(attr, IntegerAttr) else None


def make_backend(name: str, rank: int = 0) -> Backend:
    """The back-end called `name` ('cpu' or 'cuda'); UserError when it cannot run here."""
    if name == "cpu":
        from lancet_mlir.measure.numpy_backend import NumpyBackend

        return NumpyBackend()
    if name == "cuda":
        from lancet_mlir.measure.cuda_backend import CudaBackend

        return CudaBackend.for_rank(rank)
    raise UserError(f"unknown back-end '{name}' (choices: cpu, cuda)")


def _notes(cat: OpCatalog, backend: str) -> list[str]:
    notes = []
    if cat.collectives:
        notes.append(
            f"{len(cat.collectives)} collective op key(s) not measured by the {backend} back-end "
            "(comm tables cover collectives)"
        )
    if cat.unsupported:
        notes.append(
            f"{len(cat.unsupported)} op key(s) without a kernel not measured, e.g. "
            f"{cat.unsupported[0]}"
        )
    return notes


def measure_command(args: argparse.Namespace) -> int:
    """`lancet-profile measure MODULE --backend cpu|cuda [-o FILE]` (see the module doc)."""
    from lancet_mlir.support.mpi_util import under_mpiexec

    if under_mpiexec():
        return _measure_mpi(args)
    if args.output is not None and "{rank}" in args.output:
        args.output = args.output.replace("{rank}", "0")  # one process is rank 0
    _check_output(args.output)  # before measuring, which may take minutes
    module = _load(args.module, args.world_size)
    backend = make_backend(args.backend)
    db, cat, stats = _measure_with_progress(module, backend, args, announce=True)
    db.metadata["source"] = _source_name(args.module)
    _write(db, args.output)
    sys.stderr.write(f"{TOOL}: {summary_line(stats)}\n")
    for note in _notes(cat, args.backend):
        sys.stderr.write(f"{TOOL}: note: {note}\n")
    return 0


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "warmup": args.warmup,
        "iters": args.iters,
        "seed": args.seed,
        "rounds": getattr(args, "rounds", 3),
        "max_seconds": getattr(args, "max_seconds", None),
        "threads": getattr(args, "threads", 1) or None,
    }


def _measure_with_progress(
    module: ModuleOp, backend: Backend, args: argparse.Namespace, *, announce: bool
) -> tuple[ProfileDB, OpCatalog, MeasureStats]:
    """Measure with a progress bar on a terminal; `announce` says up front what it will do."""
    from lancet_mlir.support.progress import ProgressBar

    options = _options(args)
    keys = len(catalog_ops(module).measurable)
    if announce:
        sys.stderr.write(f"{TOOL}: {plan_line(keys, backend.name, options)}\n")
        sys.stderr.flush()
    rounds = len(round_sizes(options["iters"], options["rounds"], options["max_seconds"] is not None))
    with ProgressBar("measuring", keys * rounds) as bar:
        return measure_with_stats(module, backend, world_size=_world_size(module, args.world_size),
                                  progress=bar.update, **options)  # fmt: skip


def plan_line(keys: int, backend: str, options: dict[str, Any]) -> str:
    """What measure is about to do: keys, runs, rounds, threads, budget."""
    threads = options["threads"]
    pinned = f"BLAS threads pinned to {threads}" if threads else "BLAS threads not pinned"
    budget = f", at most {options['max_seconds']:g} s" if options["max_seconds"] is not None else ""
    rounds = len(round_sizes(options["iters"], options["rounds"], options["max_seconds"] is not None))
    return (
        f"measuring {keys} op key{'s' if keys != 1 else ''} on {backend}: {options['warmup']} "
        f"warm-up + {options['iters']} timed runs each in {rounds} round"
        f"{'s' if rounds != 1 else ''}{budget}; {pinned}"
    )


def summary_line(stats: MeasureStats) -> str:
    """How the measurement went, in one line."""
    line = f"measured {stats.keys} op keys in {stats.seconds:.1f} s"
    if stats.rounds >= 2:
        line += f"; run-to-run spread of the iteration total {stats.spread:.1%} over {stats.rounds} rounds"
    if stats.rejected:
        line += f"; {stats.rejected} outlier sample{'s' if stats.rejected != 1 else ''} rejected"
    if stats.budget_hit:
        line += "; --max-seconds reached: some keys have fewer runs than --iters"
    return line


def _check_output(output: str | None) -> None:
    if output is not None:
        from lancet_mlir.support.files import check_output_folder

        check_output_folder(output)


def _source_name(path: str) -> str:
    return "<stdin>" if path == "-" else os.path.basename(path)


def _write(db: ProfileDB, output: str | None) -> None:
    if output is None:
        sys.stdout.write(db.to_json_text())
        sys.stdout.flush()
        return
    db.save(output)


def _measure_mpi(args: argparse.Namespace) -> int:
    """Every rank measures, the profiles are averaged, rank 0 writes (all fail together;
    rank 0 prints the one error line, the other ranks exit 1 silently)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    try:
        return _measure_mpi_body(args, comm)
    except AgreedError:
        if comm.Get_rank() == 0:
            raise
        raise SystemExit(1) from None


def _write_per_rank(db: ProfileDB, pattern: str, comm: Any) -> int:
    """`-o 'prof.{rank}.json'` under mpiexec: every rank writes its own (unaveraged) profile,
    ready for `lancet-profile sync`."""
    from lancet_mlir.measure.mpi_sync import raise_if_any_failed

    error = None
    try:
        db.save(pattern.replace("{rank}", str(comm.Get_rank())))  # staged until all agree
    except Exception as exc:  # noqa: BLE001 - every rank must hear of it
        error = one_line(exc)
    raise_if_any_failed(comm, error)
    commit_outputs()
    return 0


def _measure_mpi_body(args: argparse.Namespace, comm: Any) -> int:
    from lancet_mlir.measure.mpi_sync import raise_if_any_failed, sync_profile

    rank = comm.Get_rank()
    db: ProfileDB | None = None
    cat = OpCatalog()
    stats = MeasureStats()
    error: str | None = None
    try:
        module = _load(args.module, args.world_size)
        backend = make_backend(args.backend, rank)
        db, cat, stats = _measure_with_progress(module, backend, args, announce=rank == 0)
        db.metadata["source"] = _source_name(args.module)
    except Exception as exc:  # noqa: BLE001 - every rank must hear of it
        error = one_line(exc)
    raise_if_any_failed(comm, error)
    assert db is not None
    if args.output is not None and "{rank}" in args.output:
        return _write_per_rank(db, args.output, comm)
    synced = sync_profile(db, comm)
    error = None
    try:
        fault_point("write")
        if rank == 0:
            _write(synced, args.output)  # staged: committed once every rank agreed
    except Exception as exc:  # noqa: BLE001
        error = one_line(exc)
    raise_if_any_failed(comm, error)
    if rank == 0:
        commit_outputs()
        sys.stderr.write(f"{TOOL}: rank 0 {summary_line(stats)}\n")
        for note in _notes(cat, args.backend):
            sys.stderr.write(f"{TOOL}: note: {note}\n")
    return 0

