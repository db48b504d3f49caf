"""Resource limits checked before work starts, so absurd sizes fail at once with one line
instead of running until memory is gone.

* simulated ranks (`--ranks N` without mpiexec) run one after the other in this process;
  beyond `MAX_SIMULATED_RANKS` a run takes minutes per op, so it is refused (use mpiexec);
* the values a run keeps alive (every argument and op result of the function, times the
  ranks held in this process) are estimated from the IR types before anything is allocated
  and compared with the memory the machine has (`available_memory_bytes`).
"""

from __future__ import annotations

import os

from xdsl.ir import Operation

from lancet_mlir.dialects.comm import tensor_bytes
from lancet_mlir.support.errors import UserError

MAX_SIMULATED_RANKS = 1024
"""Most ranks `lancet-run --ranks` simulates in one process."""


def check_simulated_ranks(ranks: int) -> None:
    """UserError when `ranks` simulated ranks are more than one process should run."""
    if ranks > MAX_SIMULATED_RANKS:
        raise UserError(
            f"--ranks {ranks}: at most {MAX_SIMULATED_RANKS} ranks can be simulated in one "
            "process (each runs every op in turn); run more under mpiexec"
        )


def available_memory_bytes() -> int:
    """Memory available to this process: MemAvailable of /proc/meminfo, else physical RAM."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 1 << 40


def format_bytes(n: float) -> str:
    """`n` bytes in the largest binary unit that keeps the number >= 1 (e.g. '74.5 GiB')."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError("unreachable")


def check_memory(needed: int, what: str) -> None:
    """UserError when `needed` bytes exceed the memory available now."""
    have = available_memory_bytes()
    if needed > have:
        raise UserError(
            f"{what} needs about {format_bytes(needed)} of memory but only "
            f"{format_bytes(have)} is available"
        )


def run_bytes(func: Operation, ranks: int) -> int:
    """Bytes the reference executor holds for `ranks` ranks of `func`: every argument and op
    result stays alive until the run ends (an upper bound of what numpy allocates)."""
    entry = func.regions[0].blocks.first
    per_rank = sum(tensor_bytes(arg.type) for arg in entry.args) if entry is not None else 0
    per_rank += sum(tensor_bytes(r.type) for op in func.walk() for r in op.results)
    return per_rank * ranks


def check_run_memory(func: Operation, ranks: int, what: str) -> None:
    """UserError when running `func` on `ranks` local ranks would not fit in memory."""
    check_memory(run_bytes(func, ranks), what)
