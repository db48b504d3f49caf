"""Reading modules for the runtime: one parse, verified, with every dialect the tools know.

Unregistered ops are accepted by the parser on purpose: the executor then names the op it
cannot run, which is a clearer message than a parse error about an unknown dialect.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from lancet_mlir.support.errors import UserError
from lancet_mlir.support.files import STDOUT, read_text
from lancet_mlir.support.mpi_job import fault_point


def make_context() -> Context:
    """A Context with xDSL's dialects and lancet-mlir's (lazily loaded) registered."""
    from xdsl.dialects import get_all_dialects as xdsl_dialects

    from lancet_mlir.dialects import get_all_dialects

    ctx = Context(allow_unregistered=True)
    for name, factory in xdsl_dialects().items():
        ctx.register_dialect(name, factory)
    registered = set(ctx.registered_dialect_names)
    for name, factory in get_all_dialects().items():
        if name not in registered:
            ctx.register_dialect(name, factory)
    return ctx


@dataclass(frozen=True)
class LoadedModule:
    """A parsed, verified module with the text it came from (for cross-rank hashing)."""

    module: ModuleOp
    text: str
    source: str

    @property
    def sha256(self) -> str:
        """Hex sha256 of the module text."""
        return hashlib.sha256(self.text.encode()).hexdigest()


def parse_module_text(text: str, source: str = "<input>") -> LoadedModule:
    """Parse and verify `text`; UserError naming `source` on any problem."""
    from lancet_mlir.dialects.checks import check_module
    from lancet_mlir.graph.rewrite import check_dominance
    from lancet_mlir.support.locations import LocatingParser, located_message

    module: ModuleOp | None = None
    try:
        # an empty file is an empty module, as in lancet-opt and mlir-opt
        parser = None if not text.strip() else LocatingParser(make_context(), text, source)
        module = ModuleOp([]) if parser is None else parser.parse_module()
        module.verify()
        check_module(module)
        check_dominance(module)
        fault_point("verify")
    except Exception as exc:  # noqa: BLE001 - every parse/verify failure becomes one line
        raise UserError(located_message(exc, source, module)) from exc
    return LoadedModule(module, text, source)


def load_module(path: str) -> LoadedModule:
    """Read, parse and verify the module in file `path` (`-` reads stdin)."""
    fault_point("read")
    return parse_module_text(read_text(path), "<stdin>" if path == STDOUT else path)
