"""The `measure` command on typed options: load the module, measure it, write the profile.

`lancet-profile measure` (tools/lancet_profile.py) maps its flags onto a `MeasureJob` and calls
`run_measure`; the library's errors name the job's fields (`max_seconds`), the tool names its
flags. Under mpiexec every rank measures (the cuda back-end on GPU `rank % device count`) and the
ranks' profiles are averaged with `mpi_sync.sync_profile`; rank 0 writes the result. With
`{rank}` in the output every rank writes its own profile instead (for a later `sync`); without
mpiexec `{rank}` is 0.

Bounds: the time budget (`MeasureOptions.max_seconds`) counts from the job's `began` (the
tool passes the time its command started), so reading and verifying the module count too; the
memory plan (`measure.check_memory_plan`) runs before anything is measured.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from xdsl.dialects.builtin import IntegerAttr, ModuleOp

from lancet_mlir import attrs
from lancet_mlir.cost.profile_db import ProfileDB
from lancet_mlir.dialects.comm import module_world_size
from lancet_mlir.measure.measure import (
    Backend,
    MeasureOptions,
    MeasureStats,
    OpCatalog,
    catalog_ops,
    measure_with_stats,
    round_plan,
)
from lancet_mlir.support.errors import AgreedError, UserError, one_line
from lancet_mlir.support.files import commit_outputs
from lancet_mlir.support.mpi_job import fault_point

TOOL = "lancet-profile"


@dataclass(frozen=True)
class MeasureJob:
    """One measurement: what to read, on which back-end, where to write, and how."""

    module: str
    """Module file ('-': stdin)."""
    backend: str = "cpu"
    output: str | None = None
    """Profile JSON to write (None: stdout); '{rank}' in it: every rank writes its own."""
    world_size: int | None = None
    """Override of the module's lancet.world_size."""
    allow_unregistered: bool = False
    """Accept ops no dialect defines (they are listed as not measured)."""
    options: MeasureOptions = field(default_factory=MeasureOptions)
    began: float | None = None
    """time.monotonic() when the command started; the time budget counts from it."""


def check_job(job: MeasureJob) -> None:
    """Checks that need no input (run on every rank under mpiexec)."""
    from lancet_mlir.support.launcher import in_mpi_job

    if in_mpi_job() and job.module == "-":
        raise UserError("under mpiexec pass the module as a file (stdin reaches rank 0 only)")
    _check_output(job.output)


def load_for_measure(
    path: str, world_size: int | None = None, allow_unregistered: bool = False
) -> ModuleOp:
    """Read, parse and verify the module at `path` (`-`: stdin); one UserError line naming the
    file (and the op's line:col) on any problem; ops no dialect defines are refused unless
    `allow_unregistered`."""
    from xdsl.context import Context
    from xdsl.dialects import get_all_dialects as xdsl_dialects

    from lancet_mlir.cost.fileio import read_text
    from lancet_mlir.dialects import get_all_dialects
    from lancet_mlir.dialects.checks import check_module
    from lancet_mlir.support.locations import LocatingParser, located_message

    fault_point("read")
    text = read_text(path)  # `-`: stdin, like lancet-run (`lancet-model ... | ... measure -`)
    if path == "-":
        path = "<stdin>"
    ctx = Context(allow_unregistered=allow_unregistered)
    for name, factory in {**xdsl_dialects(), **get_all_dialects()}.items():
        ctx.register_dialect(name, factory)
    module: ModuleOp | None = None
    try:
        module = LocatingParser(ctx, text, path).parse_module()
        if world_size is not None:
            # verify against the world size the profile will claim: a module built for 8
            # ranks whose collective shapes need 8 does not verify with --world-size 3
            module.attributes[attrs.WORLD_SIZE] = IntegerAttr(world_size, 64)
        module.verify()
        check_module(module)
        fault_point("verify")
    except Exception as exc:  # noqa: BLE001 - one line naming the file
        raise UserError(located_message(exc, path, module)) from exc
    return module


def _world_size(module: ModuleOp, override: int | None) -> int | None:
    return override if override is not None else module_world_size(module)


def make_backend(name: str, rank: int = 0) -> Backend:
    """The back-end called `name` ('cpu' or 'cuda'); UserError when it cannot run here."""
    if name == "cpu":
        from lancet_mlir.measure.numpy_backend import NumpyBackend

        return NumpyBackend()
    if name == "cuda":
        from lancet_mlir.measure.cuda_backend import CudaBackend

        return CudaBackend.for_rank(rank)
    raise UserError(f"unknown back-end '{name}' (choices: cpu, cuda)")


def notes(cat: OpCatalog, stats: MeasureStats, backend: str) -> list[str]:
    """What the profile does not cover, one line each."""
    out = []
    if cat.collectives:
        out.append(
            f"{len(cat.collectives)} collective op key(s) not measured by the {backend} back-end "
            "(comm tables cover collectives)"
        )
    if cat.unsupported:
        out.append(
            f"{len(cat.unsupported)} op key(s) without a kernel not measured, e.g. "
            f"{cat.unsupported[0]}"
        )
    if cat.unregistered:
        out.append(
            f"{len(cat.unregistered)} unregistered op(s) not measured: {', '.join(cat.unregistered)}"
        )
    if stats.too_large:
        out.append(
            f"{len(stats.too_large)} op key(s) above the memory bound not measured, e.g. {stats.too_large[0]}"
        )
    if stats.unmeasured:
        out.append(
            f"{len(stats.unmeasured)} op key(s) not measured: the time budget ran out before their "
            f"first run (e.g. {stats.unmeasured[0]}); they are missing from the profile"
        )
    if not cat.measurable:
        out.append("no op of the module has a kernel: the profile has no entries")
    return out


