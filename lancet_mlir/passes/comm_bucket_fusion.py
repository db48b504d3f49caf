"""comm-bucket-fusion: size-based bucketing of independent collectives."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir.graph.buckets import FUSABLE_KINDS, plan_buckets
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.fifo import fifo_order
from lancet_mlir.graph.rewrite import (
    apply_order,
    check_dominance,
    fuse_collectives,
    schedulable_blocks,
)
from lancet_mlir.passes.options import CheckedOptions, check_int

DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024


@dataclass(frozen=True)
class CommBucketFusionPass(CheckedOptions, ModulePass):
    """Fuse collectives into buckets of at least `bucket-bytes` (Lancet §3, made safe).

    Collectives are visited in the FIFO order of `data-parallel-schedule`; consecutive
    compatible ones (same kind, reduction, group, element type and axis) accumulate in a
    bucket until it holds `bucket-bytes`; each bucket of two or more becomes one variadic
    collective placed where its last member was. Unlike Lancet, a collective that depends
    on a member of the open bucket closes that bucket first (no cycles). A collective with a
    measured `lancet.time_us` (an imported NCCL kernel: its time includes waiting for the
    peers, so a fused op's cannot be derived from it) is never bucketed
    (`graph.buckets.measured_collective`).

    Options:
      bucket-bytes: bucket size in bytes (default 25 MiB, PyTorch DDP's); 0 disables.
      kinds: collectives to bucket, comma separated among allreduce, allgather,
             reduce_scatter (default allreduce).
    """

    name = "comm-bucket-fusion"

    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    """A bucket closes once it holds this many payload bytes (25 MiB, PyTorch DDP's
    `bucket_cap_mb`); 0 disables the pass; negative is an error."""
    kinds: tuple[str, ...] = ("allreduce",)
    """The collective kinds to bucket, among the registry's fusable ones (`allreduce`,
    `allgather`, `reduce_scatter`); all-to-alls are never bucketed."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        check_int(self.name, "bucket-bytes", self.bucket_bytes, 0)
        kinds = (self.kinds,) if isinstance(self.kinds, str) else tuple(self.kinds)
        unknown = sorted(set(kinds) - set(FUSABLE_KINDS))
        if unknown:
            raise PassFailedException(
                f"comm-bucket-fusion: unknown kind(s) {', '.join(unknown)}; "
                f"choose among {', '.join(FUSABLE_KINDS)}"
            )
        if self.bucket_bytes == 0:
            return
        check_dominance(op)
        for block in schedulable_blocks(op):
            graph = DataflowGraph.from_block(block)
            if len(graph) < 2:
                continue
            visit = [i for i in fifo_order(graph) if graph.comm_kind[i] in kinds]
            buckets = plan_buckets(graph, visit, self.bucket_bytes)
            fused = [b for b in buckets if len(b.members) > 1]
            if not fused:
                continue
            for bucket in fused:
                fuse_collectives([graph.ops[i] for i in bucket.members])
            fixed = DataflowGraph.from_block(block)
            apply_order(fixed, fixed.topo_order())
