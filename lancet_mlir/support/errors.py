"""The one exception type for problems caused by the user's input or options, and the
one-line rendering of any exception that CLIs print."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from xdsl.dialects.builtin import FileLineColLoc
from xdsl.ir import Operation
from xdsl.utils.exceptions import ParseError, PassFailedException, VerifyException


class UserError(Exception):
    """An error caused by the user's input or options; CLIs print it as one line, exit code 1.

    `op`: the op of the input the error is about, when there is one (a bad attribute, an op
    a pass cannot handle). The message still names it in words, for callers that know no
    file; a tool that parsed the file places the line at the op (`file:line:col: %name =
    op.name: ...`, support/locations.py)."""

    def __init__(self, *args: object, op: Operation | None = None) -> None:
        super().__init__(*args)
        self.op = op


class OptionError(UserError):
    """A bad value of a library option, naming the parameter (`iters`, `max_seconds`); a tool
    re-raises it naming its own flag (`flag_error`: `--iters`, `--max-seconds`)."""

    def __init__(self, param: str, message: str) -> None:
        self.param = param
        self.reason = message
        super().__init__(f"{param}: {message}")

    def for_flag(self, flag: str | None = None) -> UserError:
        """The same error naming the command-line flag (default: `--` + param with dashes)."""
        return UserError(f"{flag or '--' + self.param.replace('_', '-')}: {self.reason}")


class OpError(PassFailedException):
    """A problem with one op of the input, raised by a check or a pass.

    A DiagnosticException, so `xdsl-opt --verify-diagnostics` prints its message as one
    line; `op` lets lancet-opt's `--verify-diagnostics` place it on the op's source line. The
    message starts with the op's location when the op carries one (`loc("f.mlir":3:5)`).
    """

    def __init__(self, message: str, op: Operation | None = None) -> None:
        self.op = op
        location = op.location if op is not None else None
        if isinstance(location, FileLineColLoc):
            where = f"{location.filename.data}:{location.line.data}:{location.column.data}"
            message = f"{where}: {message}"
        super().__init__(message)


def op_of(exc: BaseException) -> Operation | None:
    """The op an exception is about (its `op` attribute), or None."""
    op = getattr(exc, "op", None)
    return op if isinstance(op, Operation) else None


@contextmanager
def about_op(op: Operation) -> Iterator[None]:
    """A UserError raised meanwhile that names no op is about `op` (e.g. the module whose
    `lancet.*` attribute is bad, the HLO op a pattern matched)."""
    try:
        yield
    except UserError as exc:
        if exc.op is None:
            exc.op = op
        raise


def pass_failure(pass_name: str, exc: BaseException) -> OpError:
    """The failure of pass `pass_name` caused by `exc` (a UserError, PartitionError, ...):
    `pass-name: message`, about the same op as `exc` (if any), so that a tool places it."""
    return OpError(f"{pass_name}: {exc}", op_of(exc))


class OpVerifyError(VerifyException):
    """A VerifyException about one op (`op`), from a check outside the op's own verifier
    (dialects/checks.py), so that error lines can place it (support/locations.py)."""

    def __init__(self, message: str, op: Operation) -> None:
        self.op = op
        super().__init__(message)


class AgreedError(UserError):
    """A failure that every rank of an MPI job has already learnt of (through an allgather or
    broadcast), so the tool exits normally instead of aborting the job (support/mpi_job.py)."""


def one_line(exc: BaseException) -> str:
    """Condense an exception into one line, with file:line:col for parse errors."""
    if isinstance(exc, ParseError):
        loc = exc.span.get_location()
        msg = exc.msg.strip().splitlines()[0] if exc.msg.strip() else "parse error"
        return f"{loc}: {msg}"
    if isinstance(exc, RecursionError):
        return "input nested too deeply (more levels than Python's recursion limit allows)"
    if isinstance(exc, FileNotFoundError):
        return f"{exc.filename}: no such file"
    if isinstance(exc, IsADirectoryError | PermissionError):
        return f"{exc.filename}: {exc.strerror}"
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    # xDSL verifier messages put the diagnosis on the first line and the IR afterwards;
    # diagnostics printed with the IR come as "^^^^ message" lines.
    for k, ln in enumerate(lines):
        if not ln.startswith("^"):
            continue
        rest = ln.lstrip("^-").strip()
        if rest:
            return rest
        if k + 1 < len(lines):  # carets alone on a line: the message is the next line
            message = lines[k + 1]
            if lines[0].startswith("Error parsing pass pipeline"):
                return f"bad pass pipeline {lines[2]!r}: {message}" if len(lines) > 2 else message
            return message
    if lines[0].endswith("does not verify:") and len(lines) > 1:  # IRDL puts the reason next
        return f"{lines[0]} {lines[1]}"
    return lines[0]


class ParameterError(UserError):
    """A bad value of one named parameter of a library function or pass option.

    The message names the parameter as the library knows it (`gantt-window '5:1': the end
    must be after the start`); a tool that took the value from a flag renders it under the
    flag's name instead (`as_flag("--gantt-window")`)."""

    def __init__(self, parameter: str, value: object, reason: str, quoted: bool = True) -> None:
        self.parameter = parameter
        self.value = value
        self.reason = reason
        self.quoted = quoted  # False for file names, shown as they are
        super().__init__(self._render(parameter))

    def _render(self, name: str) -> str:
        shown = repr(self.value) if self.quoted else str(self.value)
        return f"{name} {shown}: {self.reason}"

    def as_flag(self, flag: str) -> UserError:
        """The same error naming the command-line flag that gave the value."""
        return UserError(self._render(flag))
