"""`mpiexec -n N lancet-opt --mpi ...`: optimize once on rank 0, give every rank the result.

Rank 0 runs the ordinary driver path (`xDSLOptMain.run` then `commit_output`) with its
standard output captured, and broadcasts (ok, text or error line). Every rank checks the
sha256 of the text it received against rank 0's, and the hashes are allgathered so rank 0
confirms that all ranks hold identical text. Only rank 0 prints (stdout) or writes `-o`;
`run_on_rank0_and_broadcast` returns the text on every rank for callers that embed the
driver. An error on rank 0 ends every rank with exit code 1; rank 0 prints the one line
`lancet-opt: error: rank 0: ...`, the other ranks exit silently (one line, not N).

Outside an MPI launcher (or with one rank) `--mpi` simply runs the driver.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import sys
from typing import Any

from xdsl.xdsl_opt_main import xDSLOptMain

from lancet_mlir.support.errors import UserError, one_line


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _run_driver(main: Any) -> str:
    """The normal driver path on this rank, returning what it printed or wrote to -o."""
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        xDSLOptMain.run(main)
    pending = getattr(main, "_pending_output", None)
    if pending is not None:  # -o FILE: the module text was buffered for an atomic write
        return pending.getvalue()
    return captured.getvalue()


def run_on_rank0_and_broadcast(main: Any) -> str:
    """Run the driver on rank 0, broadcast its output text, and return it on every rank."""
    from lancet_mlir.runtime.mpi import launcher_world_size, world_comm

    size = launcher_world_size()
    if size is None or size < 2:
        text = _run_driver(main)
        _emit(main, text)
        return text
    comm = world_comm()
    rank = comm.Get_rank()
    payload: tuple[bool, str, str] | None = None
    if rank == 0:
        try:
            text = _run_driver(main)
        except BaseException as exc:  # every rank must learn of the failure, then exit
            comm.bcast((False, one_line(exc), ""), root=0)
            if isinstance(exc, Exception):
                raise UserError(f"rank 0: {one_line(exc)}") from exc
            raise
        payload = (True, text, _digest(text))
    ok, text, digest = comm.bcast(payload, root=0)
    if not ok:
        raise SystemExit(1)
    received = _digest(text)
    hashes = comm.allgather(received)
    bad = [r for r, h in enumerate(hashes) if h != digest]
    if bad:
        if rank == 0:
            raise UserError(f"rank {bad[0]}: received output text differs from rank 0's")
        raise SystemExit(1)
    if rank == 0:
        _emit(main, text)
    return text


def _emit(main: Any, text: str) -> None:
    """Rank 0's output: the atomic -o write, or the captured text on stdout."""
    if getattr(main, "_pending_output", None) is not None:
        main.commit_output()
        return
    sys.stdout.write(text)
    sys.stdout.flush()
