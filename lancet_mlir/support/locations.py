"""Where an op came from: `file:line:col` and its SSA name, for error lines about one op.

xDSL keeps no source location on a parsed op (unless the text has `loc(...)`), so its verifier
errors name no place: `comm.all_to_all: result #0 shape ...` in a module with eight of them.
`LocatingParser` remembers the span each op starts at (in `SPANS`, a weak map: it costs one
entry per op and the line is computed only for an op an error names), and `located_message`
turns an exception into the one line the tools print:

    model.mlir:14:10: %5 = comm.all_to_all: result #0 shape [2, 64, 64] does not match ...

* an exception with an `op` attribute is placed at that op: lancet-mlir's OpError (checks,
  passes; `support.errors.pass_failure` keeps the op of the error a pass reports), a
  UserError or PartitionError given `op=` (a bad attribute, an op a pass cannot handle);
  its message leads with the pass name and names the op in words, for callers that know no
  file (xdsl-opt), and the line drops the op name the label repeats:

    model.mlir:63:5: %l1_expert_in = comm.all_to_all: tutel-pipeline: capacity 4 of ...

* an xDSL VerifyException (it names no op) is placed at the first op, in textual order, whose
  own verifier fails (re-run op by op);
* anything else, or an op a pass created (no span), gets the file name alone.

lancet-opt (also rank 0 under `--mpi`) renders its error lines with `tool_message` (a
UserError about no op of the file stays as it is); the loaders of lancet-run and
`lancet-profile measure` with `located_message`. `clone_located` copies a module with its
spans (lancet-schedule tries its partition candidates on such clones).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import replace

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnregisteredOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Span

from lancet_mlir.support.errors import UserError, one_line, op_of

SPANS: weakref.WeakKeyDictionary[Operation, Span] = weakref.WeakKeyDictionary()
"""The span of the first token of every op a LocatingParser parsed."""


class LocatingParser(Parser):
    """An xDSL parser that remembers where each op starts (in `op_spans` and `SPANS`).

    Only the token's span is kept per op; the line is computed for the few ops a
    diagnostic names (computing every op's line while parsing would be quadratic).
    """

    def __init__(self, ctx: Context, text: str, name: str, line_offset: int = 0) -> None:
        super().__init__(ctx, text, name)
        self.op_spans: dict[Operation, Span] = {}
        self.line_offset = line_offset
        """Lines of the file above `text` (a `--split-input-file` chunk): `SPANS` counts
        them, so error lines name the file's line; `op_spans` does not."""

    def parse_operation(self) -> Operation:  # noqa: D102 - xDSL API
        start = self._current_token.span
        op = super().parse_operation()
        self.op_spans[op] = start
        SPANS[op] = replace(start, line_offset=self.line_offset) if self.line_offset else start
        return op

    def current_span(self) -> Span:
        """The span of the token the parser is at."""
        return self._current_token.span


def clone_located(module: ModuleOp) -> ModuleOp:
    """A clone of `module` whose ops keep the spans of the ops they copy, so that an error
    about an op of the clone (a pass trying a candidate on it) is placed in the input."""
    clone = module.clone()
    for copy, original in zip(clone.walk(), module.walk(), strict=True):
        span = SPANS.get(original)
        if span is not None:
            SPANS[copy] = span
    return clone


def where(op: Operation | None, line_offset: int = 0) -> str | None:
    """`file:line:col` of the op's first token, or None when it was not parsed here."""
    span = SPANS.get(op) if op is not None else None
    if span is None:
        return None
    loc = span.get_location()
    return f"{loc.file}:{loc.line + line_offset}:{loc.col}"


_RESULTS = re.compile(r"(%[^\s,=:()]+(?::\d+)?(?:\s*,\s*%[^\s,=:()]+(?::\d+)?)*)\s*=")
"""The result list an op's text starts with: `%a, %b =`, `%42 =`, `%x:2 =`."""


def result_names(op: Operation) -> list[str]:
    """The op's SSA result names as the input wrote them (`%42`, `%x:2`), read from the
    text at its span (xDSL keeps no name hint for a number); for an op not parsed here,
    its name hints (`%?` for a result without one)."""
    span = SPANS.get(op)
    content = span.input.content if span is not None else None
    if isinstance(content, str):
        assert span is not None
        found = _RESULTS.match(content, span.start)
        if found is not None:
            return [n.strip() for n in found.group(1).split(",")]
    return [f"%{r.name_hint}" if r.name_hint else "%?" for r in op.results]


def op_label(op: Operation) -> str:
    """How an error line names an op: `%r = comm.all_to_all` (results with their SSA names
    as written, `%?` for an unnamed one), or the op name alone when it has no result."""
    name = op_display_name(op)
    if not op.results:
        return name
    return f"{', '.join(result_names(op))} = {name}"


def op_display_name(op: Operation) -> str:
    """The op's name as written in the input, also for an unregistered op (the one home of
    this helper: `graph.dataflow` re-exports it)."""
    return op.op_name.data if isinstance(op, UnregisteredOp) else op.name


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
    message = _without_op_name(op, message)
    names = [n.split(":")[0] for n in result_names(op) if n != "%?"]
    if names and any(re.search(rf"{re.escape(n)}(?![\w$.-])", message) for n in names):
        return f"{place}: {message}"
    return f"{place}: {op_label(op)}: {message}"


def _without_op_name(op: Operation, message: str) -> str:
    """`message` without its leading `op.name: ` (the label says it), also after the
    `pass-name: ` a pass failure starts with (`simulate: comm.allreduce: ...`)."""
    names = {op.name, op_display_name(op)}
    prefixes = [p for n in sorted(names) for p in (f"{n}: ", f"'{n}': ")]
    head, sep, rest = message.partition(": ")
    for prefix in prefixes:
        if message.startswith(prefix):
            return message[len(prefix) :]
    if sep and " " not in head:  # a pass name
        for prefix in prefixes:
            if rest.startswith(prefix):
                return f"{head}: {rest[len(prefix) :]}"
    return message


def tool_message(exc: BaseException, source: str, module: Operation | None = None) -> str:
    """The error line a tool prints for `exc`, raised while reading, verifying or
    transforming the module parsed from `source`: a UserError that names no op of the
    file as it is (it names its own subject), else `located_message`."""
    if isinstance(exc, UserError) and where(op_of(exc)) is None:
        return one_line(exc)
    return located_message(exc, source, module)


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
