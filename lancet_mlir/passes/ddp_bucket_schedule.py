"""ddp-bucket-schedule: PyTorch-DDP-style gradient bucketing, a baseline schedule."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass

from lancet_mlir import attrs
from lancet_mlir.graph.buckets import (
    Bucket,
    has_roles,
    is_gradient_allreduce,
    last_producer,
    plan_ddp_buckets,
)
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import (
    apply_order,
    check_dominance,
    fuse_collectives,
    relink,
    schedulable_blocks,
)
from lancet_mlir.passes.options import CheckedOptions, check_int

DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024

__all__ = [
    "Bucket",
    "DdpBucketSchedulePass",
    "has_roles",
    "is_gradient_allreduce",
    "plan_ddp_buckets",
]


@dataclass(frozen=True)
class DdpBucketSchedulePass(CheckedOptions, ModulePass):
    """PyTorch DDP's gradient bucketing as a schedule (a baseline to compare against).

    Gradient all-reduces (those whose operands come from `lancet.role = "dw"` ops, or every
    all-reduce when the module has no role annotations) are assigned to buckets in the order
    their gradients become ready (program order of the producers); a bucket closes once it
    holds `bucket-bytes`; one with a measured `lancet.time_us` (an imported NCCL kernel) is a
    bucket of its own (`graph.buckets.measured_collective`). Each bucket becomes one variadic `comm.allreduce` launched right
    after its last producer, as DDP launches a bucket as soon as it is full; consumers (the
    optimizer updates) follow it. Other ops keep their relative order as far as the data
    dependencies allow; the result is a valid topological order and computes the same values.

    Options:
      bucket-bytes: bucket capacity in bytes (default 25 MiB = 26214400, DDP's bucket_cap_mb).
    """

    name = "ddp-bucket-schedule"

    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    """Bucket capacity in payload bytes (>= 1; 25 MiB, DDP's `bucket_cap_mb`)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        check_int(self.name, "bucket-bytes", self.bucket_bytes, 1)
        check_dominance(op)
        roles = has_roles(op)
        for block in schedulable_blocks(op):
            self._schedule_block(block, roles)
        check_dominance(op)

    def _schedule_block(self, block: Block, roles: bool) -> None:
        graph = DataflowGraph.from_block(block)
        gradients = [i for i, o in enumerate(graph.ops) if is_gradient_allreduce(o, roles)]
        if not gradients:
            return
        buckets = plan_ddp_buckets(graph, gradients, self.bucket_bytes)
        anchored: dict[int, list[Operation]] = {}
        moved: set[Operation] = set()
        for bucket in buckets:
            members = [graph.ops[i] for i in bucket.members]
            fused = members[0] if len(members) == 1 else _fuse(members)
            anchored.setdefault(last_producer(graph, bucket.members), []).append(fused)
            moved.add(fused)
        desired = list(anchored.get(-1, []))
        for i, o in enumerate(graph.ops):
            if o in moved or o.parent is None:  # erased bucket members have no parent
                continue
            desired.append(o)
            desired.extend(anchored.get(i, []))
        relink(block, desired, graph.terminator)  # maybe invalid: re-sorted right after
        relinked = DataflowGraph.from_block(block)
        apply_order(relinked, relinked.topo_order())


def _fuse(members: list[Operation]) -> Operation:
    """One variadic all-reduce for `members`, keeping their common role annotation."""
    roles = {m.attributes.get(attrs.ROLE) for m in members}
    fused = fuse_collectives(members)
    role = roles.pop() if len(roles) == 1 else None
    if role is not None:
        fused.attributes[attrs.ROLE] = role
    return fused
