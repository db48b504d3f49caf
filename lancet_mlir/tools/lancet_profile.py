"""lancet-profile: measure op timings and convert, combine and inspect profiles and comm tables.

    lancet-profile measure model.mlir --backend cpu|cuda -o prof.json
    mpiexec -n 4 lancet-profile sync prof.{rank}.json -o prof.json
    lancet-profile from-nccl-tests alltoall_perf.log -o a2a.csv
    lancet-profile from-kineto rank0.pt.trace.json [--step N] -o prof.json
    lancet-profile from-lancet profile_x.profile -o prof.json
    lancet-profile from-lancet-csv alltoall_perf_2x8.csv --kind all_to_all --group-size 16 -o a2a.csv
    lancet-profile from-xla xla-collective-perf.csv --device h100 -o comm_h100.csv
    lancet-profile from-xla-matmul xla-matmul-perf.csv --device h100 -o matmul_h100.csv
    lancet-profile show prof.json
    lancet-profile merge a.json b.json -o ab.json
    lancet-profile collective all_to_all 16MiB --ranks 16 --cluster p3dn

`-` as an input reads stdin, `-o -` writes stdout; an output may not be one of the inputs.
File formats: docs/formats.md. Errors end with one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lancet_mlir.tools.cli import (
    ArgumentParser,
    byte_size,
    non_empty,
    non_negative_int,
    positive_float,
    positive_int,
)
from lancet_mlir.tools.errors import UserError, run_cli

if TYPE_CHECKING:
    from rich.console import Console

    from lancet_mlir.measure.command import MeasureJob

TOOL = "lancet-profile"
STARTED = time.monotonic()
"""When the command started (module import): `measure --max-seconds` counts from here."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = ArgumentParser(
        prog=TOOL, description="Measure, convert and inspect lancet-mlir profiles."
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)

    p = sub.add_parser("measure", help="measure every op of a module (numpy or CUDA back-end)")
    p.add_argument("module", metavar="module.mlir", help="module to measure ('-' reads stdin)")
    p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="FILE",
        help="profile JSON to write (default: stdout); '{rank}' in it: under mpiexec "
        "every rank writes its own, unaveraged profile",
    )
    p.add_argument(
        "--warmup",
        type=non_negative_int,
        default=5,
        help="unmeasured warm-up runs per op (default 5)",
    )
    p.add_argument(
        "--iters", type=positive_int, default=20, help="measured runs per op (default 20)"
    )
    p.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of the random inputs (default 0)"
    )
    p.add_argument(
        "--world-size",
        type=positive_int,
        default=None,
        metavar="N",
        help="override the module's lancet.world_size",
    )
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=3,
        help="split the timed runs into rounds over all keys; the rounds give the "
        "run-to-run spread",
    )
    p.add_argument(
        "--max-seconds",
        type=positive_float,
        default=None,
        metavar="S",
        help="time budget of the whole command, warm-ups included: every key is timed "
        "once, then rounds run while time is left; keys not reached are reported",
    )
    p.add_argument(
        "--max-memory",
        type=byte_size,
        default=None,
        metavar="SIZE",
        help="skip (and report) the op keys whose estimated peak memory is above SIZE "
        "(e.g. 3GiB); without it a key that does not fit in the free memory is refused",
    )
    p.add_argument(
        "--allow-unregistered-dialect",
        action="store_true",
        help="accept ops no dialect defines (they are not measured, and listed)",
    )
    p.add_argument(
        "--threads",
        type=non_negative_int,
        default=1,
        metavar="N",
        help="BLAS threads during measurement (threadpoolctl); 0 leaves them alone",
    )

    p = sub.add_parser("sync", help="average profiles over MPI ranks (run under mpiexec)")
    p.add_argument("input", help="this rank's profile; '{rank}' is replaced by the rank")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        help="output profile; with '{rank}' every rank writes one, else rank 0 writes",
    )

    p = sub.add_parser("from-nccl-tests", help="comm table CSV from nccl-tests output")
    p.add_argument("logs", nargs="+", metavar="LOG")
    p.add_argument("-o", "--output", default=None, help="CSV to write (default: stdout)")
    p.add_argument("--kind", default=None, help="collective kind (default: from the log)")
    p.add_argument(
        "--group-size",
        type=positive_int,
        default=None,
        help="ranks per collective (default: from the log's '#  Rank' lines)",
    )

    p = sub.add_parser(
        "from-kineto", help="profile JSON of the ATen ops of PyTorch profiler traces"
    )
    p.add_argument("traces", nargs="+", metavar="TRACE", help="Kineto trace(s), .json or .json.gz")
    p.add_argument(
        "--step",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="ProfilerStep#N (default: the last step)",
    )
    p.add_argument("-o", "--output", default=None, help="profile JSON to write (default: stdout)")

    p = sub.add_parser("from-lancet", help="profile JSON from Lancet's binary .profile")
    p.add_argument("input", metavar="FILE.profile")
    p.add_argument("-o", "--output", default=None, help="JSON to write (default: stdout)")
    p.add_argument(
        "--device",
        default=None,
        type=non_empty,
        help=f"device to record in the metadata, one of: {_devices()}",
    )

    p = sub.add_parser("from-lancet-csv", help="comm table CSV from a Lancet supplement CSV")
    p.add_argument("input", metavar="FILE.csv")
    p.add_argument("--kind", required=True, help="collective kind, e.g. all_to_all")
    p.add_argument("--group-size", type=positive_int, required=True)
    p.add_argument("-o", "--output", default=None, help="CSV to write (default: stdout)")

    p = sub.add_parser("from-xla", help="comm table CSV from XLA's collective perf table")
    p.add_argument("input", metavar="xla-collective-perf.csv")
    _gpu_options(p)
    p.add_argument("-o", "--output", default=None, help="CSV to write (default: stdout)")

    p = sub.add_parser("from-xla-matmul", help="matmul calibration CSV from XLA's matmul table")
    p.add_argument("input", metavar="xla-matmul-perf.csv")
    _gpu_options(p)
    p.add_argument("-o", "--output", default=None, help="CSV to write (default: stdout)")

    p = sub.add_parser("show", help="print a profile, comm table or matmul table as a table")
    p.add_argument("input", metavar="FILE")
    p.add_argument(
        "--sort", choices=("key", "mean"), default="key", help="profile entry order (default: key)"
    )
    p.add_argument("--limit", type=positive_int, default=None, help="show at most N rows")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--device",
        default=None,
        type=non_empty,
        help=f"for an XLA perf table: the device whose rows to show, one of: {_devices()}",
    )
    group.add_argument(
        "--gpu", default=None, help="for an XLA perf table: the XLA gpu column value (e.g. sm_90)"
    )

    p = sub.add_parser("collective", help="what the cost model charges for one collective")
    p.add_argument("kind", help="allreduce, allgather, reduce_scatter, all_to_all (or aliases)")
    p.add_argument(
        "size",
        type=byte_size,
        help="payload bytes (nccl-tests convention): 1048576, 64KiB, 16MiB, 1GiB",
    )
    p.add_argument("--ranks", type=positive_int, required=True, help="ranks in the group")
    _cost_options(p)

    p = sub.add_parser("merge", help="merge profiles (count-weighted means)")
    p.add_argument("inputs", nargs="+", metavar="FILE")
    p.add_argument("-o", "--output", required=True)
    return parser


