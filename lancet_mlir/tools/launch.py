"""Console entry points that survive Ctrl-C during start-up.

Importing a tool (xDSL, numpy, matplotlib) takes a second or more; a Ctrl-C in that time used
to print a 30-90 line KeyboardInterrupt traceback. These entry points import nothing heavy
themselves: they import the tool inside a guard, so an interrupt during the import ends with
the one line `tool: error: interrupted` and exit code 130 (under mpiexec: every rank is
ended), and only then hand over to the tool's `main`, which handles later interrupts.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Callable
from typing import NoReturn


def _launch(tool: str, module: str) -> NoReturn:
    interrupted = False

    def on_interrupt(signum: int, frame: object) -> None:
        nonlocal interrupted
        interrupted = True
        raise KeyboardInterrupt

    # remember the interrupt itself: code run by the import may catch the KeyboardInterrupt
    # and raise something else (seen once under load: a traceback instead of the one line)
    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        main: Callable[[], None] = importlib.import_module(module).main
    except BaseException:
        if interrupted:
            _interrupted(tool)
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    main()
    raise SystemExit(0)  # main() always exits; this keeps the type checker honest


def _interrupted(tool: str) -> NoReturn:
    # the standard-library-only module: the interrupted import may have left xDSL half
    # initialised, and importing it again here could end in an unrelated traceback
    from lancet_mlir.support.launcher import abort_job, in_mpi_job

    if in_mpi_job():
        abort_job(tool, "interrupted", 130)
    sys.stderr.write(f"{tool}: error: interrupted\n")
    raise SystemExit(130)


def lancet_opt() -> NoReturn:
    """`lancet-opt`."""
    _launch("lancet-opt", "lancet_mlir.tools.lancet_opt")


def lancet_model() -> NoReturn:
    """`lancet-model`."""
    _launch("lancet-model", "lancet_mlir.tools.lancet_model")


def lancet_profile() -> NoReturn:
    """`lancet-profile`."""
    _launch("lancet-profile", "lancet_mlir.tools.lancet_profile")


def lancet_run() -> NoReturn:
    """`lancet-run`."""
    _launch("lancet-run", "lancet_mlir.tools.lancet_run")


def lancet_trace() -> NoReturn:
    """`lancet-trace`."""
    _launch("lancet-trace", "lancet_mlir.tools.lancet_trace")


def lancet_torch() -> NoReturn:
    """`lancet-torch`."""
    _launch("lancet-torch", "lancet_mlir.tools.lancet_torch")
