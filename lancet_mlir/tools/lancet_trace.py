"""lancet-trace: import real profiler traces, replay them against the measurement, what-ifs.

    lancet-trace import rank*.pt.trace.json [--et rank0_et.json ...] [--step N] -o step.mlir
    lancet-trace import chakra.0.et -o step.mlir          # Chakra .et (protobuf) or JSON
    lancet-trace replay rank*.pt.trace.json [--report r.json] [--costs measured|model]
                        [--lags op|stream]
    lancet-trace whatif trace.json --network-scale 0.5 --compute-scale 1 --launch-overhead-us 0

Kineto traces (PyTorch profiler, .json or .json.gz), one per rank: several ranks' traces are
coupled at every collective. `--et` adds a PyTorch execution trace's data dependencies; a
Chakra trace (binary .et or JSON) brings its own (it has durations but no start times). Errors end with one line on stderr and exit code 1, and write
nothing. docs/user-guide.md "Profiler traces" explains the report.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lancet_mlir.tools.cli import (
    ArgumentParser,
    non_negative_float,
    non_negative_int,
    positive_float,
)
from lancet_mlir.tools.errors import UserError, run_cli

if TYPE_CHECKING:
    from lancet_mlir.importers.traces.report import CommTime, WhatIf
    from lancet_mlir.importers.traces.step import StepTrace

TOOL = "lancet-trace"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = ArgumentParser(
        prog=TOOL, description="Import, replay and question real profiler traces."
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "traces",
            nargs="+",
            metavar="TRACE",
            help="Kineto trace(s) (.json / .json.gz), one per rank",
        )
        p.add_argument(
            "--step",
            type=non_negative_int,
            default=None,
            metavar="N",
            help="replay ProfilerStep#N (default: the last step)",
        )
        p.add_argument(
            "--et",
            action="append",
            default=[],
            metavar="ET.json",
            help="PyTorch execution trace of a TRACE (repeat, in TRACE order): adds "
            "tensor data dependencies",
        )

    p = sub.add_parser("import", help="write the step as MLIR (one op per GPU activity)")
    common(p)
    p.add_argument(
        "-o", "--output", default=None, metavar="FILE", help="MLIR to write (default: stdout)"
    )

    for name, text in (
        ("replay", "replay the step from durations and dependencies, vs measured"),
        ("whatif", "replay with changed network, compute or launch costs"),
    ):
        p = sub.add_parser(name, help=text)
        common(p)
        p.add_argument(
            "--report", default=None, metavar="FILE", help="JSON report to write ('-': stdout)"
        )
        p.add_argument(
            "--costs",
            choices=("measured", "model"),
            default="measured",
            help="op durations: as measured, or our cost model's estimates",
        )
        p.add_argument(
            "--device",
            default=None,
            metavar="NAME",
            help="device preset for the cost model (default: from deviceProperties)",
        )
        p.add_argument(
            "--lags",
            choices=("op", "stream"),
            default="op",
            help="launch-to-start lag: each idle-stream op keeps its measured one (op), or "
            "one per stream, its least (stream)",
        )
        if name == "whatif":
            p.add_argument(
                "--network-scale",
                type=positive_float,
                default=1.0,
                metavar="F",
                help="scale the collectives' wire time (not the waiting for peers)",
            )
            p.add_argument(
                "--compute-scale",
                type=positive_float,
                default=1.0,
                metavar="F",
                help="scale every non-NCCL GPU op's duration",
            )
            p.add_argument(
                "--launch-overhead-us",
                type=non_negative_float,
                default=None,
                metavar="US",
                help="each launch call's host time (0: free launches, the CUDA-graphs case)",
            )
            p.add_argument(
                "--pipeline",
                default=None,
                metavar="P",
                help="a lancet-opt pipeline to run on the step (needs data dependencies)",
            )
    return parser


def _emit(text: str, output: str | None) -> None:
    """`text` into `output` (None or `-`: standard output), staged with the run's other
    outputs: written when the run succeeds (a closed or full stdout is one error line)."""
    from lancet_mlir.support.files import write_atomic

    write_atomic("-" if output is None else output, text)


def _check_paths(args: argparse.Namespace) -> None:
    from lancet_mlir.support.errors import UserError
    from lancet_mlir.support.files import (
        CLOSED_STDOUT,
        check_output_folder,
        declare_inputs,
        stdout_is_open,
    )

    declare_inputs(*args.traces, *args.et)
    if not stdout_is_open():  # every command writes something there unless given files
        to_stdout = getattr(args, "output", None) in (None, "-") or args.command != "import"
        if to_stdout:
            raise UserError(CLOSED_STDOUT)  # before the work, not after it
    for flag, out in (
        ("-o", getattr(args, "output", None)),
        ("--report", getattr(args, "report", None)),
    ):
        if out is not None and out != "-":
            check_output_folder(out, flag, list(args.traces))


def cmd_import(args: argparse.Namespace) -> int:
    """Write the imported step's module."""
    import io

    from xdsl.printer import Printer

    from lancet_mlir.importers.traces import load_steps
    from lancet_mlir.importers.traces.build import build_module

    module = build_module(load_steps(args.traces, args.step, args.et))
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

    steps = load_steps(args.traces, args.step, args.et)
    what = WhatIf(
        getattr(args, "network_scale", 1.0),
        getattr(args, "compute_scale", 1.0),
        getattr(args, "launch_overhead_us", None),
    )
    if getattr(args, "pipeline", None):
        if all(st.data_deps == 0 for st in steps):
            if args.et:
                why = (
                    "the execution trace given with --et matches the step but adds no data "
                    "dependency its measured times satisfy"
                )
            elif any(st.period_basis == "none" for st in steps):
                why = "the Chakra trace has no data dependency between its GPU nodes"
            else:
                why = (
                    "the trace gives stream order only, no data dependencies (a PyTorch "
                    "execution trace, --et, or a Chakra trace would)"
                )
            raise UserError(
                f"--pipeline: {why}: reordering is refused; order-preserving what-ifs "
                "(--network-scale, --compute-scale, --launch-overhead-us) still work"
            )
        if len(steps) > 1:
            raise UserError(
                "--pipeline: give one rank's trace (a pipeline rewrites one rank's step)"
            )
    comm_time, device = comm_time_fn(steps, args.device)
    if len(steps) == 1 and what.network_scale != 1.0:
        _check_network_scale(steps[0], comm_time)
    durations = None
    fidelity = None
    if args.costs == "model":
        durations, fidelity = model_durations(steps, device)
    report = replay_steps(steps, what, comm_time, durations, args.lags)
    if getattr(args, "pipeline", None):
        report["pipeline"] = _run_pipeline(
            steps, args.pipeline, device, report, what, comm_time, durations
        )
    report["costs"] = args.costs
    report["device_preset"] = device
    if fidelity is not None:
        report["cost_model"] = fidelity
    return report


