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
from lancet_mlir.support.errors import OptionError, UserError

MAX_SIMULATED_RANKS = 1024
"""Most ranks `lancet-run --ranks` simulates in one process."""


def check_simulated_ranks(ranks: int) -> None:
    """UserError when `ranks` simulated ranks are more than one process should run."""
    if ranks > MAX_SIMULATED_RANKS:
        raise OptionError(
            "ranks",
            f"at most {MAX_SIMULATED_RANKS} ranks can be simulated in one process, got "
            f"{ranks} (each runs every op in turn); run more under mpiexec",
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


RUN_TEMPORARIES = 1
"""Kernel temporaries while one op runs, as multiples of its largest array (`run_bytes`; on
a 4-rank 2-layer model the estimate is 1.06x the tracemalloc peak)."""


RUN_OVERHEAD = 2 << 20
"""Bytes a run allocates besides its arrays (kernel runners, the value table), once."""


def run_bytes(func: Operation, ranks: int) -> int:
    """Peak bytes the reference executor holds for `ranks` ranks of `func`, from the IR types:
    the arguments (the caller holds them for the whole run) plus, at the costliest op, the
    results still to be read (the executor frees a value after its last use) and the op's
    temporaries (RUN_TEMPORARIES times its largest array). The old bound kept every result
    alive to the end: 13.8 GiB for a run that peaked at 3.5 GB."""
    entry = func.regions[0].blocks.first
    if entry is None:
        return RUN_OVERHEAD
    args = sum(tensor_bytes(arg.type) for arg in entry.args)
    ops = list(entry.ops)
    last: dict[object, int] = {}
    for position, op in enumerate(ops):
        for v in op.operands:
            last[v] = position
    live = 0
    peak = 0
    for position, op in enumerate(ops):
        made = [tensor_bytes(r.type) for r in op.results]
        sizes = made + [tensor_bytes(v.type) for v in op.operands]
        live += sum(made)
        peak = max(peak, live + RUN_TEMPORARIES * max(sizes, default=0))
        for v in {v for v in op.operands if last.get(v) == position}:
            if v not in entry.args:
                live -= tensor_bytes(v.type)
        live -= sum(b for r, b in zip(op.results, made, strict=True) if r not in last)
    return RUN_OVERHEAD + (args + peak) * ranks


def check_run_memory(func: Operation, ranks: int, what: str) -> None:
    """UserError when running `func` on `ranks` local ranks would not fit in memory."""
    check_memory(run_bytes(func, ranks), what)
