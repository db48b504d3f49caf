"""The numpy reference executor, the MPI multi-rank executor and the equivalence checker.

`execute(module, ranks=..., seed=...)` runs a function of a module (simulated ranks, or one
MPI rank per process with `comm=`); `compare_modules(a, b, ...)` runs two modules on the same
inputs and compares every output. See docs/runtime.md.
"""

from __future__ import annotations

from lancet_mlir.runtime.compare import CompareResult, OutputDiff, compare_modules
from lancet_mlir.runtime.executor import ExecResult, execute

__all__ = ["CompareResult", "ExecResult", "OutputDiff", "compare_modules", "execute"]