def plan_line(keys: int, backend: str, options: MeasureOptions) -> str:
    """What measure is about to do: keys, runs, rounds, threads, budget."""
    threads = options.threads
    pinned = f"BLAS threads pinned to {threads}" if threads else "BLAS threads not pinned"
    budget = (
        f", at most {options.max_seconds:g} s in all" if options.max_seconds is not None else ""
    )
    rounds = len(round_plan(options))
    return (
        f"measuring {keys} op key{'s' if keys != 1 else ''} on {backend}: {options.warmup} "
        f"warm-up + {options.iters} timed runs each in {rounds} round"
        f"{'s' if rounds != 1 else ''}{budget}; {pinned}"
    )


def summary_line(stats: MeasureStats) -> str:
    """How the measurement went, in one line."""
    line = f"measured {stats.measured} of {stats.keys} op keys in {stats.seconds:.1f} s"
    if stats.rounds >= 2 and stats.measured:
        line += f"; run-to-run spread of the iteration total {stats.spread:.1%} over {stats.rounds} rounds"
    if stats.rejected:
        line += f"; {stats.rejected} outlier sample{'s' if stats.rejected != 1 else ''} rejected"
    if stats.budget_hit:
        line += "; time budget reached: some keys have fewer timed runs than asked"
    return line


def run_measure(job: MeasureJob) -> int:
    """Measure `job.module` and write the profile (see the module doc)."""
    from lancet_mlir.support.launcher import in_mpi_job

    if job.began is None:
        job = dataclasses.replace(job, began=time.monotonic())
    if in_mpi_job():
        return _measure_mpi(job)
    if job.output is not None and "{rank}" in job.output:
        job = dataclasses.replace(
            job, output=job.output.replace("{rank}", "0")
        )  # one process is rank 0
    _check_output(job.output)  # before measuring, which may take minutes
    module = load_for_measure(job.module, job.world_size, job.allow_unregistered)
    backend = make_backend(job.backend)
    db, cat, stats = _measure_with_progress(module, backend, job, announce=True)
    db.metadata["source"] = _source_name(job.module)
    _write(db, job.output)
    sys.stderr.write(f"{TOOL}: {summary_line(stats)}\n")
    for note in notes(cat, stats, job.backend):
        sys.stderr.write(f"{TOOL}: note: {note}\n")
    return 0


def _measure_with_progress(
    module: ModuleOp, backend: Backend, job: MeasureJob, *, announce: bool
) -> tuple[ProfileDB, OpCatalog, MeasureStats]:
    """Measure with a progress bar on a terminal; `announce` says up front what it will do."""
    from lancet_mlir.support.progress import ProgressBar

    keys = len(catalog_ops(module).measurable)
    if announce:
        sys.stderr.write(f"{TOOL}: {plan_line(keys, backend.name, job.options)}\n")
        sys.stderr.flush()
    with ProgressBar("measuring", keys * len(round_plan(job.options))) as bar:
        return measure_with_stats(module, backend, job.options, began=job.began,
                                  world_size=_world_size(module, job.world_size),
                                  progress=bar.update)  # fmt: skip


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


def _measure_mpi(job: MeasureJob) -> int:
    """Every rank measures, the profiles are averaged, rank 0 writes (all fail together;
    rank 0 prints the one error line, the other ranks exit 1 silently)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    try:
        return _measure_mpi_body(job, comm)
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


def _measure_mpi_body(job: MeasureJob, comm: Any) -> int:
    from lancet_mlir.measure.mpi_sync import raise_if_any_failed, sync_profile

    rank = comm.Get_rank()
    db: ProfileDB | None = None
    cat = OpCatalog()
    stats = MeasureStats()
    error: str | None = None
    try:
        module = load_for_measure(job.module, job.world_size, job.allow_unregistered)
        backend = make_backend(job.backend, rank)
        db, cat, stats = _measure_with_progress(module, backend, job, announce=rank == 0)
        db.metadata["source"] = _source_name(job.module)
    except Exception as exc:  # noqa: BLE001 - every rank must hear of it
        error = one_line(exc)
    raise_if_any_failed(comm, error)
    assert db is not None
    if job.output is not None and "{rank}" in job.output:
        return _write_per_rank(db, job.output, comm)
    synced = sync_profile(db, comm)
    error = None
    try:
        fault_point("write")
        if rank == 0:
            _write(synced, job.output)  # staged: committed once every rank agreed
    except Exception as exc:  # noqa: BLE001
        error = one_line(exc)
    raise_if_any_failed(comm, error)
    if rank == 0:
        commit_outputs()
        sys.stderr.write(f"{TOOL}: rank 0 {summary_line(stats)}\n")
        for note in notes(cat, stats, job.backend):
            sys.stderr.write(f"{TOOL}: note: {note}\n")
    return 0
