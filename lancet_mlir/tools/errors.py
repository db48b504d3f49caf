"""One-line error reporting shared by every command-line tool."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

from xdsl.utils.exceptions import ParseError


class UserError(Exception):
    """An error caused by the user's input or options; printed as one line, exit code 1."""


def one_line(exc: BaseException) -> str:
    """Condense an exception into one line, with file:line:col for parse errors."""
    if isinstance(exc, ParseError):
        loc = exc.span.get_location()
        msg = exc.msg.strip().splitlines()[0] if exc.msg.strip() else "parse error"
        return f"{loc}: {msg}"
    if isinstance(exc, FileNotFoundError):
        return f"{exc.filename}: no such file"
    if isinstance(exc, IsADirectoryError | PermissionError):
        return f"{exc.filename}: {exc.strerror}"
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    # xDSL verifier messages put the diagnosis on the first line and the IR afterwards;
    # diagnostics printed with the IR come as "^^^^ message" lines.
    for ln in lines:
        if ln.startswith("^"):
            return ln.lstrip("^-").strip()
    return lines[0]


def fail(tool: str, message: str, code: int = 1) -> NoReturn:
    """Print `tool: error: message` on stderr and exit with `code`."""
    sys.stderr.write(f"{tool}: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def run_cli(tool: str, body: Callable[[], int | None]) -> NoReturn:
    """Run `body`, turning every exception into one error line and a non-zero exit."""
    try:
        code = body()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        fail(tool, "interrupted", 130)
    except BrokenPipeError:
        raise SystemExit(0) from None
    except Exception as exc:  # noqa: BLE001 - the one place that turns errors into a line
        if __debug__ and _debug_enabled():
            raise
        fail(tool, one_line(exc))
    raise SystemExit(code or 0)


def _debug_enabled() -> bool:
    import os

    return os.environ.get("LANCET_DEBUG", "") not in ("", "0")
