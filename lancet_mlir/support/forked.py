"""A forked worker process that sends pickled messages back: CPU work in parallel with the
caller, on a copy of its memory (copy-on-write), with no re-parsing or re-importing.

The child runs `work(send)` and exits with `os._exit` (no atexit handlers, no flushing of
the caller's buffers, no output files written twice); it ignores SIGINT, so an interrupt
reaches the caller alone, whose `close` (or the `with` block's exit) kills the child; on
Linux the kernel kills it too when the caller dies (even by SIGKILL). The
messages are read by a thread of the caller as they come, so the child never waits for the
caller to read. A child that fails sends `WorkerFailed` as its last message; one that dies
(killed, out of memory) just stops: `receive` then returns `END`.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

END = object()
"""What `receive` returns once the child sent its last message (or died)."""


@dataclass(frozen=True)
class WorkerFailed:
    """The last message of a child whose work raised: the exception, as one line."""

    reason: str


def can_fork() -> bool:
    """True where a worker can be forked: the platform has `os.fork` and the process runs
    one Python thread (a fork copies only the calling thread; another one holding a lock
    would leave the lock held forever in the child)."""
    return hasattr(os, "fork") and threading.active_count() == 1


class ForkedWorker:
    """`work(send)` in a forked child; `receive()` gives what it sent, in order (module doc)."""

    def __init__(self, work: Callable[[Callable[[Any], None]], None]) -> None:
        """Fork the child; OSError when the fork fails (nothing is left behind)."""
        for stream in (sys.stdout, sys.stderr):
            _flush(stream)  # else the child would inherit (and never write) a copy
        read_fd, write_fd = os.pipe()
        parent = os.getpid()
        # SIGINT blocked across the fork: an interrupt there would be raised inside the fork
        # handlers (logging's), reported as "ignored" and lost, with their lock still held;
        # it stays pending and is raised below, once the child can be killed
        mask = _block_sigint()
        try:
            pid = os.fork()
        except BaseException:
            _restore(mask)
            os.close(read_fd)
            os.close(write_fd)
            raise
        if pid == 0:  # pragma: no cover - the child: its coverage is not collected
            os.close(read_fd)
            _child(work, write_fd, parent, mask)
        os.close(write_fd)
        self.pid: int | None = pid
        self._messages: queue.Queue[Any] = queue.Queue()
        self._reader = threading.Thread(
            target=self._drain, args=(os.fdopen(read_fd, "rb"),), daemon=True
        )
        self._reader.start()
        try:
            _restore(mask)  # a SIGINT that came meanwhile is raised here
        except BaseException:
            self.close()
            raise

    def _drain(self, channel: Any) -> None:
        with channel:
            try:
                while True:
                    self._messages.put(pickle.load(channel))
            except (EOFError, OSError, pickle.UnpicklingError):
                pass  # the child ended (or died mid-message): nothing more comes
            finally:
                self._messages.put(END)

    def receive(self) -> Any:
        """The child's next message (blocking), or `END` once there are none left."""
        message = self._messages.get()
        if message is END:
            self._messages.put(END)  # every later call sees the end too
        return message

    def close(self) -> None:
        """Kill the child if it still runs and reap it."""
        if self.pid is None:
            return
        pid, self.pid = self.pid, None
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        self._reader.join()

    def __enter__(self) -> ForkedWorker:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _die_with_parent(parent: int) -> None:  # pragma: no cover - runs in the child
    """On Linux, have the kernel kill this child when its parent dies (a parent killed by
    SIGKILL cannot kill it), so no orphan computes on; elsewhere the child ends at its next
    message, when the pipe breaks."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


_PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal this process gets when its parent thread ends."""


def _flush(stream: Any) -> None:
    """Flush `stream` if there is one (Python sets sys.stdout / sys.stderr to None when the
    process started with that file descriptor closed) and it still takes it."""
    if stream is None:
        return
    try:
        stream.flush()
    except (OSError, ValueError):
        pass  # closed or broken: the caller's next write reports it, the child writes none


Mask = set[signal.Signals] | None
"""The signal mask before `_block_sigint` (None where the platform has no thread masks)."""


def _block_sigint() -> Mask:
    """Block SIGINT in this thread (it stays pending until `_restore`); the mask before."""
    if not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def _restore(mask: Mask) -> None:
    """Restore the mask `_block_sigint` changed (raises KeyboardInterrupt for a SIGINT that
    came while it was blocked and is handled so)."""
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _child(
    work: Callable[[Callable[[Any], None]], None], write_fd: int, parent: int, mask: Mask
) -> None:  # pragma: no cover - runs in the child
    """Run `work` in the child and leave by `os._exit` whatever happens."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # before SIGINT is unblocked
        _restore(mask)
        _die_with_parent(parent)
        with os.fdopen(write_fd, "wb") as channel:

            def send(message: Any) -> None:
                pickle.dump(message, channel, protocol=pickle.HIGHEST_PROTOCOL)
                channel.flush()

            try:
                work(send)
            except BaseException as exc:  # noqa: BLE001 - reported to the parent, one line
                code = 1
                send(WorkerFailed(f"{type(exc).__name__}: {exc}"))
    except BaseException:  # noqa: BLE001 - the pipe broke: the parent is gone
        code = 1
    finally:
        os._exit(code)
