"""Tools that run as MPI jobs: no rank ever waits forever for a rank that failed.

A rank that leaves an MPI job with an error while the others sit in a collective hangs the job
(MPICH's launcher only cleans up after a rank killed by a signal). Three rules prevent it:

* **agreed set-up** (`agree_on_setup`): every tool parses and checks its arguments on every
  rank inside a guarded step, then the ranks allgather (ok / error message, fingerprint of the
  options). Any error or any rank whose options differ from rank 0's ends every rank with exit
  code 1 before anything else is communicated; rank 0 prints the one line
  `tool: error: rank R: ...`, the others exit silently;
* **agreed failures** (`AgreedError`): later steps share their errors the same way (the
  runtime's `agree`, the profile sync); an AgreedError is a normal exit on every rank;
* **abort otherwise** (`abort_job`): any other failure on one rank, and Ctrl-C (SIGINT) on one
  rank, prints `tool: error: rank R: ...` and calls `MPI_Abort`, which ends every rank.

A rank killed by SIGKILL cannot speak; MPICH's launcher then ends the other ranks itself
("BAD TERMINATION ... EXIT CODE: 9", naming the process id).

Fault injection, for tests: `LANCET_FAULT=R:PHASE[:ACTION][,...]` makes rank R fail when it
reaches `fault_point(PHASE)`; phases are `args` (set-up), `read` (input read), `verify`
(module verification), `collective` (before the first collective), `write` (output
writing); actions are `error` (default: a UserError), `sigint` and `sigkill` (the signal sent
to the rank itself).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import time
from collections.abc import Callable
from typing import Any, TypeVar

from lancet_mlir.support.errors import AgreedError, UserError, one_line
from lancet_mlir.support.launcher import abort_job as abort_job
from lancet_mlir.support.launcher import in_mpi_job as in_mpi_job
from lancet_mlir.support.launcher import launcher_rank as launcher_rank
from lancet_mlir.support.launcher import launcher_world_size as launcher_world_size
from lancet_mlir.support.launcher import world_comm as world_comm

T = TypeVar("T")

FAULT_ENV = "LANCET_FAULT"
FAULT_PHASES = ("args", "read", "verify", "collective", "write")

INPUT_OPTIONS = ("input_file", "module", "compare", "input", "inputs", "logs")
"""Options naming input files: ranks may read node-local copies, whose *contents* the tools
compare (e.g. lancet-run's module hash), so their names are left out of the fingerprint."""


def args_fingerprint(args: argparse.Namespace | object) -> str:
    """sha256 of the parsed options but input file names (sorted), to check that every rank
    got the same command line."""
    items = sorted((k, repr(v)) for k, v in vars(args).items() if k not in INPUT_OPTIONS)
    return hashlib.sha256(repr(items).encode()).hexdigest()


def agree_on_setup(setup: Callable[[], T], fingerprint: Callable[[T], str]) -> T:
    """Run `setup` (argument parsing and checks) on every rank and agree on its outcome.

    Outside an MPI job this is just `setup()`. Inside one, the ranks allgather their outcome
    and the fingerprint of their options; see the module doc for what happens on failure.
    """
    if not in_mpi_job():
        fault_point("args")
        return setup()
    comm = world_comm()
    value: Any = None
    try:
        fault_point("args")
        value = setup()
        state = ("ok", fingerprint(value))
    except SystemExit as exc:  # --help or --version: fine only if every rank does it
        state = ("exit", str(exc.code or 0))
    except Exception as exc:  # noqa: BLE001 - every rank must hear of it
        state = ("error", one_line(exc))
    states: list[tuple[str, str]] = comm.allgather(state)
    rank = comm.Get_rank()
    for other, (kind, message) in enumerate(states):
        if kind == "error":
            raise agreed_failure(rank, other, message)
    kinds = {kind for kind, _ in states}
    if kinds == {"exit"}:
        raise SystemExit(0 if state[1] == "0" else 1)
    if "exit" in kinds:
        other = next(r for r, (kind, _) in enumerate(states) if kind == "exit")
        raise agreed_failure(
            rank,
            other,
            "stopped after printing help or version; "
            "every rank must be given the same command line",
        )
    for other, (_, digest) in enumerate(states):
        if digest != states[0][1]:
            raise agreed_failure(
                rank,
                other,
                "options differ from rank 0's; every rank must be given the same command line",
            )
    return value


def agreed_failure(rank: int, failing: int, message: str) -> BaseException:
    """What rank `rank` raises when every rank learnt that rank `failing` failed: rank 0
    prints the one line, the other ranks exit 1 silently."""
    if rank == 0:
        return AgreedError(f"rank {failing}: {message}")
    return SystemExit(1)


def fault_point(phase: str) -> None:
    """Fail here if `LANCET_FAULT` asks for this rank and phase (see the module doc)."""
    spec = os.environ.get(FAULT_ENV, "")
    if not spec:
        return
    rank = launcher_rank()
    for item in spec.split(","):
        parts = item.strip().split(":")
        if len(parts) < 2 or parts[1] != phase or not parts[0].isdigit():
            continue
        if int(parts[0]) != rank:
            continue
        action = parts[2] if len(parts) > 2 else "error"
        if action == "sigint":
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler raises KeyboardInterrupt at once
        if action == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise UserError(f"injected fault at {phase}")
