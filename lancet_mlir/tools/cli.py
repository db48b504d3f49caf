"""Command-line plumbing shared by the tools: an argparse with one-line errors and argument types."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import NoReturn

from lancet_mlir.support.errors import UserError


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors become UserError (one line via run_cli, exit code 1) and
    whose help shows every option's default."""

    def error(self, message: str) -> NoReturn:
        raise UserError(message)

    def format_help(self) -> str:  # noqa: D102 - argparse API
        show_defaults(self)
        return super().format_help()


def show_defaults(parser: argparse.ArgumentParser) -> None:
    """Append "(default: X)" to the help of every option of `parser` (and its subcommands)
    that has a meaningful default and whose help does not already mention one."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                show_defaults(sub)
            continue
        _annotate_default(action)


def _annotate_default(action: argparse.Action) -> None:
    default = action.default
    if not action.option_strings or action.help == argparse.SUPPRESS:
        return
    if default is None or default is False or default == [] or default == argparse.SUPPRESS:
        return
    text = action.help or ""
    if "default" in text:  # already explained in words (or annotated before)
        return
    action.help = f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


I64_MAX = 2**63 - 1
"""Integers end up in i64 attributes and tensor dimensions: larger ones are refused here."""


def _bounded(convert: Callable[[str], float], low: float, what: str) -> Callable[[str], float]:
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(value) or value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low:g}, got {text}")
        if isinstance(value, int) and value > I64_MAX:
            raise argparse.ArgumentTypeError(f"must be <= {I64_MAX} (i64), got {text}")
        return value

    parse.__name__ = f"{what.replace(' ', '_')}_at_least_{low:g}"
    return parse


positive_int = _bounded(int, 1, "an integer")
"""argparse type: an integer >= 1."""
non_negative_int = _bounded(int, 0, "an integer")
"""argparse type: an integer >= 0."""
non_negative_float = _bounded(float, 0.0, "a number")
"""argparse type: a finite number >= 0."""


def non_empty(text: str) -> str:
    """argparse type: any string but the empty one (an empty name would mean the default)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    value = non_negative_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


_UNITS = {
    "": 1,
    "b": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
}


def byte_size(text: str) -> int:
    """argparse type: a byte count >= 0, optionally with a unit (64KiB, 16MiB, 1GiB, 10MB)."""
    match = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else "?"
    try:
        number = float(match.group(1)) if match else math.nan
    except ValueError:
        number = math.nan
    if unit not in _UNITS or not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(
            f"expected a byte count such as 1048576 or 16MiB, got {text!r}"
        )
    return int(number * _UNITS[unit])
