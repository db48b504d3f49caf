"""One-line error reporting shared by every command-line tool."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

from xdsl.utils.exceptions import ArgSpecParseError

from lancet_mlir.support.errors import AgreedError, UserError, one_line
from lancet_mlir.support.files import OutputSet
from lancet_mlir.support.mpi_job import abort_job, in_mpi_job

__all__ = ["UserError", "fail", "one_line", "run_cli"]


def fail(tool: str, message: str, code: int = 1) -> NoReturn:
    """Print `tool: error: message` on stderr and exit with `code`."""
    sys.stderr.write(f"{tool}: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def run_cli(tool: str, body: Callable[[], int | None]) -> NoReturn:
    """Run `body`, turning every exception into one error line and a non-zero exit.

    The body runs inside an OutputSet: the files it writes appear only if it returns
    normally (any exit code), all together; an error or Ctrl-C leaves earlier files as they were.
    """
    try:
        with _terminate_as_exception(), OutputSet():
            code = body()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        interrupted(tool)
    except Terminated as ended:
        what, code = ended.what(), 128 + ended.signum
        if in_mpi_job():
            abort_job(tool, what, code)
        fail(tool, what, code)
    except BrokenPipeError:
        raise SystemExit(0) from None
    except AgreedError as exc:  # every MPI rank knows: a normal exit
        fail(tool, one_line(exc))
    except (Exception, ArgSpecParseError) as exc:  # noqa: BLE001 - the one place that turns errors into a line
        if __debug__ and _debug_enabled():
            raise
        if in_mpi_job():  # the other ranks may wait for this one: end them all
            abort_job(tool, one_line(exc), 1)
        fail(tool, one_line(exc))
    raise SystemExit(code or 0)


ENDING_SIGNALS = {signal.SIGTERM: "terminated", signal.SIGHUP: "hung up"}
"""The signals a tool turns into `Terminated` (with its one-line word) while it runs."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived while a tool ran (raised by the handler `run_cli` installs,
    so that the run's staged and temporary output files are removed as after Ctrl-C)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    def what(self) -> str:
        """The error line's word: `terminated` or `hung up`."""
        return ENDING_SIGNALS.get(signal.Signals(self.signum), "terminated")


@contextmanager
def _terminate_as_exception() -> Iterator[None]:
    """Turn `ENDING_SIGNALS` into `Terminated` meanwhile, each unless the process already
    handles it (an embedding program's handler stays; `nohup` ignores SIGHUP), and not
    outside the main thread (no handler can be set there). Their default action ends the
    process at once, leaving the temporary files of the outputs being written."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: object) -> None:
        raise Terminated(signum)

    previous = {
        sig: signal.signal(sig, on_signal)
        for sig in ENDING_SIGNALS
        if signal.getsignal(sig) is signal.SIG_DFL
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def interrupted(tool: str) -> NoReturn:
    """Ctrl-C: one line and exit code 130; inside an MPI job every rank is ended."""
    if in_mpi_job():
        abort_job(tool, "interrupted", 130)
    fail(tool, "interrupted", 130)


def _debug_enabled() -> bool:
    import os

    return os.environ.get("LANCET_DEBUG", "") not in ("", "0")
