"""lancet-trace: import real profiler traces, replay them against the measurement, what-ifs.

    lancet-trace import rank*.pt.trace.json [--step N] -o step.mlir
    lancet-trace replay rank*.pt.trace.json [--report r.json] [--costs measured|model]
    lancet-trace whatif trace.json --network-scale 0.5 --compute-scale 1 --launch-overhead-us 0

Kineto traces (PyTorch profiler, .json or .json.gz), one per rank: several ranks' traces are
coupled at every collective. Errors end with one line on stderr and exit code 1, and write
nothing. docs/user-guide.md "Profiler traces" explains the report.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from lancet_mlir.tools.cli import (
    ArgumentParser,
    non_negative_float,
    non_negative_int,
    positive_float,
)
from lancet_mlir.tools.errors import UserError, run_cli

TOOL = "lancet-trace"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = ArgumentParser(prog=TOOL, description="Import, replay and question real profiler traces.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("traces", nargs="+", metavar="TRACE",
                       help="Kineto trace(s) (.json / .json.gz), one per rank")
        p.add_argument("--step", type=non_negative_int, default=None, metavar="N",
                       help="replay ProfilerStep#N (default: the last step)")

    p = sub.add_parser("import", help="write the step as MLIR (one op per GPU activity)")
    common(p)
    p.add_argument("-o", "--output", default=None, metavar="FILE", help="MLIR to write (default: stdout)")

    for name, text in (("replay", "replay the step from durations and dependencies, vs measured"),
                       ("whatif", "replay with changed network, compute or launch costs")):
        p = sub.add_parser(name, help=text)
        common(p)
        p.add_argument("--report", default=None, metavar="FILE",
                       help="JSON report to write ('-': stdout)")
        p.add_argument("--costs", choices=("measured", "model"), default="measured",
                       help="op durations: as measured, or our cost model's estimates")
        p.add_argument("--device", default=None, metavar="NAME",
                       help="device preset for the cost model (default: from deviceProperties)")
        if name == "whatif":
            p.add_argument("--network-scale", type=positive_float, default=1.0, metavar="F",
                           help="scale the collectives' wire time (not the waiting for peers)")
            p.add_argument("--compute-scale", type=positive_float, default=1.0, metavar="F",
                           help="scale every non-NCCL GPU op's duration")
            p.add_argument("--launch-overhead-us", type=non_negative_float, default=None, metavar="US",
                           help="each launch call's host time (0: free launches, the CUDA-graphs case)")
            p.add_argument("--pipeline", default=None, metavar="P",
                           help="a lancet-opt pipeline to run on the step (needs data dependencies)")
    return parser


def _emit(text: str, output: str | None) -> None:
    if output is None or output == "-":
        sys.stdout.write(text)
        return
    from lancet_mlir.support.files import write_atomic

    write_atomic(output, text)


def _check_paths(args: argparse.Namespace) -> None:
    from lancet_mlir.support.files import check_output_folder, declare_inputs

    declare_inputs(*args.traces)
    for flag, out in (("-o", getattr(args, "output", None)), ("--report", getattr(args, "report", None))):
        if out is not None and out != "-":
            check_output_folder(out, flag, list(args.traces))


def cmd_import(args: argparse.Namespace) -> int:
    """Write the imported step's module."""
    import io

    from xdsl.printer import Printer

    from lancet_mlir.importers.traces import load_steps
    from lancet_mlir.importers.traces.build import build_module

    module = build_module(load_steps(args.traces, args.step))
    module.verify()
    text = io.StringIO()
    Printer(stream=text).print_op(module)
    text.write("\n")
    _emit(text.getvalue(), args.output)
    return 0


def _report(args: argparse.Namespace) -> dict:
    from lancet_mlir.importers.traces import load_steps
    from lancet_mlir.importers.traces.fidelity import comm_time_fn, model_durations
    from lancet_mlir.importers.traces.report import WhatIf, replay_steps

    steps = load_steps(args.traces, args.step)
    what = WhatIf(getattr(args, "network_scale", 1.0), getattr(args, "compute_scale", 1.0),
                  getattr(args, "launch_overhead_us", None))
    if getattr(args, "pipeline", None):
        if all(st.data_deps == 0 for st in steps):
            raise UserError("--pipeline: the trace gives stream order only, no data dependencies "
                            "(a PyTorch execution trace or a Chakra trace would): reordering is refused; "
                            "order-preserving what-ifs (--network-scale, --compute-scale, "
                            "--launch-overhead-us) still work")
        raise UserError("--pipeline: running a pipeline on an imported step is not supported yet")
    comm_time, device = comm_time_fn(steps, args.device)
    durations = None
    fidelity = None
    if args.costs == "model":
        durations, fidelity = model_durations(steps, device)
    report = replay_steps(steps, what, comm_time, durations)
    report["costs"] = args.costs
    report["device_preset"] = device
    if fidelity is not None:
        report["cost_model"] = fidelity
    return report


def _summary(report: dict) -> str:
    lines = []
    for r in report.get("ranks", [report]):
        lines.append(
            f"rank {r['rank']} step {r['step']}: measured {r['measured_period_us']:.1f} us, "
            f"predicted {r['predicted_period_us']:.1f} us ({100 * r['period_error']:+.2f} %), "
            f"start error p50 {r['start_error_p50_us']:.1f} us, GPU-only {r['gpu_only_period_us']:.1f} us"
            + (f"; flags: {', '.join(f.split(':')[0] for f in r['flags'])}" if r["flags"] else ""))
    coll = report.get("collectives")
    if coll:
        lines.append(f"{coll['count']} collectives: wire {coll['wire_us_total']:.1f} us of "
                     f"{coll['nccl_us_per_rank']:.1f} us NCCL time per rank; straggler rank "
                     f"{coll['straggler_rank']}; end error p50 {coll['end_error_p50_us']} us")
    return "\n".join(lines) + "\n"


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay and report."""
    report = _report(args)
    text = json.dumps(report, indent=1, sort_keys=True) + "\n"
    if args.report == "-":
        sys.stdout.write(text)
        return 0
    if args.report is not None:
        _emit(text, args.report)
    sys.stdout.write(_summary(report))
    return 0


COMMANDS = {"import": cmd_import, "replay": cmd_replay, "whatif": cmd_replay}


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of `lancet-trace`."""

    def body() -> int:
        args = build_parser().parse_args(argv)
        _check_paths(args)
        return COMMANDS[args.command](args)

    run_cli(TOOL, body)


if __name__ == "__main__":
    main()
