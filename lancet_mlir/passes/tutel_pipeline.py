"""tutel-pipeline: Tutel-style pipelining of each MoE expert block, a baseline schedule."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import apply_order, check_dominance, schedulable_blocks
from lancet_mlir.partition import (
    ExpertSpan,
    PartitionError,
    PartitionRewriter,
    check_reassembly,
    plan_expert_spans,
)
from lancet_mlir.partition.base import node_name
from lancet_mlir.passes.options import CheckedOptions, check_int
from lancet_mlir.support.errors import OpError, pass_failure


@dataclass(frozen=True)
class TutelPipelinePass(CheckedOptions, ModulePass):
    """Tutel's expert pipelining: chunk each MoE expert block along the capacity dim.

    An expert block is a `comm.all_to_all` (split s, concat r) whose compute-only
    descendants reach a second `comm.all_to_all` (split r, concat s); the compute ops between
    the two (forward: batch_matmul, gelu, batch_matmul; backward: their `_dx` forms) must all
    be splittable along the row axis that the first all-to-all concatenates (checked with the
    kernel registry's partition rules). Both forward and backward blocks qualify. For
    `degree` = n each block becomes: `comp.split` of the dispatched buffer along the
    capacity dim into n chunks; per chunk k an all-to-all, the expert ops and the return
    all-to-all, all tagged `lancet.part = k`; `comp.concat` of the returned chunks. Weight
    gradients of the expert weights (batch_matmul_dw on block values) are computed per chunk
    and summed. Launch order: a2a(0), then per chunk k: a2a(k+1), expert ops(k), a2a back(k),
    so chunk k's compute overlaps chunk k+1's all-to-all. Values are unchanged (up to float
    rounding of the chunked weight-gradient sums). `degree=1` leaves the module unchanged.
    Planning and rewriting are the partition library's (`lancet_mlir.partition`).

    Options:
      degree: number of chunks per expert block (Tutel sweeps 1, 2, 4, 8); must divide
              every block's capacity (Tutel's equal chunks), else the pass fails;
              `moe-partition` takes uneven parts.
    """

    name = "tutel-pipeline"

    degree: int = 2
    """Chunks per expert block (>= 1; 1 leaves the module unchanged); must divide every
    block's capacity."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        check_int(self.name, "degree", self.degree, 1)
        check_dominance(op)
        if self.degree == 1:
            return
        plans: list[tuple[DataflowGraph, list[ExpertSpan]]] = []
        for block in schedulable_blocks(op):  # plan and check everything before any edit
            graph = DataflowGraph.from_block(block)
            spans = plan_expert_spans(graph)
            if not spans:
                continue
            for span in spans:
                self._check_divisible(graph, span)
            try:
                check_reassembly(graph, spans)
            except PartitionError as exc:
                raise pass_failure(self.name, exc) from None
            plans.append((graph, spans))
        for graph, spans in plans:
            PartitionRewriter(graph, self.degree).rewrite(spans)
            assert graph.block is not None
            fixed = DataflowGraph.from_block(graph.block)
            apply_order(fixed, fixed.topo_order())
        check_dominance(op)

    def _check_divisible(self, graph: DataflowGraph, span: ExpertSpan) -> None:
        if span.capacity % self.degree == 0:
            return
        raise OpError(
            f"{self.name}: capacity {span.capacity} of the expert block entered by "
            f"'{node_name(graph, span.entry)}' is not divisible by degree {self.degree}",
            graph.ops[span.entry],
        )