def _check_network_scale(st: StepTrace, comm_time: CommTime | None) -> None:
    """UserError when `--network-scale` would do nothing on one rank's step that has
    collectives: one rank's wire time is the comm table's estimate (`single_rank_wire`), so
    without a device preset (an unknown GPU, every Chakra trace) or without any collective the
    table can price, the what-if would report +0.00 % for any scale. Refused like
    `--costs model` without a preset."""
    from lancet_mlir.importers.traces.report import single_rank_wire

    if not any(o.is_comm for o in st.graph.ops):
        return  # no collective: the network does not matter, and +0 % is the right answer
    if st.period_basis == "none":
        raise UserError(
            "--network-scale: a Chakra trace states no world or group size, so the comm "
            "table cannot give its collectives' wire time (the what-if would change nothing)"
        )
    if comm_time is None:
        raise UserError(
            f"--network-scale: the trace's GPU ({st.device or 'unknown'}) is not one of our "
            "device presets, so one rank's wire time (the comm table's) is unknown; pass --device"
        )
    if not any(single_rank_wire(st, comm_time)):
        raise UserError(
            "--network-scale: no collective of the trace has a kind, size and group the comm "
            "table prices, so the wire time to scale is 0 (the what-if would change nothing)"
        )


def _run_pipeline(
    steps: list[StepTrace],
    spec: str,
    device: str | None,
    report: dict,
    what: WhatIf,
    comm_time: CommTime | None,
    durations: list[list[float]] | None,
) -> dict:
    """Run `spec` on the step's data-dependency module, built with the durations the what-if
    replay used (`whatif_durations`: `--costs`, `--compute-scale`, `--network-scale` on the
    wire time) and simulated with `--launch-overhead-us` when given (the module's
    `lancet.launch_overhead_us`, so the passes see it too and schedule for the what-if machine).
    The time it saves on the target step's simulated period (`simulated_step_period_us`: last
    end of step N minus last end of step N-1, as the replay measures a period; our simulator
    rates the block order: one compute, one comm and one stream per copy queue, one host) comes
    off the what-if replay's period (the same scales). An estimate, not a bound: the new
    order is not replayed with the host, whose CPU gaps can hide the gain or make room for
    more (docs/user-guide.md "What-ifs")."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import FloatAttr, f64
    from xdsl.passes import PassPipeline

    from lancet_mlir import attrs
    from lancet_mlir.cost.cost_model import CostConfig, CostModel
    from lancet_mlir.importers.traces.build import build_module
    from lancet_mlir.importers.traces.report import simulated_step_period_us, whatif_durations
    from lancet_mlir.passes import get_all_passes

    durs = whatif_durations(steps, what, comm_time, durations)
    module = build_module(steps, data_only=True, durations=durs)
    notes = []
    if what.launch_overhead_us is not None:
        module.attributes[attrs.LAUNCH_OVERHEAD_US] = FloatAttr(what.launch_overhead_us, f64)
        threads = max((len(st.thread_index) for st in steps), default=0)
        if what.launch_overhead_us > 0 and threads > 1:
            notes.append(
                "one_host: the simulator has one host, so with a launch overhead the launches "
                "of all the trace's host threads are serialized in block order and a host sync "
                "stalls every launch after it, whichever thread made it"
            )
    model = CostModel.build(CostConfig(device=device))
    before = simulated_step_period_us(module, model)
    from xdsl.transforms import get_all_passes as xdsl_passes
    from xdsl.utils.exceptions import ArgSpecParseError, PassFailedException

    from lancet_mlir.support.errors import one_line

    available = {**xdsl_passes(), **get_all_passes()}  # what lancet-opt registers
    try:
        pipeline = PassPipeline.parse_spec(available, spec)
    except (ValueError, ArgSpecParseError, PassFailedException) as exc:
        raise UserError(f"--pipeline: {one_line(exc)}") from None
    pipeline.apply(Context(allow_unregistered=True), module)
    after = simulated_step_period_us(module, model)
    base = report["predicted_period_us"]
    out = {
        "spec": spec,
        "simulated_before_us": round(before, 3),
        "simulated_after_us": round(after, 3),
        "saved_us": round(before - after, 3),
        "predicted_period_us": round(base - (before - after), 3),
        "replayed_period_us": base,
    }
    if notes:
        out["notes"] = notes
    return out


def _summary(report: dict) -> str:
    lines = []
    for r in report.get("ranks", [report]):
        if r["measured_period_us"] is None:
            lines.append(
                f"rank {r['rank']}: predicted {r['predicted_period_us']:.1f} us from durations and "
                f"dependencies (the trace has no measured times); {r['gpu_ops']} GPU ops"
            )
            continue
        lines.append(
            f"rank {r['rank']} step {r['step']}: measured {r['measured_period_us']:.1f} us, "
            f"predicted {r['predicted_period_us']:.1f} us ({100 * r['period_error']:+.2f} %), "
            f"start error p50 {r['start_error_p50_us']:.1f} us, GPU-only {r['gpu_only_period_us']:.1f} us"
            + ("; one launch lag per stream" if report.get("lags") == "stream" else "")
            + (f"; flags: {', '.join(f.split(':')[0] for f in r['flags'])}" if r["flags"] else "")
        )
    pipe = report.get("pipeline")
    if pipe:
        lines.append(
            f"pipeline {pipe['spec']}: {pipe['simulated_before_us']:.1f} -> "
            f"{pipe['simulated_after_us']:.1f} us simulated step period, step {pipe['replayed_period_us']:.1f} -> "
            f"{pipe['predicted_period_us']:.1f} us"
            + (
                f"; notes: {', '.join(n.split(':')[0] for n in pipe['notes'])}"
                if "notes" in pipe
                else ""
            )
        )
    coll = report.get("collectives")
    if coll:
        lines.append(
            f"{coll['count']} collectives: wire {coll['wire_us_total']:.1f} us of "
            f"{coll['nccl_us_per_rank']:.1f} us NCCL time per rank; straggler rank "
            f"{coll['straggler_rank']}; end error p50 {coll['end_error_p50_us']} us"
        )
    return "\n".join(lines) + "\n"


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay and report."""
    report = _report(args)
    text = json.dumps(report, indent=1, sort_keys=True) + "\n"
    if args.report == "-":
        _emit(text, "-")
        return 0
    if args.report is not None:
        _emit(text, args.report)
    _emit(_summary(report), "-")
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
