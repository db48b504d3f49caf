"""Partitioning as a library: plan on a `DataflowGraph` (integer nodes, `ValueRef`s),
then apply the plan to the IR with `PartitionRewriter`.

* `rules`: the one access point to the kernel registry's partition rules;
* `expert_span`: expert spans between a dispatching and a returning all-to-all, their
  capacity-axis propagation and reassembly checks;
* `rewriter`: the chunk rewrite (per-chunk collectives and compute, partial sums).
"""

from lancet_mlir.partition.base import PartitionError, ValueRef, value_of, value_ref
from lancet_mlir.partition.expert_span import ExpertSpan, check_reassembly, plan_expert_spans
from lancet_mlir.partition.rewriter import PartitionRewriter

__all__ = [
    "ExpertSpan",
    "PartitionError",
    "PartitionRewriter",
    "ValueRef",
    "check_reassembly",
    "plan_expert_spans",
    "value_of",
    "value_ref",
]
