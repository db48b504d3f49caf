"""What the MPI launcher told this process, and how to end the whole job: standard library only.

`tools/launch.py` calls `abort_job` after a Ctrl-C that interrupted the import of a tool. Such
an import can leave modules half initialised (a module that finished importing may hold a
reference to a package whose import was cut short), so importing xDSL again at that point can
fail with an unrelated error and a traceback. This module therefore imports nothing but the
standard library (mpi4py only inside `world_comm`); `support/mpi_job.py` re-exports it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, NoReturn

SUPPRESS_ABORT = "MPIR_CVAR_SUPPRESS_ABORT_MESSAGE"
"""MPICH's switch for the message of its own `Abort(130) on node 1 ... MPI_Abort(...)` line,
which would follow ours; set (unless the user set it) before mpi4py initialises MPI. The
line's prefix remains, so `abort_job` also silences stderr just before MPI_Abort."""
os.environ.setdefault(SUPPRESS_ABORT, "1")

INTERRUPT_GRACE_S = 0.6
"""On Ctrl-C, a rank other than 0 waits this long before it reports and aborts: the launcher
sends Ctrl-C to every rank, and rank 0's abort (FORWARD_GRACE_S after its line) ends the
others before they print, so the job ends with one line; a rank interrupted alone still
reports itself after the wait."""

FORWARD_GRACE_S = 0.25
"""After writing its line, a rank waits this long before MPI_Abort: the launcher forwards a
rank's stderr asynchronously and MPI_Abort tears the job down at once, so without the wait the
one line was lost now and then on a loaded machine (1 run in 25 with 6 busy processes on 2 cores)."""

_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE")
_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")


def _env_int(names: tuple[str, ...]) -> int | None:
    for name in names:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def launcher_world_size() -> int | None:
    """The world size an MPI launcher announced in the environment, None outside one."""
    return _env_int(_SIZE_VARS)


def launcher_rank() -> int:
    """This process's rank as the launcher announced it (0 outside a launcher)."""
    return _env_int(_RANK_VARS) or 0


def in_mpi_job() -> bool:
    """True when an MPI launcher started this process as one of several ranks."""
    return (launcher_world_size() or 1) > 1


def world_comm() -> Any:
    """mpi4py's COMM_WORLD (importing mpi4py initialises MPI)."""
    os.environ.setdefault(SUPPRESS_ABORT, "1")
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _silence_stderr() -> None:
    """Point file descriptor 2 at /dev/null (the job is ending: our line is out)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
    except OSError:
        pass


def abort_job(tool: str, message: str, code: int) -> NoReturn:
    """Print `tool: error: rank R: message` and end every rank of the MPI job (after a Ctrl-C,
    code 130, ranks other than 0 wait INTERRUPT_GRACE_S first)."""
    rank = launcher_rank()
    if code == 130 and rank != 0:
        time.sleep(INTERRUPT_GRACE_S)
    if not message.startswith(f"rank {rank}:"):
        message = f"rank {rank}: {message}"
    sys.stderr.write(f"{tool}: error: {message}\n")
    sys.stderr.flush()
    time.sleep(FORWARD_GRACE_S)
    try:
        comm = world_comm()  # initialises MPI if the rank failed before doing so
        _silence_stderr()  # MPICH prints `Abort(code) on node R ...` after our line
        comm.Abort(code)
    finally:
        os._exit(code)  # not reached when Abort works
