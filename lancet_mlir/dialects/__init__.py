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

    def get_trace() -> Dialect:
        from lancet_mlir.dialects.trace import Trace

        return Trace

    def get_aten() -> Dialect:
        from lancet_mlir.dialects.aten import Aten

        return Aten

    def get_stub(name: str) -> Callable[[], Dialect]:
        def load() -> Dialect:
            from lancet_mlir.dialects.stablehlo_stubs import STUB_DIALECTS

            return next(d for d in STUB_DIALECTS if d.name == name)

        return load

    stubs = {name: get_stub(name) for name in ("sdy", "stablehlo", "mhlo")}
    return {"comm": get_comm, "comp": get_comp, "trace": get_trace, "aten": get_aten, **stubs}
