"""Dialects of lancet-mlir, exposed as a lazy name -> factory table (as xDSL does)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Dialect


def get_all_dialects() -> dict[str, Callable[[], Dialect]]:
    """Return the project's dialects, each behind a factory that imports it on first use."""

    def get_comm() -> Dialect:
        from lancet_mlir.dialects.comm import Comm

        return Comm

    def get_comp() -> Dialect:
        from lancet_mlir.dialects.comp import Comp

        return Comp

    return {"comm": get_comm, "comp": get_comp}
