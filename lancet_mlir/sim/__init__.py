"""Timeline simulator: fixed-order evaluation, list scheduling, analysis and trace export.

* `model`: `Timeline` (what a graph provides: `graph.core.Graph`);
* `engine`: `evaluate_fixed_order`, `list_schedule`, `weight_update_first` (the exact
  semantics are in its docstring);
* `metrics`: busy time, overlap, exposed communication, critical path, lower bound and
  `summarize` -> `TimelineSummary`;
* `floor`: `exposed_comm_floor` -> `ExposedFloor`, a lower bound on the exposed
  communication of every order of a graph;
* `blocks`: a module's blocks simulated and annotated (`simulate_module`);
* `profiled_schedule`: Lancet's profiled FIFO schedule (`profiled_fifo_schedule`);
* `options`: `SimOptions`; `trace`: Chrome trace and Gantt chart formats.
"""

from lancet_mlir.sim.engine import evaluate_fixed_order, list_schedule, weight_update_first
from lancet_mlir.sim.floor import ExposedFloor, exposed_comm_floor
from lancet_mlir.sim.metrics import (
    TimelineSummary,
    busy_time,
    critical_path,
    exposed_comm_us,
    longest_data_path_us,
    lower_bound_us,
    overlap_us,
    summarize,
)
from lancet_mlir.sim.model import COMPUTE_STREAM, Timeline

__all__ = [
    "COMPUTE_STREAM",
    "ExposedFloor",
    "Timeline",
    "TimelineSummary",
    "busy_time",
    "critical_path",
    "evaluate_fixed_order",
    "exposed_comm_floor",
    "exposed_comm_us",
    "list_schedule",
    "longest_data_path_us",
    "lower_bound_us",
    "overlap_us",
    "summarize",
    "weight_update_first",
]
