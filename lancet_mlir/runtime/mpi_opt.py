"""`mpiexec -n N lancet-opt --mpi ...`: optimize once on rank 0, give every rank the result.

Rank 0 runs the ordinary driver path (`xDSLOptMain.run` then `commit_output`), whose module
text is buffered, and broadcasts (ok, text or error line). Every rank checks the
sha256 of the text it received against rank 0's, and the hashes are allgathered so rank 0
confirms that all ranks hold identical text. Only rank 0 prints (stdout) or writes `-o`;
`run_on_rank0_and_broadcast` returns the text on every rank for callers that embed the
driver. Before anything runs, every rank reads its own input file and the ranks agree on its
sha256, as they agreed on the options: a rank whose file is missing or holds another module
fails the job with one line (`rank 1: nosuch.mlir: no such file`, `rank 1: its input
differs from rank 0's ...`); stdin (`-`, only rank 0 gets it) is not compared. An error on rank 0, or on any rank while it receives or writes, ends every rank
with exit code 1; rank 0 prints the one line `lancet-opt: error: rank R: ...`, the other
ranks exit silently (one line, not N). Rank 0's files are committed only after that last
agreement. The command line itself was agreed on before (`support.mpi_job.agree_on_setup`).

Outside an MPI launcher (or with one rank) `--mpi` simply runs the driver.
"""

from __future__ import annotations

import hashlib
from typing import Any

from xdsl.xdsl_opt_main import xDSLOptMain

from lancet_mlir.support.errors import one_line
from lancet_mlir.support.mpi_job import agreed_failure, fault_point


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _run_driver(main: Any) -> str:
    """The normal driver path on this rank, returning the module text it buffered for -o."""
    xDSLOptMain.run(main)
    pending = getattr(main, "_pending_output", None)
    return pending.getvalue() if pending is not None else ""


def run_on_rank0_and_broadcast(main: Any) -> str:
    """Run the driver on rank 0, broadcast its output text, and return it on every rank."""
    from lancet_mlir.runtime.mpi import RankFailure, agree, world_comm
    from lancet_mlir.support.launcher import launcher_world_size

    size = launcher_world_size()
    if size is None or size < 2:
        text = _run_driver(main)
        _emit(main, text)
        return text
    comm = world_comm()
    rank = comm.Get_rank()
    _agree_on_input(comm, rank, getattr(main.args, "input_file", None))
    payload: tuple[str | None, str, str] = (None, "", "")
    if rank == 0:
        try:
            text = _run_driver(main)
            payload = (None, text, _digest(text))
        except Exception as exc:  # noqa: BLE001 - every rank must learn of the failure
            payload = (_error_line(main, exc), "", "")
    error, text, digest = comm.bcast(payload, root=0)
    if error is not None:
        raise agreed_failure(rank, 0, error)
    problem = None
    try:
        fault_point("write")
        if _digest(text) != digest:
            problem = "received output text differs from rank 0's"
        elif rank == 0:
            _emit(main, text)  # staged; committed by the driver after this agreement
    except Exception as exc:  # noqa: BLE001 - every rank must learn of the failure
        problem = one_line(exc)
    try:
        agree(comm, problem)
    except RankFailure as failure:
        raise agreed_failure(rank, failure.rank, failure.message) from None
    return text


def input_digest(path: str | None) -> tuple[str | None, str | None]:
    """(error line, sha256 of the file's bytes) of one rank's input; (None, None) for stdin."""
    from lancet_mlir.support.files import STDOUT, decode_text, read_bytes

    if path is None or path == STDOUT:
        return None, None
    try:
        fault_point("read")
        data = read_bytes(path)
        decode_text(data, path)  # an unreadable module is this rank's error, not a mismatch
        return None, hashlib.sha256(data).hexdigest()
    except Exception as exc:  # noqa: BLE001 - every rank must learn of the failure
        return one_line(exc), None


def _agree_on_input(comm: Any, rank: int, path: str | None) -> None:
    """Every rank's input must be readable and hold rank 0's bytes (see the module doc)."""
    states: list[tuple[str | None, str | None]] = comm.allgather(input_digest(path))
    for other, (error, _) in enumerate(states):
        if error is not None:
            raise agreed_failure(rank, other, error)
    for other, (_, digest) in enumerate(states):
        if digest is not None and states[0][1] is not None and digest != states[0][1]:
            raise agreed_failure(rank, other, "its input differs from rank 0's (sha256 "
                                 f"{digest[:12]} vs {states[0][1][:12]}); every rank must be "
                                 "given the same module")  # fmt: skip


def _error_line(main: Any, exc: BaseException) -> str:
    """Rank 0's error line: placed at its op as without --mpi (the driver's `error_line`),
    or the exception's own line for a driver that has none."""
    error_line = getattr(main, "error_line", None)
    return str(error_line(exc)) if callable(error_line) else one_line(exc)


def _emit(main: Any, text: str) -> None:
    """Rank 0's output: stage the module text as the run's primary output (-o or stdout)."""
    main.commit_output()
