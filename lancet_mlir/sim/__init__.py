"""Timeline simulator: fixed-order evaluation, list scheduling, analysis and trace export.

See `lancet_mlir.sim.timeline` for the exact semantics and `lancet_mlir.sim.trace` for the
Chrome trace and Gantt chart formats.
"""

from lancet_mlir.sim.timeline import (
    COMPUTE_STREAM,
    TaskGraph,
    Timeline,
    busy_time,
    critical_path,
    evaluate_fixed_order,
    exposed_comm_us,
    list_schedule,
    longest_data_path_us,
    lower_bound_us,
    overlap_us,
    summarize,
    weight_update_first,
)

__all__ = [
    "COMPUTE_STREAM",
    "TaskGraph",
    "Timeline",
    "busy_time",
    "critical_path",
    "evaluate_fixed_order",
    "exposed_comm_us",
    "list_schedule",
    "longest_data_path_us",
    "lower_bound_us",
    "overlap_us",
    "summarize",
    "weight_update_first",
]
