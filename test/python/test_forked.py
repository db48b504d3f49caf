"""support/forked.py: a forked worker's messages, its failures, its death and its end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from lancet_mlir.support.forked import END, ForkedWorker, WorkerFailed, can_fork


def _count_to(n: int):
    def work(send) -> None:
        for k in range(n):
            send(("item", k, os.getpid()))

    return work


def test_messages_come_in_order_then_the_end() -> None:
    with ForkedWorker(_count_to(500)) as worker:
        got = [worker.receive() for _ in range(500)]
        assert worker.receive() is END
        assert worker.receive() is END  # every later call sees the end too
    assert [k for _, k, _ in got] == list(range(500))
    assert {pid for _, _, pid in got} != {os.getpid()}  # sent by another process


def test_a_large_message_does_not_wait_for_the_reader() -> None:
    """The reader thread drains the pipe, so a child sending more than a pipe holds (64 KiB)
    finishes while the caller is busy elsewhere."""

    def work(send) -> None:
        send(list(range(200_000)))  # ~1 MB pickled
        send("done")

    with ForkedWorker(work) as worker:
        time.sleep(0.5)  # the caller is busy: the child is not blocked meanwhile
        assert worker.receive() == list(range(200_000))
        assert worker.receive() == "done"
        assert worker.receive() is END


def test_a_failing_child_sends_its_exception_as_one_line() -> None:
    def work(send) -> None:
        send(1)
        raise ValueError("bad shape\nsecond line")

    with ForkedWorker(work) as worker:
        assert worker.receive() == 1
        failed = worker.receive()
        assert worker.receive() is END
    assert isinstance(failed, WorkerFailed)
    assert failed.reason == "ValueError: bad shape\nsecond line"


def test_a_child_that_dies_just_stops() -> None:
    def work(send) -> None:
        send("before")
        os._exit(3)

    with ForkedWorker(work) as worker:
        assert worker.receive() == "before"
        assert worker.receive() is END


def test_close_kills_a_child_still_running() -> None:
    def work(send) -> None:
        send("started")
        time.sleep(120)

    worker = ForkedWorker(work)
    assert worker.receive() == "started"
    pid = worker.pid
    assert pid is not None
    began = time.monotonic()
    worker.close()
    assert time.monotonic() - began < 30
    assert worker.pid is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass  # reaped: gone
    else:  # a new process may reuse the pid, but not this fast: the child must be gone
        raise AssertionError(f"worker {pid} still exists")
    worker.close()  # a second close does nothing


def test_the_child_writes_nothing_of_the_callers_and_leaves_no_output(tmp_path) -> None:
    """Buffered output of the caller is written once (flushed before the fork), and the
    child's exit runs no atexit handler of the caller."""
    script = textwrap.dedent(
        """
        import atexit, sys
        from lancet_mlir.support.forked import ForkedWorker, END
        atexit.register(lambda: print("atexit", flush=True))
        print("before", end="")
        def work(send):
            send("hi")
        with ForkedWorker(work) as worker:
            assert worker.receive() == "hi" and worker.receive() is END
        print(" after")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    assert out.stdout == "before after\natexit\n"
    assert out.stderr == ""


def test_an_interrupt_does_not_stop_the_child() -> None:
    """Ctrl-C reaches the whole process group: the child ignores it (the caller, interrupted,
    kills it on its way out)."""

    def work(send) -> None:
        send("ready")
        time.sleep(1.0)
        send("alive")

    with ForkedWorker(work) as worker:
        assert worker.receive() == "ready"
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGINT)
        assert worker.receive() == "alive"
        assert worker.receive() is END


def test_an_interrupt_during_the_fork_is_raised_after_it() -> None:
    """A SIGINT that comes while the process forks (here: from a fork handler, where Python
    would report it as "ignored" and drop it) is raised by the constructor once the fork is
    done: the child is killed and reaped, and the logging module's lock is free."""
    script = textwrap.dedent(
        """
        import logging, os, signal, threading, time
        from lancet_mlir.support.forked import ForkedWorker
        # taken even where the suite runs as a background job (SIGINT ignored)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.register_at_fork(before=lambda: os.kill(os.getpid(), signal.SIGINT))
        def work(send):
            time.sleep(60)
        try:
            ForkedWorker(work)
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted")
        try:
            os.waitpid(-1, os.WNOHANG)
            print("a child is left")
        except ChildProcessError:
            print("no child")
        other = threading.Thread(target=logging.getLogger("x").addHandler,
                                 args=(logging.NullHandler(),))
        other.start()
        other.join(10)
        print("logging locked" if other.is_alive() else "logging free", flush=True)
        os._exit(0)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert (out.stdout, out.stderr) == ("interrupted\nno child\nlogging free\n", "")


def test_no_stdout_or_stderr() -> None:
    """Python sets sys.stdout / sys.stderr to None when started with them closed (cron,
    daemons): the worker runs all the same."""
    script = textwrap.dedent(
        """
        import sys
        from lancet_mlir.support.forked import ForkedWorker, END
        sys.stdout = sys.stderr = None
        with ForkedWorker(lambda send: send("hi")) as worker:
            got = [worker.receive(), worker.receive()]
        sys.__stdout__.write(repr(got[0]) + " " + str(got[1] is END) + "\\n")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    assert out.stdout == "'hi' True\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG)")
def test_a_child_dies_with_its_killed_parent() -> None:
    """A parent killed by SIGKILL cannot kill its child: the kernel does, at once, though
    the child would compute (and send nothing) for a minute more."""
    script = textwrap.dedent(
        """
        import os, signal, time
        from lancet_mlir.support.forked import ForkedWorker
        def work(send):
            send(os.getpid())
            time.sleep(60)
        worker = ForkedWorker(work)
        print(worker.receive(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    # the child inherits the pipe: read its pid, then wait for the parent, not for the EOF
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    assert proc.wait(timeout=120) == -signal.SIGKILL
    proc.stdout.close()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, or a pid reused by another program, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            python = b"python" in cmdline.read()
    except OSError:
        return False
    return state != "Z" and python


def test_can_fork_only_with_one_thread() -> None:
    assert can_fork() is (hasattr(os, "fork") and threading.active_count() == 1)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not can_fork()
    finally:
        stop.set()
        other.join()