def _devices() -> str:
    from lancet_mlir.cost.devices import device_names

    return ", ".join(device_names())


def _gpu_options(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--device", default=None, type=non_empty, help=f"device name, one of: {_devices()}"
    )
    group.add_argument(
        "--gpu", default=None, type=non_empty, help="XLA gpu column value (e.g. sm_90)"
    )


def _cost_options(p: argparse.ArgumentParser) -> None:
    """The hardware flags of lancet-opt (device, cluster preset, network overrides, tables)."""
    from lancet_mlir.cost.clusters import cluster_names
    from lancet_mlir.cost.devices import device_names

    p.add_argument(
        "--device",
        default=None,
        type=non_empty,
        help=f"GPU: {', '.join(device_names())} (default: the cluster's, else h100)",
    )
    p.add_argument("--cluster", default=None, help=f"cluster preset: {', '.join(cluster_names())}")
    p.add_argument(
        "--gpus-per-node",
        type=positive_int,
        default=None,
        metavar="N",
        help="GPUs per NVLink domain (default: the cluster's / device's)",
    )
    p.add_argument(
        "--network-gbps",
        type=positive_float,
        default=None,
        metavar="F",
        help="inter-node Gb/s per GPU (default: the cluster's / device's)",
    )
    p.add_argument(
        "--comm-table",
        action="append",
        default=[],
        metavar="FILE",
        help="measured collective times (repeatable)",
    )


