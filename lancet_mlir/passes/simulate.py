"""simulate: annotate every op with its simulated start/end time and stream, and write the
report, trace and Gantt picture of the schedule (`report=`, `timeline=`, `gantt=`)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import ArgSpec
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.passes.costing import CostOptions
from lancet_mlir.passes.options import CheckedOptions
from lancet_mlir.sim.blocks import (
    BlockResult,
    GraphCostModel,
    SimBlock,
    annotate_module,
    simulate_graph,
    simulate_module,
    simulated_blocks,
)
from lancet_mlir.sim.outputs import (
    OutputRequest,
    check_output_request,
    window_warnings,
    write_outputs,
)
from lancet_mlir.support.errors import ParameterError, UserError

__all__ = [
    "BlockResult",
    "GraphCostModel",
    "SimBlock",
    "SimulatePass",
    "annotate_module",
    "simulate_graph",
    "simulate_module",
    "simulated_blocks",
]


@dataclass(frozen=True)
class SimulatePass(CostOptions, CheckedOptions, ModulePass):
    """Simulate every block in its current order, annotate the IR with the timeline and
    write the requested outputs about it.

    Costs ops with the cost model of its options and the module (`lancet.time_us` > profile >
    roofline/comm table; `passes/costing.py`); an op with regions costs its bodies
    (`sim/regions.py`). Every op of every simulated block gets `lancet.start_us`,
    `lancet.end_us` (f64, µs from the start of its block) and `lancet.stream` (i64: 0
    compute, 1.. communication); every func.func gets `lancet.makespan_us` and
    `lancet.exposed_comm_us`. The order is not changed.

    Options (all optional; each cost option overrides the module attribute of the same name,
    `lancet.device`, `lancet.cluster`, ...; see `CostOptions`):
      device=NAME, cluster=NAME, profile="FILE", comm-table="FILE",
      gpus-per-node=N, network-gbps=F   the cost model
      comm-streams=K       number of communication streams (default 1)
      overlap-slowdown=F   compute runs F times slower while a collective runs (default 1.0)
      report="FILE"        write the JSON report (`sim/outputs.py`; docs/user-guide.md)
      timeline="FILE"      write the Chrome/Perfetto trace
      gantt="FILE"         draw the Gantt picture: .png, .svg or .pdf by the suffix
      gantt-window="A:B"   zoom the picture to a time range (`2ms:5ms`, `300:900` µs)
      annotate=false       leave the IR unchanged (only write the outputs)
    """

    name = "simulate"

    report: str | None = None
    """Where to write the JSON report (atomically; `-`: stdout); None: no report."""
    timeline: str | None = None
    """Where to write the Chrome/Perfetto trace; None: no trace."""
    gantt: str | None = None
    """Where to draw the Gantt picture (`.png`, `.svg` or `.pdf`); None: no picture."""
    gantt_window: str | None = None
    """The time range the picture shows, `START:END` with units `us`, `ms`, `s`."""
    annotate: bool = True
    """Write the `lancet.start_us`/`end_us`/`stream`/`makespan_us` attributes."""

    PARAMETER_NAMES: ClassVar[Mapping[str, str]] = {
        "report": "report", "timeline": "timeline", "gantt": "gantt",
        "gantt_window": "gantt-window",
    }  # fmt: skip
    """How errors and warnings name the output options (lancet-opt's flags in its subclass)."""
    WARNING_PREFIX: ClassVar[str] = "simulate"

    def __post_init__(self) -> None:
        self._checked_request()  # a bad output option fails when the pipeline is built

    def output_request(self) -> OutputRequest:
        """The outputs this pass writes."""
        return OutputRequest(self.report, self.timeline, self.gantt, self.gantt_window)

    def _checked_request(self) -> OutputRequest:
        request = self.output_request()
        try:
            check_output_request(request, self.PARAMETER_NAMES)
        except ParameterError as exc:
            raise self.failure(exc) from None
        return request

    def failure(self, exc: UserError) -> Exception:
        """How the pass reports a bad input or option: `simulate: ...` (a pass failure)."""
        return PassFailedException(f"{self.name}: {exc}")

    def costing_spec(self) -> str:
        """The pass with its cost options only, as the report's `costing.pass` names it."""
        spec = self.spec()
        kept = {k.replace("_", "-"): v for k, v in spec.parameters.items()
                if k.replace("-", "_") not in _OUTPUT_FIELDS}  # fmt: skip
        return str(ArgSpec(spec.name, kept))

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        request = self._checked_request()
        options = self.sim_options(op)
        cost_model = self.cost_model(op)
        check_dominance(op)
        results = simulate_module(op, cost_model, options, annotate=self.annotate)
        if not request.any() and request.gantt_window is None:
            return
        for line in window_warnings(request, results, self.PARAMETER_NAMES):
            sys.stderr.write(f"{self.WARNING_PREFIX}: warning: {line}\n")
        try:
            write_outputs(
                op, results, cost_model, options, request, self.costing_spec(), self.WARNING_PREFIX
            )
        except ParameterError as exc:
            raise self.failure(exc) from None


_OUTPUT_FIELDS = frozenset({"report", "timeline", "gantt", "gantt_window", "annotate"})
