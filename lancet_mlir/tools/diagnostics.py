"""MLIR-style `--verify-diagnostics` for lancet-opt.

The input carries its expected diagnostics as comments, as in mlir-opt:

```mlir
// expected-error@+1 {{result #0 shape [4] must equal operand shape [8]}}
%r = comm.allreduce %x : (tensor<8xf32>) -> tensor<4xf32>
```

`expected-<kind>` with kind `error`, `warning`, `note` or `remark` names a diagnostic on the
comment's own line; `@+N` / `@-N` move N lines down / up, `@above` / `@below` one line, and
`@unknown` (a lancet-mlir extension) names a diagnostic that has no source location (e.g. a
pass error about a whole module). The text between `{{` and `}}` must be a substring of the
message; `expected-<kind>-re` makes the parts of the text in inner `{{...}}` regular
expressions (mlir-opt's and FileCheck's convention). As in mlir-opt, spaces may precede `@`
and the text, and an annotation may follow other words of a comment; a comment that starts
as an annotation but cannot be read is an error (`BadAnnotation`), never skipped. Every
produced diagnostic must be expected and every expectation produced, else
lancet-opt prints one line per mismatch (`file:line: unexpected error: ...` or
`file:line: expected error "..." was not produced`) and exits with code 1.

Diagnostics are the parse error, every op that fails verification, a use before its
definition, and the error of the first failing pass, each at the line of the op it is about.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Span

from lancet_mlir.support.errors import one_line
from lancet_mlir.support.locations import SPANS, LocatingParser

__all__ = ["LocatingParser"]  # re-exported: it lives in support/ for the runtime's loader too

KINDS = ("error", "warning", "note", "remark")
# as mlir-opt reads them (anywhere in a line, `// TODO: expected-error@+1 {{x}}` too): spaces
# may precede `@` and the text, `-re` makes the text a pattern; the text runs to the last `}}`
# before the next annotation of the line or its end (a pattern holds `{{...}}` itself)
_EXPECT = re.compile(
    r"expected-(error|warning|note|remark)(-re)?\s*"
    r"(?:@\s*(above|below|unknown|[+-]\s*\d+))?\s*\{\{"
)
# a comment that starts as an annotation (`-re`, `@` or `{` after the kind) but is none:
# refused, not silently skipped; prose such as `// expected-error lines ...` stays a comment
_ALMOST = re.compile(r"//\s*(expected-(?:error|warning|note|remark)(?:-re\b|\s*@|\s*\{))")
UNKNOWN_LINE = 0
"""The line of a diagnostic without a source location (matched by `@unknown`)."""


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic lancet-opt produced: kind, absolute line (UNKNOWN_LINE if none), text."""

    kind: str
    line: int
    message: str


@dataclass
class Expectation:
    """One `expected-<kind>@... {{text}}` annotation and whether a diagnostic matched it;
    `pattern`, for `expected-<kind>-re`, the text as a regular expression (the parts
    between `{{` and `}}` are patterns, the rest literal, as in mlir-opt and FileCheck)."""

    kind: str
    line: int
    text: str
    matched: bool = field(default=False, compare=False)
    pattern: re.Pattern[str] | None = field(default=None, compare=False)

    def matches(self, message: str) -> bool:
        """Whether a diagnostic's message is what this annotation expects."""
        if self.pattern is not None:
            return self.pattern.search(message) is not None
        return self.text in message


class BadAnnotation(ValueError):
    """An `expected-...` comment that cannot be read (it would be skipped silently)."""


def _pattern(text: str, line: int) -> re.Pattern[str]:
    """The regular expression of an `-re` annotation's text (`BadAnnotation` if invalid)."""
    parts, rest = [], text
    while (start := rest.find("{{")) >= 0:
        end = rest.find("}}", start + 2)
        if end < 0:
            break
        parts += [re.escape(rest[:start]), f"(?:{rest[start + 2 : end]})"]
        rest = rest[end + 2 :]
    parts.append(re.escape(rest))
    try:
        return re.compile("".join(parts))
    except re.error as exc:
        raise BadAnnotation(f"line {line}: expected-...-re {{{{{text}}}}}: {exc}") from None


