"""lancet-run: execute one training iteration with numpy (the reference semantics).

```
lancet-run model.mlir                        # one rank (or --ranks N simulated ranks)
lancet-run model.mlir --ranks 4 --save out.npz
mpiexec -n 4 lancet-run model.mlir           # one MPI rank per process, real collectives
lancet-run --compare a.mlir b.mlir --ranks 4 # same inputs, outputs within tolerance?
```

Inputs are deterministic (`--seed`, see `lancet_mlir.runtime.values`) or read with
`--inputs in.npz` (keys `rank<r>/<arg index>`). `--save out.npz` writes every rank's results
under `rank<r>/<result index>` (`--save -`: to stdout; it may not be an input file);
otherwise a table of checksums is printed. Under MPI only rank
0 prints and writes; a failure on any rank ends every rank with exit code 1 and one line
naming the failing rank.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from lancet_mlir.tools.cli import (
    ArgumentParser,
    non_negative_float,
    non_negative_int,
    positive_int,
)
from lancet_mlir.tools.errors import UserError, run_cli

TOOL = "lancet-run"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of lancet-run."""
    p = ArgumentParser(
        prog=TOOL, description="Execute a lancet-mlir module with numpy (optionally on MPI)."
    )
    p.add_argument("module", nargs="?", help="MLIR file to run ('-' reads stdin)")
    p.add_argument(
        "--func",
        default=None,
        metavar="NAME",
        help="function to run (default: the only/first public one)",
    )
    p.add_argument(
        "--ranks",
        type=positive_int,
        default=None,
        metavar="N",
        help="simulate N ranks in this process (default 1; under mpiexec: the MPI size)",
    )
    p.add_argument(
        "--seed",
        type=non_negative_int,
        default=0,
        help="seed of the deterministic inputs (default 0)",
    )
    p.add_argument(
        "--inputs",
        default=None,
        metavar="IN.npz",
        help="argument values instead of random ones (keys rank<r>/<arg index>; -: stdin)",
    )
    p.add_argument(
        "--save",
        default=None,
        metavar="OUT.npz",
        help="write every rank's results (keys rank<r>/<result index>)",
    )
    p.add_argument(
        "--compare",
        nargs=2,
        default=None,
        metavar=("A", "B"),
        help="run two modules on the same inputs and compare their outputs",
    )
    p.add_argument(
        "--rtol",
        type=non_negative_float,
        default=None,
        help="relative tolerance of --compare (default by dtype: f64 1e-9, f32 1e-4, "
        "f16 1e-2; integers exact)",
    )
    p.add_argument(
        "--atol",
        type=non_negative_float,
        default=None,
        help="absolute tolerance of --compare (default by dtype: f64 1e-12, f32 1e-5, "
        "f16 1e-3; integers exact)",
    )
    p.add_argument(
        "--promote",
        choices=("f64",),
        default=None,
        help="--compare: run both modules with every float type widened to f64",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="--compare: print every rank x result row, not only the summary",
    )
    return p


def _check_args(args: argparse.Namespace) -> None:
    if args.compare is None and args.module is None:
        raise UserError("give a module to run, or --compare A B")
    if args.compare is not None and args.module is not None:
        raise UserError("give either a module or --compare A B, not both")
    if args.compare is not None and args.save is not None:
        raise UserError("--save cannot be combined with --compare")
    if args.promote is not None and args.compare is None:
        raise UserError("--promote applies to --compare only")
    if args.compare is not None and args.compare.count("-") > 1:
        raise UserError("--compare: stdin ('-') can hold only one of the two modules")
    if args.inputs == "-" and "-" in (args.compare or [args.module]):
        raise UserError("--inputs -: stdin ('-') already holds the module; pass one as a file")
    from lancet_mlir.support.files import (
        CLOSED_STDOUT,
        check_output_folder,
        declare_inputs,
        stdout_is_open,
    )

    if not stdout_is_open():  # the summary (or the comparison) would be lost without a word
        raise UserError(CLOSED_STDOUT)

    inputs = [*(args.compare or [args.module]), args.inputs]
    declare_inputs(*inputs)
    if args.save is not None:
        check_output_folder(args.save, "--save", [p for p in inputs if p])


