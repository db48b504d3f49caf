"""`lancet-profile measure`: time every distinct op key of a module on a real back-end.

For each distinct op key (`keys.op_key`) of the module's compute ops, the back-end runs the
kernel `warmup` times unmeasured and then `iters` times measured; the samples are averaged
by the profile layer (`ProfileDB.add_samples` with no further warm-up cut, i.e.
`average_samples`' symmetric trim) into a ProfileDB. Back-ends:

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
ranks' profiles are averaged with `mpi_sync.sync_profile`; rank 0 writes the result.
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

from lancet_mlir.dialects.comm import WORLD_SIZE_ATTR, CollectiveOp
from lancet_mlir.profile.keys import op_key
from lancet_mlir.profile.profile_db import ProfileDB
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


def measure_module(
    module: ModuleOp,
    backend: Backend,
    *,
    warmup: int = 5,
    iters: int = 20,
    seed: int = 0,
    world_size: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[ProfileDB, OpCatalog]:
    """Measure every measurable op key of `module` with `backend`."""
    if iters < 1:
        raise UserError(f"--iters must be >= 1, got {iters}")
    if warmup < 0:
        raise UserError(f"--warmup must be >= 0, got {warmup}")
    cat = catalog_ops(module)
    db = ProfileDB()
    for n, (key, op) in enumerate(cat.measurable.items()):
        if progress is not None:
            progress(f"[{n + 1}/{len(cat.measurable)}] {key}")
        try:
            fn = backend.prepare(op, synthetic_inputs(op, seed))
            samples = backend.time(fn, warmup, iters)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - name the op key that failed
            raise UserError(f"{key}: {backend.name} back-end failed: {one_line(exc)}") from exc
        db.add_samples(key, samples, warmup=0)  # warm-up runs were not recorded at all
    db.metadata.update(backend.metadata())
    db.metadata.update(
        {
            "backend": backend.name,
            "device": backend.device,
            "warmup": warmup,
            "iters": iters,
            "seed": seed,
            "collectives": "not measured (use comm tables)",
        }
    )
    if world_size is not None:
        db.metadata["world_size"] = world_size
    return db, cat


# ---- the command ---------------------------------------------------------------------------------


def check_measure_args(args: argparse.Namespace) -> None:
    """Checks of `measure`'s arguments that need no input (run on every rank under mpiexec)."""
    from lancet_mlir.profile.mpi_util import under_mpiexec

    if under_mpiexec() and args.module == "-":
        raise UserError("under mpiexec pass the module as a file (stdin reaches rank 0 only)")
    _check_output(args.output)


def _load(path: str, world_size: int | None = None) -> ModuleOp:
    from xdsl.context import Context
    from xdsl.dialects import get_all_dialects as xdsl_dialects
    from xdsl.parser import Parser

    from lancet_mlir.dialects import get_all_dialects
    from lancet_mlir.dialects.checks import check_module
    from lancet_mlir.profile.fileio import read_text

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
        from lancet_mlir.profile.numpy_backend import NumpyBackend

        return NumpyBackend()
    if name == "cuda":
        from lancet_mlir.profile.cuda_backend import CudaBackend

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
    from lancet_mlir.profile.mpi_util import under_mpiexec

    if under_mpiexec():
        return _measure_mpi(args)
    _check_output(args.output)  # before measuring, which may take minutes
    module = _load(args.module, args.world_size)
    backend = make_backend(args.backend)
    db, cat = measure_module(module, backend, warmup=args.warmup, iters=args.iters,
                             seed=args.seed, world_size=_world_size(module, args.world_size))
    db.metadata["source"] = _source_name(args.module)
    _write(db, args.output)
    for note in _notes(cat, args.backend):
        sys.stderr.write(f"{TOOL}: note: {note}\n")
    return 0


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


def _measure_mpi_body(args: argparse.Namespace, comm: Any) -> int:
    from lancet_mlir.profile.mpi_sync import raise_if_any_failed, sync_profile

    rank = comm.Get_rank()
    db: ProfileDB | None = None
    cat = OpCatalog()
    error: str | None = None
    try:
        module = _load(args.module, args.world_size)
        backend = make_backend(args.backend, rank)
        db, cat = measure_module(module, backend, warmup=args.warmup, iters=args.iters,
                                 seed=args.seed, world_size=_world_size(module, args.world_size))
        db.metadata["source"] = _source_name(args.module)
    except Exception as exc:  # noqa: BLE001 - every rank must hear of it
        error = one_line(exc)
    raise_if_any_failed(comm, error)
    assert db is not None
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
        for note in _notes(cat, args.backend):
            sys.stderr.write(f"{TOOL}: note: {note}\n")
    return 0