def parse_expectations(text: str, line_offset: int = 0) -> list[Expectation]:
    """Every annotation in `text` (a chunk starting `line_offset` lines into its file)."""
    found: list[Expectation] = []
    for index, source in enumerate(text.splitlines()):
        here = line_offset + index + 1
        heads = list(_EXPECT.finditer(source))
        starts = {m.start() for m in heads}
        if any(m.start(1) not in starts for m in _ALMOST.finditer(source)):
            raise BadAnnotation(
                f"line {here}: cannot read the annotation {source.strip()!r} (expected "
                "`// expected-<kind>[-re][@+N|@-N|@above|@below|@unknown] {{text}}`)"
            )
        for k, m in enumerate(heads):
            stop = heads[k + 1].start() if k + 1 < len(heads) else len(source)
            end = source.rfind("}}", m.end(), stop)
            if end < 0:
                raise BadAnnotation(
                    f"line {here}: the annotation's {{{{text}}}} has no closing }}}}"
                )
            kind, regex, where, body = m.group(1), m.group(2), m.group(3), source[m.end() : end]
            target = _target_line(here, None if where is None else where.replace(" ", ""))
            pattern = _pattern(body, here) if regex else None
            found.append(Expectation(kind, target, body, pattern=pattern))
    return found


def _target_line(here: int, where: str | None) -> int:
    if where is None:
        return here
    if where == "above":
        return here - 1
    if where == "below":
        return here + 1
    if where == "unknown":
        return UNKNOWN_LINE
    return here + int(where)


def match(
    expectations: list[Expectation], diagnostics: list[Diagnostic], filename: str
) -> list[str]:
    """Pair diagnostics with expectations (same kind and line, text a substring of the
    message); one problem line per unexpected diagnostic and per unmet expectation."""
    problems: list[str] = []
    for diag in diagnostics:
        hit = next(
            (e for e in expectations
             if not e.matched and e.kind == diag.kind and e.line == diag.line
             and e.matches(diag.message)),
            None,
        )  # fmt: skip
        if hit is not None:
            hit.matched = True
            continue
        problems.append(f"{_where(filename, diag.line)}: unexpected {diag.kind}: {diag.message}")
    for e in expectations:
        if not e.matched:
            problems.append(
                f'{_where(filename, e.line)}: expected {e.kind} "{e.text}" was not produced'
            )
    return problems


def _where(filename: str, line: int) -> str:
    return f"{filename}:{line}" if line != UNKNOWN_LINE else f"{filename}:<unknown location>"


@dataclass
class OpLines:
    """Maps the ops of one parsed chunk to their absolute line numbers."""

    spans: dict[Operation, Span]
    line_offset: int

    def line_of(self, op: Operation | None) -> int:
        """The line `op` was parsed from (also for a copy `clone_located` made, e.g. of
        lancet-schedule's candidates), or UNKNOWN_LINE (an op a pass created)."""
        while op is not None:
            span = self.spans.get(op)
            if span is None:
                span = SPANS.get(op)
            if span is not None:
                return span.get_location().line + self.line_offset
            op = None
        return UNKNOWN_LINE


def parse_error_diagnostic(exc: ParseError, line_offset: int) -> Diagnostic:
    """The diagnostic of a parse error, at its span's line."""
    line = exc.span.get_location().line + line_offset
    text = exc.msg.strip().splitlines()[0] if exc.msg.strip() else "parse error"
    return Diagnostic("error", line, text)


def parser_position_diagnostic(
    parser: LocatingParser, exc: BaseException, line_offset: int
) -> Diagnostic:
    """The diagnostic of an error raised inside the parser that is not a ParseError (an
    attribute's own verifier): at the line the parser had reached."""
    line = parser.current_span().get_location().line + line_offset
    return Diagnostic("error", line, one_line(exc))


def verifier_diagnostics(module: ModuleOp, lines: OpLines) -> list[Diagnostic]:
    """One error per op that fails verification, in textual order (ops verified one by
    one, not nested, so each failure is reported at its own op)."""
    found: list[Diagnostic] = []
    for op in _walk(module):
        try:
            op.verify(verify_nested_ops=False)
        except VerifyException as exc:
            found.append(Diagnostic("error", lines.line_of(op), one_line(exc)))
    return found


def _walk(module: ModuleOp) -> Iterator[Operation]:
    yield from module.walk()


def exception_diagnostic(exc: BaseException, lines: OpLines) -> Diagnostic:
    """The diagnostic of an error raised while checking or transforming the module: at the
    line of the op it names (attribute `op`, set by lancet-mlir's OpError), else unknown."""
    op = getattr(exc, "op", None)
    return Diagnostic("error", lines.line_of(op if isinstance(op, Operation) else None),
                      one_line(exc))  # fmt: skip