def _setup(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line; under MPI also check what must hold before any collective."""
    from lancet_mlir.support.mpi_job import in_mpi_job, launcher_world_size

    args = build_parser().parse_args(argv)
    size = launcher_world_size()
    if in_mpi_job() and "-" in (*(args.compare or [args.module]), args.inputs):
        # only rank 0 gets stdin: the others would wait on it forever (checked before any read)
        raise UserError(
            "under mpiexec pass the module and --inputs as files (stdin reaches rank 0 only)"
        )
    if in_mpi_job() and args.ranks is not None and args.ranks != size:
        raise UserError(f"--ranks {args.ranks} does not match the MPI world size {size}")
    if args.ranks is not None and not in_mpi_job():
        from lancet_mlir.runtime.limits import check_simulated_ranks

        check_simulated_ranks(args.ranks)
    return args


def _inputs(args: argparse.Namespace) -> Any:
    if args.inputs is None:
        return None
    from lancet_mlir.runtime.results import load_rank_arrays

    return load_rank_arrays(args.inputs)


# ---- one process (simulated ranks) ---------------------------------------------------------


def _run_local(args: argparse.Namespace) -> int:
    from lancet_mlir.runtime.executor import execute
    from lancet_mlir.runtime.loader import load_module
    from lancet_mlir.runtime.results import print_summary, save_npz
    from lancet_mlir.support.progress import ProgressBar

    ranks = args.ranks or 1
    if args.compare is not None:
        from lancet_mlir.runtime.compare import compare_modules, diagnose

        a, b = (load_module(p) for p in args.compare)
        widen = 2 if args.promote else 1
        _check_compare_memory([a.module, b.module], args, ranks, widen)
        inputs = _inputs(args)
        with ProgressBar("comparing", 1) as bar:
            result = compare_modules(a, b, ranks=ranks, seed=args.seed, rtol=args.rtol,
                                     atol=args.atol, func=args.func, inputs=inputs,
                                     progress=bar.update, promote=args.promote)  # fmt: skip
        if not result.within_tolerance and _fits(lambda: _check_compare_memory(
                [a.module, b.module], args, ranks, 2)):  # fmt: skip
            result = diagnose(result, a, b, ranks=ranks, seed=args.seed, func=args.func,
                              inputs=inputs)  # fmt: skip
        return _report_compare(result, args)
    loaded = load_module(args.module)
    _check_memory(loaded.module, args.func, ranks, args.module)
    with ProgressBar("running", 1) as bar:
        res = execute(loaded.module, ranks=ranks, seed=args.seed, func=args.func,
                      inputs=_inputs(args), progress=bar.update)  # fmt: skip
    if args.save is not None:
        save_npz(args.save, res.flat())
    else:
        print_summary(res, args.seed)
    return 0


def _fits(check: Any) -> bool:
    """True when `check()` raises no UserError (a memory check)."""
    try:
        check()
    except UserError:
        return False
    return True


def _check_compare_memory(
    modules: list[Any], args: argparse.Namespace, ranks: int, widen: int = 1
) -> None:
    """Refuse before allocating when the two runs of --compare together cannot fit (the
    first run's outputs are held while the second runs); `widen` 2: in f64."""
    from lancet_mlir.runtime.executor import select_function
    from lancet_mlir.runtime.limits import check_memory, run_bytes

    funcs = [select_function(m, args.func) for m in modules]
    needed = sum(run_bytes(f, ranks) for f in funcs) * widen
    names = " and ".join(
        f"@{f.sym_name.data} of {p}" for f, p in zip(funcs, args.compare, strict=True)
    )
    check_memory(needed, f"comparing {names} on {ranks} rank(s){' in f64' if widen > 1 else ''}")


def _check_memory(module: Any, func: str | None, ranks: int, path: str) -> None:
    """Refuse before allocating when the run's values cannot fit in memory."""
    from lancet_mlir.runtime.executor import select_function
    from lancet_mlir.runtime.limits import check_run_memory

    chosen = select_function(module, func)
    what = f"running @{chosen.sym_name.data} of {path} on {ranks} rank(s)"
    check_run_memory(chosen, ranks, what)


def _report_compare(result: Any, args: argparse.Namespace) -> int:
    from lancet_mlir.runtime.report import print_compare

    print_compare(result, args.compare[0], args.compare[1], verbose=args.verbose)
    if result.ok:
        return 0
    failures = result.failures()
    what = "; ".join(result.problems) or (
        f"{len(failures)} of {len(result.diffs)} outputs differ beyond tolerance "
        f"(max abs err {result.max_abs_err:.3g}, {result.tolerance_text()})"
    )
    if result.rounding is not None:
        what += "; they differ in f64 too: not only the order of sums"
    floats = failures and all(d.dtype.startswith("float") for d in failures)
    if floats and result.rounding is None and not result.promoted:
        # a pass that reorders a sum (partitioning, fusion) changes float results by a
        # rounding error: in f64 that error is ~1e-15, a real bug is not
        what += (
            "; all of them floats: if only the order of sums differs, the modules agree "
            "in f64 (--promote f64)"
        )
    raise UserError(what)


# ---- MPI: one rank per process ---------------------------------------------------------------


def _run_mpi(args: argparse.Namespace) -> int:
    from lancet_mlir.runtime.mpi import MpiCollectives, RankFailure, world_comm

    comm = world_comm()
    coll = MpiCollectives(comm, TOOL)
    try:
        return _run_mpi_body(args, comm, coll)
    except RankFailure as failure:  # every rank knows: rank 0 prints it once
        if coll.rank == 0:
            raise
        raise SystemExit(1) from failure


def _agree_on_signatures(a: Any, b: Any, func: str | None, comm: Any) -> None:
    """Every rank checks that the two modules' functions take the same arguments and learns
    of any rank's failure (`RankFailure`: rank 0 prints it once, not every rank)."""
    from lancet_mlir.runtime.compare import check_same_signature
    from lancet_mlir.runtime.mpi import agree

    try:
        check_same_signature(a.module, b.module, func, (a.source, b.source))
        error = None
    except UserError as exc:
        error = str(exc)
    agree(comm, error)


def _run_mpi_body(args: argparse.Namespace, comm: Any, coll: Any) -> int:
    from lancet_mlir.runtime.executor import execute
    from lancet_mlir.runtime.results import gather_results, print_summary, save_npz
    from lancet_mlir.runtime.sync import load_on_all_ranks, rank0_then_broadcast

    def checked_inputs() -> Any:
        _check_args(args)
        return _inputs(args)

    paths = args.compare if args.compare is not None else [args.module]
    modules = load_on_all_ranks(paths, comm, checked_inputs)
    inputs = modules.extra
    _agree_on_memory(args, paths, [m.module for m in modules.loaded], comm)
    if args.compare is not None:
        from lancet_mlir.runtime.compare import compare_modules

        a, b = modules.loaded
        _agree_on_signatures(a, b, args.func, comm)
        options = {"seed": args.seed, "func": args.func, "inputs": inputs, "comm": coll}
        result = compare_modules(a, b, rtol=args.rtol, atol=args.atol, promote=args.promote,
                                 **options)  # fmt: skip
        merged = _gather_compare(result, comm)
        if _rerun_in_f64(merged, args, [a.module, b.module], comm):
            # as `compare.diagnose` does in one process: is it the rounding of reordered sums?
            again = _gather_compare(compare_modules(a, b, promote="f64", **options), comm)
            merged.rounding = again if comm.Get_rank() == 0 else None
        return rank0_then_broadcast(comm, lambda: _report_compare(merged, args))
    res = gather_results(
        execute(modules.loaded[0].module, seed=args.seed, func=args.func, inputs=inputs, comm=coll),
        comm,
    )

    def write() -> int:
        if args.save is not None:
            save_npz(args.save, res.flat())
        else:
            print_summary(res, args.seed)
        return 0

    return rank0_then_broadcast(comm, write)


def _agree_on_memory(
    args: argparse.Namespace, paths: list[str], modules: list[Any], comm: Any
) -> None:
    """Every rank checks that the ranks sharing its machine fit in memory, then they agree."""
    import os

    from lancet_mlir.runtime.mpi import agree
    from lancet_mlir.support.errors import one_line

    local = os.environ.get("MPI_LOCALNRANKS", "1")  # Hydra: ranks started on this machine
    error = None
    try:
        for path, module in zip(paths, modules, strict=True):
            _check_memory(module, args.func, int(local) if local.isdigit() else 1, path)
    except Exception as exc:  # noqa: BLE001 - every rank must hear of it
        error = one_line(exc)
    agree(comm, error)


def _rerun_in_f64(merged: Any, args: argparse.Namespace, modules: list[Any], comm: Any) -> bool:
    """Whether every rank compares again in f64 (`compare.wants_f64_rerun`, decided on rank 0,
    which holds the merged result) and every rank's machine fits both runs in f64."""
    import os

    from lancet_mlir.runtime.compare import wants_f64_rerun

    wanted = comm.bcast(wants_f64_rerun(merged) if comm.Get_rank() == 0 else None, root=0)
    if not wanted:
        return False
    local = os.environ.get("MPI_LOCALNRANKS", "1")  # Hydra: ranks started on this machine
    ranks = int(local) if local.isdigit() else 1
    fits = _fits(lambda: _check_compare_memory(modules, args, ranks, 2))
    return all(comm.allgather(fits))


def _gather_compare(result: Any, comm: Any) -> Any:
    """Every rank's diffs merged on rank 0 (other ranks keep their own)."""
    parts = comm.gather((result.diffs, result.problems), root=0)
    if comm.Get_rank() != 0:
        return result
    from lancet_mlir.runtime.compare import CompareResult

    merged = CompareResult(result.rtol, result.atol, promoted=result.promoted)
    for diffs, problems in parts:
        merged.diffs.extend(diffs)
        merged.problems.extend(problems)
    merged.diffs.sort(key=lambda d: (d.rank, d.index))
    return merged


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of `lancet-run`."""

    def body() -> int:
        from lancet_mlir.support.errors import OptionError
        from lancet_mlir.support.mpi_job import agree_on_setup, args_fingerprint, in_mpi_job

        try:
            args = agree_on_setup(lambda: _setup(argv), args_fingerprint)
            if in_mpi_job():
                return _run_mpi(args)
            _check_args(args)
            return _run_local(args)
        except OptionError as exc:  # the library names its parameter, we name our flag
            raise exc.for_flag() from None

    run_cli(TOOL, body)


if __name__ == "__main__":
    main(sys.argv[1:])
