"""How to launch MPI jobs from Python (tests, benchmarks): `mpiexec_argv(n)`.

The project uses MPICH from pip (`mpich` wheel), whose Hydra `mpiexec` sits next to the venv's
Python. On a single machine Hydra starts ranks with a local fork launcher by default, so no
extra flags are needed (checked with `mpiexec -n 2` and `-n 4` on the 2-core CI box; more
ranks than cores is fine, Hydra does not bind by default).
"""

from __future__ import annotations

import os
import shutil
import sys

from lancet_mlir.support.errors import UserError


def find_mpiexec() -> str:
    """Path of `mpiexec`: the one beside the running Python (the venv's), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpiexec")
    if found is None:
        raise UserError("mpiexec not found (install the 'mpich' package into the environment)")
    return found


def mpiexec_argv(n: int) -> list[str]:
    """argv prefix that runs a command on `n` local MPI ranks: `[mpiexec, "-n", str(n)]`."""
    if n < 1:
        raise UserError(f"number of MPI ranks must be >= 1, got {n}")
    return [find_mpiexec(), "-n", str(n)]
