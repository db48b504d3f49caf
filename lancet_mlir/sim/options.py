"""Simulator options: number of communication streams, the overlap slowdown and the launch
overhead.

No process-wide defaults: a pass takes them from its options, else from the module's
`lancet.comm_streams` / `lancet.overlap_slowdown` / `lancet.launch_overhead_us` attributes
(which `lancet-opt --comm-streams/--overlap-slowdown/--launch-overhead-us` set), else the
built-in defaults (1 stream, no slowdown, free launches).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects.builtin import FloatAttr, IntegerAttr
from xdsl.ir import Operation

from lancet_mlir import attrs
from lancet_mlir.support.errors import UserError, about_op

MAX_COMM_STREAMS = 64
"""Most communication streams the simulator accepts: real jobs use a handful (Lancet: 1), and
each stream costs the simulator memory and time, so absurd counts are refused up front."""


@dataclass(frozen=True)
class SimOptions:
    """Number of communication streams and the compute slowdown while communication runs."""

    num_comm_streams: int = 1
    overlap_slowdown: float = 1.0
    launch_overhead_us: float = 0.0
    """Host time per op launch (sim/engine.py "Launch overhead"); 0 = today's behaviour."""
    copy_stream: bool = True
    """Memcpy / memset ops run on copy-engine streams of their own, one per direction
    (sim/engine.py "Copy engines"). Only imported traces have such ops, so the default changes
    no other model."""

    def __post_init__(self) -> None:
        if self.num_comm_streams < 1:
            raise ValueError(f"number of comm streams must be >= 1, got {self.num_comm_streams}")
        if self.num_comm_streams > MAX_COMM_STREAMS:
            raise ValueError(
                f"number of comm streams must be <= {MAX_COMM_STREAMS}, got "
                f"{self.num_comm_streams} (real jobs use a handful; Lancet uses 1)"
            )
        if not (math.isfinite(self.overlap_slowdown) and self.overlap_slowdown >= 1.0):
            raise ValueError(
                f"overlap slowdown must be finite and >= 1.0, got {self.overlap_slowdown}"
            )
        if not (math.isfinite(self.launch_overhead_us) and self.launch_overhead_us >= 0.0):
            raise ValueError(
                f"launch overhead must be finite and >= 0, got {self.launch_overhead_us}"
            )


def resolve_sim_options(
    num_comm_streams: int | None = None,
    overlap_slowdown: float | None = None,
    base: SimOptions | None = None,
    launch_overhead_us: float | None = None,
) -> SimOptions:
    """Explicit values where given, `base`'s (default: the built-in defaults) elsewhere;
    ValueError for bad values."""
    base = base or SimOptions()
    return SimOptions(
        base.num_comm_streams if num_comm_streams is None else num_comm_streams,
        base.overlap_slowdown if overlap_slowdown is None else float(overlap_slowdown),
        base.launch_overhead_us if launch_overhead_us is None else float(launch_overhead_us),
        base.copy_stream,
    )


def module_sim_options(module: Operation) -> SimOptions:
    """The module's `lancet.comm_streams` / `lancet.overlap_slowdown` over the defaults; a bad
    value raises one UserError naming the attribute, about `module`."""
    with about_op(module):
        return _module_sim_options(module)


def _module_sim_options(module: Operation) -> SimOptions:
    streams = module.attributes.get(attrs.COMM_STREAMS)
    slowdown = module.attributes.get(attrs.OVERLAP_SLOWDOWN)
    num = None
    if streams is not None:
        if not (isinstance(streams, IntegerAttr) and streams.value.data >= 1):
            raise UserError(f"{attrs.COMM_STREAMS}: expected an integer >= 1, got {streams}")
        num = streams.value.data
    factor = None
    if slowdown is not None:
        value = (
            float(slowdown.value.data)
            if isinstance(slowdown, IntegerAttr | FloatAttr)
            else math.nan
        )
        if not (math.isfinite(value) and value >= 1.0):
            raise UserError(
                f"{attrs.OVERLAP_SLOWDOWN}: expected a finite number >= 1.0, got {slowdown}"
            )
        factor = value
    overhead_attr = module.attributes.get(attrs.LAUNCH_OVERHEAD_US)
    overhead = None
    if overhead_attr is not None:
        value = (
            float(overhead_attr.value.data)
            if isinstance(overhead_attr, IntegerAttr | FloatAttr)
            else math.nan
        )
        if not (math.isfinite(value) and value >= 0.0):
            raise UserError(
                f"{attrs.LAUNCH_OVERHEAD_US}: expected a finite number >= 0, got {overhead_attr}"
            )
        overhead = value
    try:
        return resolve_sim_options(num, factor, launch_overhead_us=overhead)
    except ValueError as exc:  # e.g. more streams than MAX_COMM_STREAMS
        raise UserError(f"{attrs.COMM_STREAMS}: {exc}") from None
