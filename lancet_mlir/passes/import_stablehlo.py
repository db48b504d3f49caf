"""import-stablehlo: JAX/XLA StableHLO (generic form) -> `comm` collectives + costed compute.

Thin glue over `lancet_mlir.importers.stablehlo` (whose docstring gives the mapping).

Options: `world-size=N` (overrides the module's `lancet.world_size`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from lancet_mlir.importers.stablehlo import import_stablehlo
from lancet_mlir.passes.options import CheckedOptions, check_int
from lancet_mlir.support.errors import UserError, pass_failure


@dataclass(frozen=True)
class ImportStablehloPass(CheckedOptions, ModulePass):
    """Turn JAX/XLA StableHLO collectives into `comm` ops and annotate compute costs.

    See `lancet_mlir.importers.stablehlo` for the mapping. Run it first in a pipeline, e.g.
    `lancet-opt --allow-unregistered-dialect -p import-stablehlo,data-parallel-schedule`.
    A collective that cannot be imported fails the pass (`PassFailedException` naming the
    HLO op).

    Options:
      world-size=N: the module's `lancet.world_size` (default: mhlo.num_partitions x
        mhlo.num_replicas, else the ranks the replica groups span: highest rank + 1).
    """

    name = "import-stablehlo"
    world_size: int | None = None
    """Sets the module's `lancet.world_size` (>= 1), overriding what the module says."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.world_size is not None:
            check_int(self.name, "world-size", self.world_size, 1)
        try:
            import_stablehlo(op, self.world_size)
        except UserError as exc:
            raise pass_failure(self.name, exc) from None
