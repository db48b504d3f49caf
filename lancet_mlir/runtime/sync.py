"""Agreement steps of MPI runs: load the same module everywhere, finish together.

* `load_on_all_ranks` parses the module(s) on every rank and allgathers a sha256 of their
  text (or the rank's error): a rank that failed to load, or holds a different module, ends
  every rank before anything runs.
* `rank0_then_broadcast` runs a step (printing, writing a file) on rank 0 only and tells
  every rank whether it worked, so all ranks exit with the same code.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lancet_mlir.runtime.loader import LoadedModule, load_module
from lancet_mlir.runtime.mpi import RankFailure, agree
from lancet_mlir.support.errors import one_line


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
    """Run `step` on rank 0; every rank returns its exit code, or exits 1 if it raised."""
    code, error = 0, None
    if comm.Get_rank() == 0:
        try:
            code = step()
        except BaseException as exc:  # noqa: BLE001 - the other ranks must hear of it
            comm.bcast((1, one_line(exc)), root=0)
            raise
    code, error = comm.bcast((code, error), root=0)
    if error is not None:
        raise SystemExit(1)
    return code
