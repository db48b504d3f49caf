"""Process-wide defaults of the simulator options (what passes use when given none).

`lancet-opt --overlap-slowdown F` installs its value here before the pipeline runs, so
`simulate`, `lancet-schedule` and the `--timeline`/`--report` outputs all agree; a pass
option (`simulate{overlap-slowdown=1.5}`) still wins for that pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_COMM_STREAMS = 64
"""Most communication streams the simulator accepts: real jobs use a handful (Lancet: 1), and
each stream costs the simulator memory and time, so absurd counts are refused up front."""


@dataclass(frozen=True)
class SimOptions:
    """Number of communication streams and the compute slowdown while communication runs."""

    num_comm_streams: int = 1
    overlap_slowdown: float = 1.0

    def __post_init__(self) -> None:
        if self.num_comm_streams < 1:
            raise ValueError(f"number of comm streams must be >= 1, got {self.num_comm_streams}")
        if self.num_comm_streams > MAX_COMM_STREAMS:
            raise ValueError(
                f"number of comm streams must be <= {MAX_COMM_STREAMS}, got "
                f"{self.num_comm_streams} (real jobs use a handful; Lancet uses 1)"
            )
        if not (math.isfinite(self.overlap_slowdown) and self.overlap_slowdown >= 1.0):
            raise ValueError(f"overlap slowdown must be finite and >= 1.0, got {self.overlap_slowdown}")


_DEFAULT = [SimOptions()]


def default_sim_options() -> SimOptions:
    """The options in force when a pass or tool gives none."""
    return _DEFAULT[0]


def set_default_sim_options(
    num_comm_streams: int | None = None, overlap_slowdown: float | None = None
) -> SimOptions:
    """Replace the defaults (None keeps a field's built-in default); returns the new ones."""
    base = SimOptions()
    options = SimOptions(
        base.num_comm_streams if num_comm_streams is None else num_comm_streams,
        base.overlap_slowdown if overlap_slowdown is None else float(overlap_slowdown),
    )
    _DEFAULT[0] = options
    return options


def resolve_sim_options(
    num_comm_streams: int | None = None, overlap_slowdown: float | None = None
) -> SimOptions:
    """Explicit values where given, the process-wide defaults elsewhere (validated)."""
    default = default_sim_options()
    return SimOptions(
        default.num_comm_streams if num_comm_streams is None else num_comm_streams,
        default.overlap_slowdown if overlap_slowdown is None else float(overlap_slowdown),
    )
