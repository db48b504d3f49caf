"""Agreement steps of MPI runs: load the same module everywhere, finish together.

* `load_on_all_ranks` parses the module(s) on every rank and allgathers a sha256 of their
  text (or the rank's error): a rank that failed to load, or holds a different module, ends
  every rank before anything runs.
* `rank0_then_broadcast` runs a step (printing, writing a file) on rank 0 only and tells
  every rank whether it worked, so all ranks exit with the same code; rank 0's files are
  committed only after that agreement.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lancet_mlir.runtime.loader import LoadedModule, load_module
from lancet_mlir.runtime.mpi import RankFailure, agree
from lancet_mlir.support.errors import one_line
from lancet_mlir.support.files import STDOUT, commit_outputs, write_atomic
from lancet_mlir.support.mpi_job import fault_point


@dataclass
class AgreedModules:
    """Modules loaded identically on every rank, plus the value of the `extra` step."""

    loaded: list[LoadedModule]
    extra: Any = None


def load_on_all_ranks(
    paths: Sequence[str], comm: Any, extra: Callable[[], Any] | None = None
) -> AgreedModules:
    """Load `paths` on every rank (and run `extra`), then agree on errors and module hashes.

    Raises RankFailure on every rank when any rank failed or holds different module text.
    """
    error: str | None = None
    result = AgreedModules([])
    digest = ""
    try:
        result.loaded = [load_module(p) for p in paths]
        digest = hashlib.sha256("\0".join(m.text for m in result.loaded).encode()).hexdigest()
        if extra is not None:
            result.extra = extra()
    except Exception as exc:  # noqa: BLE001 - reported to every rank
        error = one_line(exc)
    agree(comm, error)
    digests = comm.allgather(digest)
    for rank, other in enumerate(digests):
        if other != digests[0]:
            raise RankFailure(
                rank,
                f"module text differs from rank 0's (sha256 {other[:12]} vs {digests[0][:12]}); "
                "every rank must run the same module",
            )
    return result


def rank0_then_broadcast(comm: Any, step: Callable[[], int]) -> int:
    """Run `step` on rank 0 (its files staged), agree on success, then commit rank 0's files.

    Every rank returns rank 0's exit code; if `step` (or any rank's `write` fault point)
    failed, every rank fails: rank 0 with the one error line, the others silently. What the
    step prints is staged like a file (shown only on success), except when the step itself
    failed: then it is printed at once, as it explains the failure (e.g. a compare table).
    """
    code, error = 0, None
    printed = io.StringIO()
    try:
        fault_point("write")
        if comm.Get_rank() == 0:
            with contextlib.redirect_stdout(printed):
                code = step()
    except Exception as exc:  # noqa: BLE001 - the other ranks must hear of it
        error = one_line(exc)
        sys.stdout.write(printed.getvalue())  # what a failing step printed explains it
        printed = io.StringIO()
    if printed.getvalue():
        write_atomic(STDOUT, printed.getvalue())  # staged like the files
    agree(comm, error)
    code = comm.bcast(code, root=0)
    if comm.Get_rank() == 0:
        commit_outputs()  # only now that every rank agreed
    return code
