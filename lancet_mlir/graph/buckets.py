"""Planning of collective buckets on plain data (no IR edits): one planner, `plan_buckets`,
for comm-bucket-fusion (FIFO visit order) and DDP's gradient buckets (readiness order,
`plan_ddp_buckets`, used by ddp-bucket-schedule)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.ir import Operation

from lancet_mlir import attrs
from lancet_mlir.dialects.collectives import fusable_kinds
from lancet_mlir.dialects.comm import AllReduceOp, CollectiveOp
from lancet_mlir.dialects.vocab import Role
from lancet_mlir.graph.dataflow import DataflowGraph

FUSABLE_KINDS = fusable_kinds()
"""The kinds comm-bucket-fusion may merge (the collective registry's fusable ones)."""


def measured_collective(op: Operation) -> bool:
    """A collective whose time is given (`lancet.time_us`, e.g. every NCCL kernel
    `lancet-trace import` writes): the measured time includes waiting for the other ranks,
    and a fused op's time cannot be derived from its members' measurements (the comm model
    would price wire time only, dropping the waiting), so no pass fuses it."""
    return isinstance(op, CollectiveOp) and attrs.TIME_US in op.attributes


def never_fused(op: Operation) -> bool:
    """A collective no pass fuses: a measured one (`measured_collective`), or one that reads
    or writes a named resource (`lancet.effects`: a buffer the PyTorch step mutates in place),
    whose place among that resource's writes a fused op placed elsewhere would lose."""
    return measured_collective(op) or (
        isinstance(op, CollectiveOp) and attrs.EFFECTS in op.attributes
    )


def fusion_key(op: Operation) -> tuple | None:
    """Ops with equal keys may share a bucket: same op, properties and element types. None
    for an op that fuses with nothing: not a collective, or one never fused (`never_fused`)."""
    if not isinstance(op, CollectiveOp) or never_fused(op):
        return None
    props = tuple(sorted((k, str(v)) for k, v in op.properties.items()))
    dtypes = tuple(
        sorted({str(v.type.element_type) for v in op.inputs if isinstance(v.type, TensorType)})
    )
    return (op.name, props, dtypes)


@dataclass(frozen=True)
class Bucket:
    """A planned bucket: collective nodes in visit order and their total payload bytes."""

    members: tuple[int, ...]
    nbytes: int


@dataclass
class _OpenBucket:
    """A bucket still taking members: `window` is its members' smallest node index and
    `descends[v]` memoises whether node v is reachable from (or is) one of its members."""

    members: list[int]
    nbytes: int
    window: int
    descends: dict[int, bool] = field(default_factory=dict)


def plan_buckets(graph: DataflowGraph, visit: Sequence[int], bucket_bytes: int) -> list[Bucket]:
    """Group the collectives `visit` into buckets, taking them in that order.

    Each fusion kind (`fusion_key`) fills its own open bucket, which closes as soon as it
    holds at least `bucket_bytes`, or at the end. A collective never fused
    (`never_fused`: measured, or with `lancet.effects`) is a bucket of its own and touches no open bucket: it is never
    fused, so it cannot close a cycle. Before a node joins, every open bucket
    with a member it depends on (whatever that bucket's kind) closes. Returns every bucket,
    singletons included, members in visit order, buckets by their first member's visit
    index. `graph`'s node order must be topological (it is for a dominance-valid block), and
    `visit` must respect the dependencies among its nodes: a node after every visited node it
    depends on.

    No member reaches another member of its bucket, and fusing every bucket leaves the graph
    acyclic. Close times increase along every path between members of two different buckets:
    when y (bucket C) depends on x (bucket B), y is visited after x, and B, if still open,
    closes before y joins C, so B closes before C does. A cycle through the fused ops would
    need a path from each bucket to the next, hence strictly increasing close times round a
    cycle. Closing only the bucket y joins is not enough: with open buckets {a, d} and {b, c}
    where c depends on a and d on b, each fused op would wait for the other.

    Two visit orders qualify. comm-bucket-fusion's: a topological order (FIFO) restricted to
    the visited nodes. DDP's readiness order (sorted by the program index of the node's last
    producer, `readiness_order`): if gradient a reaches gradient b, b's last producer is a
    or one of its descendants, so ready(b) >= index(a) > ready(a) and a comes first.

    The dependency test is a backward search from the new node over producers, memoised per
    open bucket and pruned below the bucket's window (its smallest member index): in a
    topological node order nothing before a member descends from it. The memo stays valid
    as members join in any qualifying order: it only holds ancestors of earlier visited
    nodes (and the members, set True), and a later member cannot be an ancestor of an
    earlier visited node; nodes pruned under an older, higher window are not in the memo, so
    a lower window after a new member joins just searches further. Each bucket's work is
    bounded by the edges within its window: O(V + E) per bucket, no O(V^2) reachability.
    """
    order_of = {node: k for k, node in enumerate(visit)}
    open_buckets: dict[tuple, _OpenBucket] = {}
    result: list[Bucket] = []

    def close(key: tuple) -> None:
        bucket = open_buckets.pop(key)
        result.append(Bucket(tuple(bucket.members), bucket.nbytes))

    for node in visit:
        key = fusion_key(graph.ops[node])
        if key is None and never_fused(graph.ops[node]):
            result.append(Bucket((node,), graph.payload_bytes[node]))
            continue
        if key is None:
            raise ValueError(f"node {node} ({graph.ops[node].name}) is not a collective")
        for other in [k for k, b in open_buckets.items() if _depends_on(graph, b, node)]:
            close(other)
        bucket = open_buckets.get(key)
        if bucket is None:
            bucket = open_buckets[key] = _OpenBucket([], 0, node)
        bucket.members.append(node)
        bucket.window = min(bucket.window, node)
        bucket.descends[node] = True
        bucket.nbytes += graph.payload_bytes[node]
        if bucket.nbytes >= bucket_bytes:
            close(key)
    for key in list(open_buckets):
        close(key)
    result.sort(key=lambda b: order_of[b.members[0]])
    return result


def _depends_on(graph: DataflowGraph, bucket: _OpenBucket, node: int) -> bool:
    """True if `node` is reachable from a member of the open `bucket` (see `plan_buckets`).

    Iterative DFS over producers, skipping nodes below the bucket's window and nodes already
    in its memo, which it extends.
    """
    memo = bucket.descends
    window = bucket.window
    stack = [node]
    while stack:
        top = stack[-1]
        if top in memo:
            stack.pop()
            continue
        pending = [p for p in graph.preds[top] if p not in memo and p >= window]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        memo[top] = any(memo.get(p, False) for p in graph.preds[top])
    return memo[node]


# ---- DDP's gradient buckets (ddp-bucket-schedule) ---------------------------------------------
def has_roles(module: ModuleOp) -> bool:
    """True when any op of `module` carries a `lancet.role` annotation."""
    return any(attrs.ROLE in op.attributes for op in module.walk())


def is_gradient_allreduce(op: Operation, roles: bool) -> bool:
    """An all-reduce of weight gradients: every operand is the result of a dW-role op
    (or, in a module without role annotations, any all-reduce)."""
    if not isinstance(op, AllReduceOp):
        return False
    if not roles:
        return True
    for v in op.inputs:
        owner = v.owner
        if not isinstance(owner, Operation):
            return False
        role = owner.attributes.get(attrs.ROLE)
        if not isinstance(role, StringAttr) or role.data != Role.DW:
            return False
    return True


def last_producer(graph: DataflowGraph, nodes: Sequence[int]) -> int:
    """The largest node index among the producers of `nodes` (-1 when they have none): where
    DDP launches their bucket, and when a gradient is ready."""
    return max((p for n in nodes for p in graph.preds[n]), default=-1)


def readiness_order(graph: DataflowGraph, gradients: Sequence[int]) -> list[int]:
    """`gradients` in the order they become ready: by their last producer, then by index."""
    return sorted(gradients, key=lambda i: (last_producer(graph, (i,)), i))


def plan_ddp_buckets(
    graph: DataflowGraph, gradients: Sequence[int], bucket_bytes: int
) -> list[Bucket]:
    """Assign gradient all-reduces to buckets as PyTorch DDP does: `plan_buckets` over the
    readiness order, so each compatible kind (same reduction, group and element type) fills
    its own bucket, closing at `bucket_bytes` or when a later gradient depends on it.
    Buckets come in launch order: by `last_producer` of their members, then first member.
    """
    buckets = plan_buckets(graph, readiness_order(graph, gradients), bucket_bytes)
    buckets.sort(key=lambda b: (last_producer(graph, b.members), b.members[0]))
    return buckets
