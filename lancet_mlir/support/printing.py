"""A faster xDSL printer for the large modules the partitioning passes write.

xDSL's `Printer` writes a string literal one character at a time (`print_bytes_literal`:
one `print_string` per byte) and every piece through `print(..., end="")`. A scheduled
24-layer module has about 24k string attributes (the `lancet.origin` keys of the parts,
some 60 characters each), and printing it took longer than parsing its input. `FastPrinter`
writes a literal whose characters need no escape in one piece and plain text with one
`write`; everything else is xDSL's code, so the output is the same, byte for byte
(test_printing.py). `FastMLIRTarget` is xDSL's `mlir` target printing with it (lancet-opt's
output; `--syntax-highlight` keeps xDSL's printer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.printer import Printer
from xdsl.targets.mlir import MLIRTarget

_PLAIN = re.compile(rb"[\x20\x21\x23-\x5b\x5d-\x7e]*")
"""Bytes that `Printer.print_bytes_literal` writes as themselves: printable ASCII but the
double quote and the backslash."""


class FastPrinter(Printer):
    """xDSL's `Printer`, writing plain text and escape-free literals in one piece each."""

    def print_string(self, text: str, *, indent: int | None = None) -> None:
        """`Printer.print_string`; text without a newline is written at once (the same
        column bookkeeping, no `print` call)."""
        if "\n" in text:
            super().print_string(text, indent=indent)
            return
        self._current_column += len(text)
        self.stream.write(text)

    def print_bytes_literal(self, bytestring: bytes) -> None:
        """`Printer.print_bytes_literal`; a literal that needs no escape in one write."""
        if _PLAIN.fullmatch(bytestring) is None:
            super().print_bytes_literal(bytestring)
            return
        self.print_string('"' + bytestring.decode("ascii") + '"')


@dataclass(frozen=True)
class FastMLIRTarget(MLIRTarget):
    """xDSL's `mlir` target with `FastPrinter` (xDSL's printer for `--syntax-highlight`)."""

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        """Print `module` and the dialects' metadata to `output`, as `MLIRTarget` does."""
        if self.syntax_highlight:
            super().emit(ctx, module, output)
            return
        printer = FastPrinter(
            stream=output,
            print_generic_format=self.print_generic_format,
            print_properties_as_attributes=self.print_properties_as_attributes,
            print_debuginfo=self.print_debuginfo,
        )
        printer.print_op(module)
        printer.print_metadata(ctx.loaded_dialects)
        print("\n", file=output)