def _xla_gpu(args: argparse.Namespace) -> str:
    if args.gpu:
        return args.gpu
    from lancet_mlir.cost.devices import get_device

    device = get_device(args.device)
    if device.xla_gpu is None:
        raise UserError(f"device {device.name} has no XLA data; pass --gpu")
    return device.xla_gpu


def _emit(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    from lancet_mlir.support.files import write_atomic

    write_atomic(output, text)


def _setup(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse and check the command line (on every rank under mpiexec, before any collective)."""
    args = build_parser().parse_args(argv)
    _check_paths(args)
    if args.command == "measure":
        from lancet_mlir.measure.command import check_job

        check_job(measure_job(args))
    return args


def _check_paths(args: argparse.Namespace) -> None:
    """Declare the inputs and check `-o` before any work: an output never replaces an input."""
    from lancet_mlir.support.files import check_output_folder, declare_inputs

    inputs = [getattr(args, name, None) for name in ("module", "input")]
    inputs += [
        *getattr(args, "logs", []),
        *getattr(args, "inputs", []),
        *getattr(args, "traces", []),
    ]
    inputs = [p for p in inputs if p]
    declare_inputs(*inputs)
    output = getattr(args, "output", None)
    if output is not None and "{rank}" not in output:
        check_output_folder(output, "-o", inputs)


# ---- subcommands ---------------------------------------------------------------------------------
def measure_job(args: argparse.Namespace, began: float | None = None) -> MeasureJob:
    """`measure`'s flags as the library's typed job (its option errors name our flags)."""
    from lancet_mlir.measure.command import MeasureJob
    from lancet_mlir.measure.measure import MeasureOptions
    from lancet_mlir.support.errors import OptionError

    try:
        options = MeasureOptions(warmup=args.warmup, iters=args.iters, seed=args.seed,
                                 rounds=args.rounds, max_seconds=args.max_seconds,
                                 threads=args.threads or None, max_memory=args.max_memory)  # fmt: skip
    except OptionError as exc:
        raise exc.for_flag() from None
    return MeasureJob(module=args.module, backend=args.backend, output=args.output,
                      world_size=args.world_size, options=options, began=began,
                      allow_unregistered=args.allow_unregistered_dialect)  # fmt: skip


def cmd_measure(args: argparse.Namespace) -> int:
    """Delegate to the measurement back-ends."""
    from lancet_mlir.measure.command import run_measure
    from lancet_mlir.measure.measure import MemoryRefused

    try:
        return run_measure(measure_job(args, STARTED)) or 0
    except MemoryRefused as exc:
        raise UserError(f"{exc}; --max-memory SIZE skips the op keys above SIZE") from None


def cmd_sync(args: argparse.Namespace) -> int:
    """Average this rank's profile with every other rank's and write the result."""
    from mpi4py import MPI

    from lancet_mlir.support.errors import AgreedError

    comm = MPI.COMM_WORLD
    try:
        return _sync_body(args, comm)
    except AgreedError:  # every rank knows: rank 0 prints the one line, the others exit 1
        if comm.Get_rank() == 0:
            raise
        raise SystemExit(1) from None


def _sync_body(args: argparse.Namespace, comm: Any) -> int:
    from lancet_mlir.measure.mpi_sync import load_and_sync, raise_if_any_failed
    from lancet_mlir.support.files import commit_outputs
    from lancet_mlir.support.mpi_job import fault_point

    db = load_and_sync(args.input, comm)
    rank = comm.Get_rank()
    error = None
    try:
        fault_point("write")
        if "{rank}" in args.output or rank == 0:
            db.save(args.output.replace("{rank}", str(rank)))  # staged until all agree
    except UserError as exc:
        error = str(exc)
    raise_if_any_failed(comm, error)
    commit_outputs()
    return 0


def cmd_from_nccl_tests(args: argparse.Namespace) -> int:
    """Convert nccl-tests logs to our comm-table CSV."""
    from lancet_mlir.cost.comm_loaders import parse_nccl_tests, table_csv_text
    from lancet_mlir.cost.comm_model import CommTable
    from lancet_mlir.cost.fileio import read_text

    table = CommTable()
    for log in args.logs:
        table.extend(parse_nccl_tests(read_text(log), log, args.kind, args.group_size))
    sources = ", ".join(args.logs)
    _emit(
        table_csv_text(table, (f"from nccl-tests output: {sources} (in-place times)",)), args.output
    )
    return 0


def cmd_from_kineto(args: argparse.Namespace) -> int:
    """Measured GPU time per ATen op of a Kineto trace (importers/traces/profile.py)."""
    from lancet_mlir.importers.traces import load_steps
    from lancet_mlir.importers.traces.profile import profile_from_steps

    steps = load_steps(args.traces, args.step, tool="lancet-profile")
    if any(st.period_basis == "none" for st in steps):  # Chakra: no times to link by
        raise UserError(
            f"{args.traces[0]}: a Chakra trace has no ATen ops with input shapes: "
            "from-kineto needs a PyTorch profiler (Kineto) trace"
        )
    db = profile_from_steps(steps)
    if not db.entries:
        raise UserError(
            f"{args.traces[0]}: no GPU kernel of step {steps[0].step} is linked to an ATen op "
            "(a cpu_op event): nothing to profile"
        )
    _emit(db.to_json_text(), args.output)
    return 0


def cmd_from_lancet(args: argparse.Namespace) -> int:
    """Convert a Lancet .profile to our JSON profile."""
    from lancet_mlir.cost.profile_db import ProfileDB

    if not args.input.endswith(".profile"):
        raise UserError(f"{args.input}: expected a Lancet .profile file")
    db = ProfileDB.load(args.input)
    if args.device:
        from lancet_mlir.cost.devices import canonical_device_name

        db.metadata["device"] = canonical_device_name(args.device)  # sm_90 -> h100
    _emit(db.to_json_text(), args.output)
    return 0


def cmd_from_lancet_csv(args: argparse.Namespace) -> int:
    """Convert a Lancet supplement CSV (32-bit words, µs) to our comm-table CSV."""
    from lancet_mlir.cost.comm_loaders import parse_lancet_supplement, table_csv_text
    from lancet_mlir.cost.fileio import read_text

    table = parse_lancet_supplement(read_text(args.input), args.kind, args.group_size, args.input)
    comment = f"from Lancet supplement CSV {args.input} (bytes = 4 x size in 32-bit words)"
    _emit(table_csv_text(table, (comment,)), args.output)
    return 0


def cmd_from_xla(args: argparse.Namespace) -> int:
    """Extract one GPU's collectives from XLA's perf table into our comm-table CSV."""
    from lancet_mlir.cost.comm_loaders import parse_xla_table, table_csv_text
    from lancet_mlir.cost.fileio import read_text

    gpu = _xla_gpu(args)
    table = parse_xla_table(read_text(args.input), gpu, args.input)
    comments = (
        f"Collective times of XLA's default GPU perf table, gpu {gpu} (est_time_us per bytes,",
        "group_size); source: openxla/xla, Apache-2.0. See lancet_mlir/data/README.md.",
    )
    _emit(table_csv_text(table, comments), args.output)
    return 0


def cmd_from_xla_matmul(args: argparse.Namespace) -> int:
    """Median matmul time per FLOP count for one GPU from XLA's matmul perf table."""
    from lancet_mlir.cost.fileio import read_text
    from lancet_mlir.cost.roofline import MATMUL_TABLE_HEADER, derive_matmul_table

    gpu = _xla_gpu(args)
    rows = derive_matmul_table(read_text(args.input), gpu, args.input)
    lines = [
        f"# Median matmul time per FLOP count (2*b*m*n*k) of XLA's matmul perf table, gpu {gpu};",
        "# f32 rows ran at XLA's default precision (TF32) and are stored as tf32.",
        "# source: openxla/xla, Apache-2.0. See lancet_mlir/data/README.md.",
        ",".join(MATMUL_TABLE_HEADER),
    ]
    lines += [f"{d},{f},{round(t, 4)!r}" for d, f, t in rows]  # 0.1 ns: below any noise
    _emit("\n".join(lines) + "\n", args.output)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Pretty-print a profile (.json/.profile) or a comm table (.csv/.log)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(soft_wrap=False)
    if args.input.endswith((".json", ".profile")):
        from lancet_mlir.cost.profile_db import ProfileDB

        db = ProfileDB.load(args.input)
        items = sorted(db.entries.items())
        if args.sort == "mean":
            items.sort(key=lambda kv: (-kv[1].mean_us, kv[0]))
        shown = items[: args.limit]
        more = f" (showing {len(shown)})" if len(shown) < len(items) else ""
        console.print(f"{args.input}: {len(items)} entries{more}", highlight=False)
        key_stats = db.metadata.get("key_stats")
        key_stats = key_stats if isinstance(key_stats, dict) else {}
        table = Table()
        columns = ["op key", "mean us", "std us", "min us", "max us", "count"]
        columns += ["median us", "spread"] if key_stats else []
        for col in columns:
            table.add_column(col, justify="left" if col == "op key" else "right")
        for key, e in shown:
            row = [key, f"{e.mean_us:.3f}", f"{e.std_us:.3f}", f"{e.min_us:.3f}", f"{e.max_us:.3f}",
                   str(e.count)]  # fmt: skip
            if key_stats:
                extra = key_stats.get(key, {})
                row += [str(extra.get("median_us", "")), str(extra.get("spread", ""))]
            table.add_row(*row)
        console.print(table)
        if db.metadata:
            meta = ", ".join(f"{k}={_meta_value(v)}" for k, v in sorted(db.metadata.items())
                             if k != "key_stats")  # fmt: skip
            console.print(f"metadata: {meta}", highlight=False)
        return 0
    from lancet_mlir.cost.comm_loaders import XLA_HEADER, load_comm_table
    from lancet_mlir.cost.fileio import read_text
    from lancet_mlir.cost.roofline import MATMUL_TABLE_HEADER

    first = _first_content_line(read_text(args.input))
    if first == ",".join(MATMUL_TABLE_HEADER):
        return _show_matmul_table(args, console)
    gpu = None
    if args.device or args.gpu:
        gpu = _xla_gpu(args)
    elif first == ",".join(XLA_HEADER):
        raise UserError(f"{args.input}: an XLA perf table holds several GPUs; pass --device D "
                        "or --gpu G to choose one")  # fmt: skip
    comm = load_comm_table(args.input, gpu)
    console.print(f"{args.input}: {len(comm)} samples", highlight=False)
    table = Table()
    for col in ("kind", "group", "bytes", "time us"):
        table.add_column(col, justify="left" if col == "kind" else "right")
    for kind, g, nbytes, t in comm.rows()[: args.limit]:
        table.add_row(kind, str(g), str(nbytes), f"{t:.3f}")
    console.print(table)
    return 0


def _meta_value(value: object) -> str:
    """A metadata value for `show`: a list or mapping of more than 3 items as its length (the
    per-key statistics are table columns; `--limit` must bound what is printed)."""
    if isinstance(value, list | dict) and len(value) > 3:
        return f"<{len(value)} items>"
    return str(value)


def _first_content_line(text: str) -> str:
    """The first line that is neither blank nor a `#` comment, without spaces."""
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            return line.replace(" ", "")
    return ""


def _show_matmul_table(args: argparse.Namespace, console: Console) -> int:
    """Print a matmul calibration table (`dtype,flops,time_us`, from `from-xla-matmul`)."""
    import csv
    import io

    from rich.table import Table

    from lancet_mlir.cost.fileio import read_text
    from lancet_mlir.cost.roofline import parse_matmul_table

    text = read_text(args.input)
    parse_matmul_table(text, args.input)  # validates every row
    rows = [r for r in csv.reader(io.StringIO(text)) if r and not r[0].lstrip().startswith("#")]
    rows = rows[1:]
    console.print(f"{args.input}: {len(rows)} matmul samples", highlight=False)
    table = Table()
    for col in ("dtype", "flops", "time us", "TFLOP/s"):
        table.add_column(col, justify="left" if col == "dtype" else "right")
    for dtype, flops, t in rows[: args.limit]:
        rate = float(flops) / float(t) / 1e6 if float(t) > 0 else 0.0
        table.add_row(dtype.strip(), flops.strip(), f"{float(t):.3f}", f"{rate:.1f}")
    console.print(table)
    return 0


def cmd_collective(args: argparse.Namespace) -> int:
    """Print the modeled time of one collective, and the cost model's notes about it."""
    from lancet_mlir.cost.comm_model import canonical_kind
    from lancet_mlir.cost.cost_model import CostConfig, CostModel

    kind = canonical_kind(args.kind)
    if kind is None:
        raise UserError(
            f"unknown collective kind {args.kind!r} "
            "(choices: allreduce, allgather, reduce_scatter, all_to_all)"
        )
    config = CostConfig(
        comm_tables=tuple(args.comm_table),
        device=args.device,
        cluster=args.cluster,
        gpus_per_node=args.gpus_per_node,
        network_gbps=args.network_gbps,
    )
    hw = config.hardware()
    model = CostModel.from_config(config)
    time_us = model.comm.time_us(kind, args.size, args.ranks)
    where = f"{hw.cluster}: " if hw.cluster else ""
    print(
        f"{kind} of {args.size} bytes over {args.ranks} ranks on {where}{hw.device.name}, "
        f"{hw.internode.gpus_per_node} GPUs per node, {hw.internode.gbps_per_gpu:g} Gb/s per GPU: "
        f"{time_us:.3f} us"
    )
    for note in model.notes:
        print(f"note: {note}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    """Merge several profiles into one (count-weighted)."""
    from lancet_mlir.cost.profile_db import load_profiles

    load_profiles(args.inputs).save(args.output)
    return 0


COMMANDS = {
    "measure": cmd_measure,
    "sync": cmd_sync,
    "from-nccl-tests": cmd_from_nccl_tests,
    "from-kineto": cmd_from_kineto,
    "from-lancet": cmd_from_lancet,
    "from-lancet-csv": cmd_from_lancet_csv,
    "from-xla": cmd_from_xla,
    "from-xla-matmul": cmd_from_xla_matmul,
    "show": cmd_show,
    "merge": cmd_merge,
    "collective": cmd_collective,
}


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of `lancet-profile`."""

    def body() -> int:
        from lancet_mlir.support.mpi_job import agree_on_setup, args_fingerprint

        args = agree_on_setup(lambda: _setup(argv), args_fingerprint)
        return COMMANDS[args.command](args)

    run_cli(TOOL, body)


if __name__ == "__main__":
    main()
