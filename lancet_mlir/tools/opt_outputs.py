"""lancet-opt's cost-model options and its outputs about the final schedule.

`register_arguments` adds the flags, `configure` installs the cost model that every pass of
the pipeline uses, `after_pipeline` writes `--timeline`, `--report` and `--gantt`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from lancet_mlir.tools.cli import positive_int
from lancet_mlir.tools.errors import UserError

if TYPE_CHECKING:
    from lancet_mlir.passes.simulate import BlockResult
    from lancet_mlir.profile.cost_model import CostModel


def register_arguments(group: argparse._ArgumentGroup) -> None:
    """Add the cost-model and output flags of lancet-opt."""
    group.add_argument("--profile", action="append", default=[], metavar="FILE",
                       help="measured op timings (ProfileDB JSON or Lancet .profile); repeatable")
    group.add_argument("--comm-table", action="append", default=[], metavar="FILE",
                       help="measured collective times: lancet-mlir CSV, nccl-tests log or XLA "
                       "collective perf table (docs/formats.md); repeatable")
    group.add_argument("--device", default=None, metavar="NAME",
                       help="device spec for the roofline model and default comm table, one of: "
                       f"{', '.join(_device_names())} (default h100)")
    group.add_argument("--world-size", type=positive_int, default=None, metavar="N",
                       help="override the module's lancet.world_size")
    group.add_argument("--overlap-slowdown", type=float, default=None, metavar="F",
                       help="compute slowdown while communication runs (default 1.0)")
    group.add_argument("--comm-streams", type=positive_int, default=None, metavar="N",
                       help="communication streams of the simulator (default 1, as in Lancet)")
    group.add_argument("--timeline", default=None, metavar="FILE",
                       help="write a Chrome/Perfetto trace of the simulated final schedule")
    group.add_argument("--report", default=None, metavar="FILE",
                       help="write a JSON report (makespan_us, compute_us, comm_us, exposed_comm_us, ...)")
    group.add_argument("--gantt", default=None, metavar="FILE.png",
                       help="draw the simulated timeline with matplotlib")
    group.add_argument("--mpi", action="store_true",
                       help="under mpiexec: optimize on rank 0 and broadcast the result")


def _device_names() -> list[str]:
    from lancet_mlir.profile.devices import device_names

    return device_names()


def configure(args: argparse.Namespace) -> None:
    """Install the cost model described by the flags for every pass of the pipeline.

    The files are loaded now, so a bad profile, comm table or device name fails before any
    pass runs (UserError naming the file)."""
    from lancet_mlir.profile.cost_model import (
        CostModel,
        cost_config_from_args,
        set_active_cost_config,
    )

    cfg = cost_config_from_args(
        profiles=getattr(args, "profile", None) or (),
        comm_tables=getattr(args, "comm_table", None) or (),
        device=getattr(args, "device", None),
        world_size=getattr(args, "world_size", None),
    )
    CostModel.from_config(cfg)  # validate eagerly; the model is cached for the passes
    set_active_cost_config(cfg)
    _configure_simulator(args)


def after_pipeline(ctx: Context, module: ModuleOp, args: argparse.Namespace) -> None:
    """Write the requested outputs about the final schedule.

    If `--timeline`, `--report` or `--gantt` is given, every block of the final module is
    simulated in its current order (fixed-order evaluation with the active cost model and
    `--overlap-slowdown`; the IR is not annotated) and:
    * `--timeline FILE`: a Chrome/Perfetto trace; each simulated block is its own process
      (`pid` = block number in module order, named `@func`, `@func/<op>#k` for blocks nested
      in ops, `<module>` for bare top-level ops), each stream a thread;
    * `--report FILE`: JSON with the totals over function bodies (`makespan_us`,
      `compute_us`, `comm_us`, `exposed_comm_us`, `overlap_us`, `lower_bound_us`, ...; the
      functions are taken to run one after the other, so times add up), per-function and
      nested-block entries, the cost model's notes, the pipeline and the input file;
    * `--gantt FILE.png`: one group of stream rows per function body.
    Files are written atomically. With `--split-input-file` the last chunk's outputs win.
    Finally, if the passes or the outputs costed ops at 0 for lack of any timing information,
    one summary warning names them on stderr.
    """
    from lancet_mlir.profile.cost_model import active_cost_model

    paths = {flag: getattr(args, flag, None) for flag in ("timeline", "report", "gantt")}
    if any(paths.values()):
        _write_outputs(module, args, paths, active_cost_model())
    active_cost_model().warn_unknown("lancet-opt")


def _write_outputs(
    module: ModuleOp,
    args: argparse.Namespace,
    paths: dict[str, str | None],
    cost_model: CostModel,
) -> None:
    """Simulate the final module and write the requested files."""
    from lancet_mlir.passes.simulate import simulate_module

    for flag, path in paths.items():
        if path:
            _check_output_path(flag, path)
    slowdown = _checked_slowdown(getattr(args, "overlap_slowdown", None))
    results = simulate_module(module, cost_model, overlap_slowdown=slowdown)
    if paths["timeline"]:
        _write_json(paths["timeline"], _timeline_trace(results), indent=None)
    if paths["report"]:
        _write_json(paths["report"], _report(results, cost_model.notes, args), indent=2)
    if paths["gantt"]:
        _write_gantt(paths["gantt"], results, args)


def _configure_simulator(args: argparse.Namespace) -> None:
    """`--overlap-slowdown` becomes the simulator default of every pass and output."""
    from lancet_mlir.sim.options import set_default_sim_options

    set_default_sim_options(
        num_comm_streams=getattr(args, "comm_streams", None),
        overlap_slowdown=_checked_slowdown(getattr(args, "overlap_slowdown", None)),
    )


def _check_output_path(flag: str, path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UserError(f"--{flag} {path}: folder does not exist")
    if os.path.isdir(path):
        raise UserError(f"--{flag} {path}: is a folder")


def _checked_slowdown(value: float | None) -> float | None:
    if value is None:
        return None
    if not (math.isfinite(value) and value >= 1.0):
        raise UserError(f"--overlap-slowdown: must be finite and >= 1.0, got {value}")
    return value


def _timeline_trace(results: Sequence[BlockResult]) -> dict:
    """One trace process per simulated block (pid = its position in module order)."""
    from lancet_mlir.sim.trace import chrome_trace, merge_traces

    return merge_traces([
        chrome_trace(r.graph, r.durations, r.timeline, pid=k, process_name=r.label)
        for k, r in enumerate(results)
    ])


_TOTAL_KEYS = (
    "makespan_us", "compute_us", "comm_us", "exposed_comm_us", "overlap_us", "lower_bound_us",
    "num_ops", "num_collectives",
)


def _report(
    results: Sequence[BlockResult], notes: Sequence[str], args: argparse.Namespace
) -> dict:
    """Totals over the function bodies, then per-function and nested-block entries."""
    top = [r for r in results if r.top_level]
    report: dict = {key: sum(r.summary[key] for r in top) for key in _TOTAL_KEYS}
    if top:
        report["num_comm_streams"] = top[0].summary["num_comm_streams"]
        report["overlap_slowdown"] = top[0].summary["overlap_slowdown"]
    report["functions"] = [
        {"name": r.function, "label": r.label, **r.summary} for r in top
    ]
    report["nested_blocks"] = [
        {"label": r.label, **r.summary} for r in results if not r.top_level
    ]
    report["cost_model"] = {"notes": list(notes)}
    report["pipeline"] = getattr(args, "passes", "") or ""
    report["input"] = getattr(args, "input_file", None) or "-"
    return report


def _write_gantt(path: str, results: Sequence[BlockResult], args: argparse.Namespace) -> None:
    from lancet_mlir.sim.trace import gantt_png_blocks

    shown = [r for r in results if r.top_level] or list(results)
    total = sum(r.timeline.makespan_us for r in shown)
    title = f"{getattr(args, 'input_file', None) or 'stdin'}: makespan {total:.1f} µs"
    gantt_png_blocks(path, [(r.label, r.timeline) for r in shown], title=title)


def _write_json(path: str, data: dict, indent: int | None) -> None:
    """Serialize first, then write through a temporary file and a rename."""
    from lancet_mlir.support.files import atomic_path

    text = json.dumps(data, indent=indent) + "\n"
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
