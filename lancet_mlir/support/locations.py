"""Where an op came from: `file:line:col` and its SSA name, for error lines about one op.

xDSL keeps no source location on a parsed op (unless the text has `loc(...)`), so its verifier
errors name no place: `comm.all_to_all: result #0 shape ...` in a module with eight of them.
`LocatingParser` remembers the span each op starts at (in `SPANS`, a weak map: it costs one
entry per op and the line is computed only for an op an error names), and `located_message`
turns an exception into the one line the tools print:

    model.mlir:14:10: %5 = comm.all_to_all: result #0 shape [2, 64, 64] does not match ...

* an exception with an `op` attribute (lancet-mlir's OpError, raised by checks and passes)
  is placed at that op;
* an xDSL VerifyException (it names no op) is placed at the first op, in textual order, whose
  own verifier fails (re-run op by op);
* anything else, or an op a pass created (no span), gets the file name alone.
"""

from __future__ import annotations

import weakref

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Span

from lancet_mlir.support.errors import one_line

SPANS: weakref.WeakKeyDictionary[Operation, Span] = weakref.WeakKeyDictionary()
"""The span of the first token of every op a LocatingParser parsed."""


class LocatingParser(Parser):
    """An xDSL parser that remembers where each op starts (in `op_spans` and `SPANS`).

    Only the token's span is kept per op; the line is computed for the few ops a
    diagnostic names (computing every op's line while parsing would be quadratic).
    """

    def __init__(self, ctx: Context, text: str, name: str) -> None:
        super().__init__(ctx, text, name)
        self.op_spans: dict[Operation, Span] = {}

    def parse_operation(self) -> Operation:  # noqa: D102 - xDSL API
        start = self._current_token.span
        op = super().parse_operation()
        self.op_spans[op] = start
        SPANS[op] = start
        return op

    def current_span(self) -> Span:
        """The span of the token the parser is at."""
        return self._current_token.span


def where(op: Operation | None, line_offset: int = 0) -> str | None:
    """`file:line:col` of the op's first token, or None when it was not parsed here."""
    span = SPANS.get(op) if op is not None else None
    if span is None:
        return None
    loc = span.get_location()
    return f"{loc.file}:{loc.line + line_offset}:{loc.col}"


def op_label(op: Operation) -> str:
    """How an error line names an op: `%r = comm.all_to_all` (results with their SSA names,
    `%?` for an unnamed one), or the op name alone when it has no result."""
    if not op.results:
        return op.name
    names = ", ".join(f"%{r.name_hint}" if r.name_hint else "%?" for r in op.results)
    return f"{names} = {op.name}"


def failing_op(module: Operation) -> tuple[Operation, VerifyException] | None:
    """The first op in textual order whose own verifier fails, with its error."""
    for op in module.walk():
        try:
            op.verify(verify_nested_ops=False)
        except VerifyException as exc:
            return op, exc
    return None


def locate(exc: BaseException, module: Operation | None = None) -> tuple[Operation | None, str]:
    """The op an exception is about (its `op`, or for a VerifyException the failing op of
    `module`) and the exception's one-line message."""
    op = getattr(exc, "op", None)
    if isinstance(op, Operation):
        return op, one_line(exc)
    if isinstance(exc, VerifyException) and module is not None:
        found = failing_op(module)
        if found is not None:
            return found[0], one_line(found[1])
    return None, one_line(exc)


def with_location(op: Operation | None, message: str, source: str) -> str:
    """`message` prefixed by the op's `file:line:col` and label (the label only when the
    message does not name the op's SSA result already), else by `source`."""
    place = where(op)
    if op is None or place is None:
        if message.startswith(source):
            return message
        return f"{source}: {message}"
    if message.startswith(place):
        return message
    for prefix in (f"{op.name}: ", f"'{op.name}': "):
        if message.startswith(prefix):
            message = message[len(prefix):]
            break
    names = [f"%{r.name_hint}" for r in op.results if r.name_hint]
    if names and any(n in message for n in names):
        return f"{place}: {message}"
    return f"{place}: {op_label(op)}: {message}"


def located_message(exc: BaseException, source: str, module: Operation | None = None) -> str:
    """The one error line of `exc`, raised while reading, verifying or transforming the
    module parsed from `source` (see the module doc)."""
    if isinstance(exc, ParseError):
        return one_line(exc)  # carries its own file:line:col
    op, message = locate(exc, module)
    return with_location(op, message, source)


def parse_located(ctx: Context, text: str, source: str) -> ModuleOp:
    """Parse `text` remembering every op's span."""
    return LocatingParser(ctx, text, source).parse_module()
