"""One-line error reporting shared by every command-line tool."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

from xdsl.utils.exceptions import ArgSpecParseError

from lancet_mlir.support.errors import UserError, one_line

__all__ = ["UserError", "fail", "one_line", "run_cli"]


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
    except (Exception, ArgSpecParseError) as exc:  # noqa: BLE001 - the one place that turns errors into a line
        if __debug__ and _debug_enabled():
            raise
        fail(tool, one_line(exc))
    raise SystemExit(code or 0)


def _debug_enabled() -> bool:
    import os

    return os.environ.get("LANCET_DEBUG", "") not in ("", "0")
