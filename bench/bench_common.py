"""Helpers shared by the micro-benchmarks: a parsing context and a timer."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from xdsl.context import Context

from lancet_mlir.dialects.comm import Comm

T = TypeVar("T")


def comm_context() -> Context:
    """A context with builtin, func, test and comm: what the synthetic benchmark graphs use."""
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func
    from xdsl.dialects.test import Test

    ctx = Context()
    for dialect in (Builtin, Func, Test, Comm):
        ctx.load_dialect(dialect)
    return ctx


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """Call `fn` once; return its value and the wall time in seconds."""
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start
