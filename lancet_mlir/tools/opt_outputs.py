"""lancet-opt's cost-model options and its outputs about the final schedule.

`register_arguments` adds the flags, `configure` installs the cost model that every pass of
the pipeline uses, `after_pipeline` writes `--timeline`, `--report` and `--gantt`.
"""

from __future__ import annotations

import argparse

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from lancet_mlir.tools.errors import UserError


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def register_arguments(group: argparse._ArgumentGroup) -> None:
    """Add the cost-model and output flags of lancet-opt."""
    group.add_argument("--profile", action="append", default=[], metavar="FILE",
                       help="measured op timings (ProfileDB JSON or Lancet .profile); repeatable")
    group.add_argument("--comm-table", action="append", default=[], metavar="FILE",
                       help="measured collective times (CSV); repeatable")
    group.add_argument("--device", default=None, metavar="NAME",
                       help="device spec for the roofline model and default comm table (default h100)")
    group.add_argument("--world-size", type=_positive_int, default=None, metavar="N",
                       help="override the module's lancet.world_size")
    group.add_argument("--overlap-slowdown", type=float, default=None, metavar="F",
                       help="compute slowdown while communication runs (default 1.0)")
    group.add_argument("--timeline", default=None, metavar="FILE",
                       help="write a Chrome/Perfetto trace of the simulated final schedule")
    group.add_argument("--report", default=None, metavar="FILE",
                       help="write a JSON report (makespan_us, compute_us, comm_us, exposed_comm_us, ...)")
    group.add_argument("--gantt", default=None, metavar="FILE.png",
                       help="draw the simulated timeline with matplotlib")
    group.add_argument("--mpi", action="store_true",
                       help="under mpiexec: optimize on rank 0 and broadcast the result")


def configure(args: argparse.Namespace) -> None:
    """Install the cost model described by the flags for every pass of the pipeline."""


def after_pipeline(ctx: Context, module: ModuleOp, args: argparse.Namespace) -> None:
    """Write the requested outputs about the final schedule."""
    for flag in ("timeline", "report", "gantt"):
        if getattr(args, flag, None):
            raise UserError(f"--{flag} is not available yet")
