"""File helpers: all-or-nothing outputs, reads with one-line errors, and the data files
shipped in the package.

Outputs. Every writer goes through `atomic_path` (or `write_atomic`), which writes a
temporary file next to the target and renames it over the target only on success, so a
failed write never leaves a half-written file. Inside an `OutputSet` (one per tool run) the
renames are *deferred*: every output of the run is staged and the set renames them all only
when the whole run succeeded; a failure, an exception or Ctrl-C anywhere removes the staged
files and leaves every earlier output as it was. The path `-` means standard output: its text
is staged too and printed at commit.

The commit prints the stdout output first (a failed print renames nothing), then renames
one file after the other with SIGINT, SIGTERM and SIGHUP held (POSIX has no multi-file
rename); the primary output (`-o`) is renamed last, so a crash inside that window of a few
system calls can at worst leave new secondary outputs next to an old primary output. An
output through a symbolic link to a regular file replaces that file (the link stays).
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from lancet_mlir.support.errors import UserError

STDOUT = "-"
"""The output (and input) path that means the standard stream."""


@dataclass
class _Staged:
    target: str
    tmp: str
    primary: bool


@dataclass
class OutputSet:
    """The outputs of one run, committed together (see the module doc).

    Use as a context manager: on a normal exit every staged output is renamed into place
    (primary outputs last); on an exception (KeyboardInterrupt included) they are removed.
    `inputs` are the run's input files: staging one of them as an output is refused.
    """

    inputs: list[str] = field(default_factory=list)
    _staged: list[_Staged] = field(default_factory=list)

    def add_inputs(self, *paths: str | None) -> None:
        """Declare input files of the run (None entries are skipped)."""
        self.inputs.extend(p for p in paths if p)

    def __enter__(self) -> OutputSet:
        _ACTIVE.append(self)
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        _ACTIVE.remove(self)
        if kind is None:
            self.commit()
        else:
            self.discard()

    def stage(self, target: str, tmp: str, primary: bool = False) -> None:
        """Take over the finished temporary file `tmp` to become `target` at commit."""
        for old in [s for s in self._staged if s.target == target]:
            # the same output written again (one per --split-input-file chunk): last wins
            self._staged.remove(old)
            _remove(old.tmp)
        try:
            check_output_folder(target, inputs=self.inputs)
            if target == STDOUT and any(s.target == STDOUT for s in self._staged):
                raise UserError("only one output can go to standard output ('-')")
        except UserError:
            _remove(tmp)
            raise
        self._staged.append(_Staged(target, tmp, primary))

    def commit(self) -> None:
        """Print the stream outputs (stdout, stderr) first, then rename every staged file
        into place (primary last). A stream can fail where a rename does not (closed, full,
        a reader gone), and printed text cannot be taken back: so a failed print renames
        nothing (the error says why), and only a reader that went away (`BrokenPipeError`,
        the usual exit 0 of `... | head`) still gets the files renamed. The renames run with
        Ctrl-C, SIGTERM and SIGHUP held (`held_signals`); the print does not (a stalled pipe
        may be interrupted)."""
        order = sorted(self._staged, key=lambda s: s.primary)  # stable: staging order otherwise
        self._staged = []
        printed = [s for s in order if s.target in STREAMS]
        files = [s for s in order if s.target not in STREAMS]
        gone: BrokenPipeError | None = None
        try:
            for staged in printed:
                _print_staged(staged)
        except BrokenPipeError as exc:
            gone = exc
        except BaseException:
            for rest in order:
                _remove(rest.tmp)
            raise
        with held_signals():
            for k, staged in enumerate(files):
                try:
                    _rename_staged(staged)
                except BaseException:
                    for rest in files[k:]:
                        _remove(rest.tmp)  # the one cut off too (gone if it was renamed)
                    raise
        if gone is not None:
            raise gone

    def discard(self) -> None:
        """Remove every staged temporary file; the targets keep their old contents."""
        for staged in self._staged:
            _remove(staged.tmp)
        self._staged = []


_ACTIVE: list[OutputSet] = []


def active_output_set() -> OutputSet | None:
    """The innermost OutputSet of this run, or None (outputs are then renamed at once)."""
    return _ACTIVE[-1] if _ACTIVE else None


def commit_outputs() -> None:
    """Commit the active OutputSet now (MPI steps whose success every rank must learn)."""
    outputs = active_output_set()
    if outputs is not None:
        outputs.commit()


def declare_inputs(*paths: str | None) -> None:
    """Declare input files of the run to the active OutputSet: no output may replace them."""
    outputs = active_output_set()
    if outputs is not None:
        outputs.add_inputs(*paths)


def _publish(staged: _Staged) -> None:
    """Print (`STREAMS`) or rename one staged output."""
    if staged.target in STREAMS:
        _print_staged(staged)
    else:
        _rename_staged(staged)


def _print_staged(staged: _Staged) -> None:
    with open(staged.tmp, "rb") as f:
        data = f.read()
    _remove(staged.tmp)
    out = sys.stdout if staged.target == STDOUT else sys.stderr
    name = "standard output" if staged.target == STDOUT else "standard error"
    if out is None:  # started with that descriptor closed (`>&-`)
        raise UserError(CLOSED_STDOUT if out is sys.stdout else f"{name} is closed")
    try:
        out.flush()
        fd = _fileno(out)
        if fd is not None:
            _write_all(fd, data)
        elif (stream := getattr(out, "buffer", None)) is not None:  # tests' captures
            stream.write(data)
        else:
            out.write(data.decode("utf-8", errors="replace"))
        out.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:  # e.g. stdout is /dev/full
        raise UserError(f"-: {name}: {exc.strerror or exc}") from None


def _fileno(stream: object) -> int | None:
    """The descriptor under a standard stream, or None (a test's capture has none)."""
    try:
        return stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return None


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to `fd`: a short write (a full disk takes what fits) is
    continued, so its error (ENOSPC) is raised, not lost as the buffered stream lost it."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _rename_staged(staged: _Staged) -> None:
    try:
        os.replace(staged.tmp, staged.target)
    except OSError as exc:
        _remove(staged.tmp)
        raise UserError(f"{staged.target}: {exc.strerror or exc}") from None


CLOSED_STDOUT = "-: standard output is closed (give the output a file)"


def stdout_is_open() -> bool:
    """Whether standard output can be written at all (not started with fd 1 closed)."""
    if sys.stdout is None:
        return False
    try:
        os.fstat(1)
    except OSError:
        return False
    return True


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Held back while the staged outputs are renamed (a few system calls)."""


@contextmanager
def held_signals() -> Iterator[None]:
    """Run the body with `HELD_SIGNALS` recorded instead of handled: a handler of Python's
    runs in the main thread whichever thread the signal reaches (numpy's BLAS threads
    among them), so a thread signal mask cannot hold it, but a handler that only notes it
    can. A signal that came meanwhile is dropped when the body completed (everything it
    was to do is done: the run ends as it would have a moment later) and raised as its
    usual exception when the body failed. Not in other threads (no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []

    def note(signum: int, frame: object) -> None:
        came.append(signum)

    previous = {}
    for sig in HELD_SIGNALS:
        handler = signal.getsignal(sig)
        if handler is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, note)
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if failed and came:
            handler = previous.get(came[0])
            if callable(handler):
                handler(came[0], None)  # e.g. KeyboardInterrupt or the tool's Terminated


STDOUT_ALIASES = ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")
"""Paths that name standard output whatever it is (also when it cannot be looked at)."""


STDERR_ALIASES = ("/dev/stderr", "/dev/fd/2", "/proc/self/fd/2")
"""Standard error: never counted as standard output, even where both are one terminal or
one pipe (`2>&1`): the user chose it. Written through the `sys.stderr` stream (opening the
path would truncate the file it was redirected to, `> all.log 2>&1` or `2>> build.log`)."""

STDERR = "<stderr>"
"""The staged target of an output to standard error (`STDERR_ALIASES`)."""

STREAMS = (STDOUT, STDERR)
"""Staged targets printed to a stream at commit, not renamed."""


def is_stdout(path: str) -> bool:
    """Whether writing `path` writes standard output: `-`, one of `STDOUT_ALIASES`, or a
    path naming the very regular file or pipe that file descriptor 1 is, e.g. `/dev//stdout`
    in a pipe, a link to it, or `r.json` in `lancet-opt ... > r.json`. Not a device (a
    terminal, /dev/null: text there is not lost, and any number of outputs may be thrown
    away) and not `STDERR_ALIASES`."""
    if path == STDOUT or path in STDOUT_ALIASES:
        return True
    if path in STDERR_ALIASES or path == os.devnull:
        return False
    try:
        here, out = os.stat(path), os.fstat(1)
    except (OSError, ValueError):
        return False
    if not (stat.S_ISREG(here.st_mode) or stat.S_ISFIFO(here.st_mode)):
        return False
    return (here.st_dev, here.st_ino) == (out.st_dev, out.st_ino)


def _writes_through(target: str) -> bool:
    """/dev/null, a FIFO or another file that is not a regular one: renaming over it would
    replace the device, so such targets are written directly."""
    return os.path.exists(target) and not os.path.isfile(target)


def _resolved(target: str) -> str:
    """`target` with symbolic links followed, so that the new file replaces what a link
    points to (the link stays) through the same temporary file and deferred rename as any
    output; `-` and `STDOUT_ALIASES` become `-`, `STDERR_ALIASES` `STDERR`, both printed to
    the stream (appended where it was redirected). A file that only is what fd 1 is
    (`-o x.txt > x.txt`) is replaced as a file: the clash checks (`is_stdout`) refuse it
    where the IR goes to stdout too."""
    if target == STDOUT or target in STDOUT_ALIASES:
        return STDOUT
    if target in STDERR_ALIASES:
        return STDERR
    if not os.path.islink(target):
        return target
    try:
        if not stat.S_ISREG(os.stat(target).st_mode):
            return target  # a link to a pipe or device (/dev/stderr): written through it
    except OSError:
        pass  # a dangling link: the file it names is created
    return os.path.realpath(target)


@contextmanager
def atomic_path(path: str | os.PathLike[str], primary: bool = False) -> Iterator[str]:
    """Yield a temporary file name for the output `path`; it becomes `path` on success.

    For writers that want a file name (matplotlib, numpy). On any failure the temporary
    file is removed and `path` is left as it was. Inside an OutputSet the rename waits for
    the set's commit (`primary` outputs go last); `-` stands for standard output. OS errors
    about the temporary file name the path that was asked for.
    """
    asked = os.fspath(path)
    outputs = active_output_set()
    if outputs is not None:
        check_output_folder(asked, inputs=outputs.inputs)
    target = _resolved(asked)
    if target not in STREAMS and _writes_through(target):
        try:
            yield target
        except OSError as exc:  # e.g. /dev/full: name the output
            if exc.filename in (target, None):
                raise UserError(f"{asked}: {exc.strerror or exc}") from None
            raise
        return
    tmp = _make_temp(target)
    try:
        try:
            yield tmp
        except OSError as exc:
            if exc.filename in (tmp, None):
                raise UserError(f"{asked}: {exc.strerror or exc}") from None
            raise
        outputs = active_output_set()
        if outputs is not None:
            outputs.stage(target, tmp, primary)
        else:
            _publish(_Staged(target, tmp, primary))
    except BaseException:
        _remove(tmp)
        raise


TEMP_PREFIX = ".lancet-"
"""Staged outputs are `.lancet-<pid>@<host>-<random>.tmp` in the target's folder (stdout's:
`.lancet-stdout-<pid>@<host>-<random>.tmp` in the temporary folder)."""


def _temp_owner() -> str:
    """`<pid>@<host>` of this process: what `sweep_stale_temps` reads back (a host name has
    no `@`; characters other than letters, digits, `.`, `-` and `_` become `_`)."""
    host = "".join(c if c.isalnum() or c in ".-_" else "_" for c in os.uname().nodename)
    return f"{os.getpid()}@{host or 'localhost'}"


STALE_AFTER_S = 24 * 3600.0
"""A staged output untouched for this long whose process is gone is stale. The age guards
against a live run of another pid namespace with the same host name (containers sharing the
host's network and a folder), whose pid is not ours to see: a run holds its staged files
unchanged until it commits, so only an age far beyond any run's tells a left-over file."""


def sweep_stale_temps(folder: str, now: float | None = None) -> list[str]:
    """Remove the staged outputs in `folder` that a process of this host left when it was
    killed (SIGKILL, or `MPI_Abort` of another rank ends it before it can clean up): its
    `.lancet-<pid>@<host>-*.tmp` files, this host's and this user's, regular files not
    modified for STALE_AFTER_S, whose process no longer exists. A live process's (pid reused
    or not), another host's (a shared folder) and another user's are left alone. Returns the
    names removed. Never raises."""
    import time

    now = time.time() if now is None else now
    pid, _, host = _temp_owner().partition("@")
    removed = []
    try:
        names = sorted(os.listdir(folder or "."))
    except OSError:
        return removed
    for name in names:
        owner = _stale_owner(name, host)
        if owner is None or owner == int(pid) or _alive(owner):
            continue
        path = os.path.join(folder, name)
        try:
            info = os.lstat(path)
            old = now - info.st_mtime >= STALE_AFTER_S
            if old and stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid():
                os.unlink(path)
                removed.append(name)
        except OSError:
            continue
    return removed


def _stale_owner(name: str, host: str) -> int | None:
    """The pid of a staged output's name made on `host` (`TEMP_PREFIX`), else None."""
    if not (name.startswith(TEMP_PREFIX) and name.endswith(".tmp")):
        return None
    rest = name[len(TEMP_PREFIX) :].removeprefix("stdout-")
    pid, at, after = rest.partition("@")
    if not (at and pid.isdigit() and after.startswith(host + "-")):
        return None
    # mkstemp's random part has no `-`: host `vm` must not read `vm-2`'s names as its own
    random = after[len(host) + 1 : -len(".tmp")]
    if not random or not all(c.isalnum() or c == "_" for c in random):
        return None
    return int(pid)


def _alive(pid: int) -> bool:
    """Whether process `pid` exists and is no zombie (a killed rank whose parent, e.g. a
    container's first process, does not reap it stays a zombie: it holds no file)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: another user's process has that pid
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return True  # no /proc (macOS): it exists
    return state != [b"Z"]


_swept: set[str] = set()  # folders swept by this process (once each)


def _sweep_once(folder: str) -> None:
    if folder not in _swept:
        _swept.add(folder)
        sweep_stale_temps(folder)


def _make_temp(target: str) -> str:
    prefix = f"{TEMP_PREFIX}{_temp_owner()}-"
    if target in STREAMS:
        _sweep_once(tempfile.gettempdir())
        fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}stdout-{_temp_owner()}-", suffix=".tmp")
    else:
        check_output_folder(target)
        folder = os.path.dirname(os.path.abspath(target))
        _sweep_once(folder)
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
        except OSError as exc:
            raise UserError(f"{target}: {exc.strerror or exc}") from None
    try:  # a signal from here on must not leave the file behind
        os.close(fd)
        # mkstemp makes 0600: a new output follows the umask, a replaced one keeps its mode
        try:
            mode = os.stat(target).st_mode & 0o7777 if target not in STREAMS else None
        except OSError:
            mode = None
        os.chmod(tmp, 0o666 & ~_umask() if mode is None else mode)
    except BaseException:
        _remove(tmp)
        raise
    return tmp


def check_output_folder(
    path: str | os.PathLike[str], flag: str | None = None, inputs: Iterable[str] = ()
) -> None:
    """UserError unless `path` can become an output: its folder exists, it is no folder,
    and it is none of `inputs` (an output never replaces an input of the same run).

    Tools call this before long work (measuring, building a model), not only when they
    finally write. `flag` (e.g. "--save") prefixes the message; `-` (stdout) always passes.
    """
    target = os.fspath(path)
    if target in (STDOUT, STDERR) or target in STDERR_ALIASES:
        return
    name = f"{flag} {target}" if flag else target
    if not target:
        raise UserError(f"{flag or 'output'}: empty path")
    if os.path.isdir(target):
        raise UserError(f"{name}: is a folder")
    if target.endswith(os.sep):
        raise UserError(f"{name}: names a folder, not a file")
    if os.path.islink(target):
        try:
            os.stat(target)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # realpath would stop and the link be replaced
                raise UserError(f"{name}: {exc.strerror}") from None
    if os.path.isfile(target) and not os.access(target, os.W_OK):
        raise UserError(f"{name}: is read-only")  # as `cp` refuses; a rename would not
    # where a link points: a dangling link into a missing folder cannot be written either
    if not os.path.isdir(os.path.dirname(os.path.realpath(target))):
        raise UserError(f"{name}: folder does not exist")
    for source in inputs:
        if source != STDOUT and _same_file(source, target):
            raise UserError(f"{name}: is also an input of this run; refusing to replace it")


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike[str], data: str | bytes, primary: bool = False) -> None:
    """Write `data` to `path` through a temporary file and a rename (see `atomic_path`)."""
    with atomic_path(path, primary) as tmp, open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """Read a whole file (`-`: standard input), turning OS errors into a UserError naming it."""
    if os.fspath(path) == STDOUT:
        return _stdin_bytes()
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise UserError(f"{os.fspath(path)}: no such file") from None
    except OSError as exc:
        raise UserError(f"{os.fspath(path)}: {exc.strerror or exc}") from None


_STDIN_READ: list[tuple[object, bytes]] = []  # (the stdin object read, what it held)


def _stdin_bytes() -> bytes:
    """All of standard input, read once: a reader that looks at `-` twice (the trace loader
    tells a binary Chakra trace from JSON, then parses it) gets the same bytes again."""
    if _STDIN_READ and _STDIN_READ[0][0] is sys.stdin:
        return _STDIN_READ[0][1]
    stream = getattr(sys.stdin, "buffer", None)  # a text-only stdin (tests) has none
    data = stream.read() if stream is not None else sys.stdin.read().encode()
    _STDIN_READ[:] = [(sys.stdin, data)]
    return data


def read_text(path: str | os.PathLike[str]) -> str:
    """Read a UTF-8 text file (`-`: standard input); a UserError names the file on any failure."""
    data = read_bytes(path)
    return decode_text(data, "<stdin>" if os.fspath(path) == STDOUT else os.fspath(path))


def decode_text(data: bytes | str, name: str) -> str:
    """`data` as UTF-8 text; a UserError `name: not UTF-8 text (byte N)` otherwise."""
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{name}: not UTF-8 text (byte {exc.start})") from None


def data_path(name: str) -> Path:
    """Path of a data file shipped in `lancet_mlir/data/`."""
    return Path(str(resources.files("lancet_mlir").joinpath("data", name)))
