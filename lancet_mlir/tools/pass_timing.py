"""`lancet-opt --time-passes`: wall time of every stage of a run, reported on stderr.

Stages are parsing, verification (after parsing and between passes), each pass, printing,
the schedule outputs and the final writes; repeated stages (several `--split-input-file`
chunks, verification between passes) add up under one name, listed in first-seen order.
The report goes to stderr so that the IR on stdout stays parseable; its layout follows
mlir-opt's `-mlir-timing` report.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

_RULE = "===" + "-" * 73 + "==="


class StageTimer:
    """Accumulated wall time per stage name, in the order the stages first ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, stage: str, seconds: float) -> None:
        """Add `seconds` to `stage`."""
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the body as stage `name` (also when it raises)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def report(self, stream: IO[str]) -> None:
        """Write the timing table (seconds and share of the total) to `stream`."""
        total = sum(self.seconds.values())
        lines = [
            _RULE,
            "... Execution time report ...".center(len(_RULE)).rstrip(),
            _RULE,
            f"  Total Execution Time: {total:.4f} seconds",
            "",
            "  ----Wall Time----  ----Name----",
        ]
        for name, seconds in [*self.seconds.items(), ("Total", total)]:
            share = 100.0 * seconds / total if total > 0 else 0.0
            lines.append(f"  {seconds:8.4f} ({share:5.1f}%)  {name}")
        stream.write("\n".join(lines) + "\n")
        stream.flush()
