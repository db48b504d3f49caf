"""program-order: the identity schedule, a named baseline for comparisons."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.passes.options import CheckedOptions


@dataclass(frozen=True)
class ProgramOrderPass(CheckedOptions, ModulePass):
    """Keep every block in its input order (launch order = program order).

    Useful as the "no scheduling" baseline next to `data-parallel-schedule` (FIFO),
    `ddp-bucket-schedule` and `tutel-pipeline` in a pipeline such as
    `program-order,simulate`. Like the other schedulers it rejects inputs whose order is not
    topological (a use before its definition).

    Options: none.
    """

    name = "program-order"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        check_dominance(op)
