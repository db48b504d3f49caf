"""Planning of collective buckets (plain data, no IR edits): comm-bucket-fusion's `plan_buckets`
and DDP's gradient buckets `plan_ddp_buckets` (ddp-bucket-schedule, bench)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.ir import Operation

from lancet_mlir import attrs
from lancet_mlir.dialects.comm import AllReduceOp, CollectiveOp
from lancet_mlir.graph.dataflow import DataflowGraph

FUSABLE_KINDS = ("allreduce", "allgather", "reduce_scatter")


def fusion_key(op: Operation) -> tuple | None:
    """Ops with equal keys may share a bucket: same op, properties and element types."""
    if not isinstance(op, CollectiveOp):
        return None
    props = tuple(sorted((k, str(v)) for k, v in op.properties.items()))
    dtypes = tuple(
        sorted({str(v.type.element_type) for v in op.inputs if isinstance(v.type, TensorType)})
    )
    return (op.name, props, dtypes)


@dataclass
class _OpenBucket:
    members: list[int]
    nbytes: int
    first_pos: int
    descends: dict[int, bool] = field(default_factory=dict)


def plan_buckets(
    graph: DataflowGraph, order: Sequence[int], bucket_bytes: int, kinds: frozenset[str]
) -> list[list[int]]:
    """Group collectives of the given kinds into buckets, visiting them in `order`.

    A bucket closes when it holds at least `bucket_bytes`, at the end, or when the next
    collective of a bucketed kind depends on one of its members (whatever that collective's
    own bucket). Only buckets of two or more are returned, each listing node indices in visit
    order; buckets never share a node and no member of a bucket reaches another member.

    Closing every open bucket a new member depends on, not only the bucket it joins, keeps
    the fused graph acyclic: with two open buckets {a, d} and {b, c} where c depends on a
    and d on b, fusing both would make each fused op wait for the other. Since `order` is
    topological, a bucket then always closes before any member of a bucket that depends on
    it joins, so close times increase along every edge between fused ops.
    """
    position = [0] * len(graph)
    for k, i in enumerate(order):
        position[i] = k
    open_buckets: dict[tuple, _OpenBucket] = {}
    result: list[list[int]] = []

    def close(key: tuple) -> None:
        bucket = open_buckets.pop(key)
        if len(bucket.members) > 1:
            result.append(bucket.members)

    for i in order:
        op = graph.ops[i]
        if not isinstance(op, CollectiveOp) or op.KIND not in kinds:
            continue
        key = fusion_key(op)
        assert key is not None
        for other in [k for k, b in open_buckets.items() if _depends_on(graph, position, b, i)]:
            close(other)
        bucket = open_buckets.get(key)
        if bucket is None:
            bucket = open_buckets[key] = _OpenBucket([], 0, position[i])
            bucket.descends.clear()
        bucket.members.append(i)
        bucket.descends[i] = True
        bucket.nbytes += graph.payload_bytes[i]
        if bucket.nbytes >= bucket_bytes:
            close(key)
    for key in list(open_buckets):
        close(key)
    result.sort(key=lambda members: position[members[0]])
    return result


def _depends_on(graph: DataflowGraph, position: list[int], bucket: _OpenBucket, node: int) -> bool:
    """True if `node` is reachable from a bucket member.

    Iterative DFS over producers, pruned at nodes visited before the bucket's first member
    (they cannot descend from it in a topological order) and memoised per bucket, so the
    total work per bucket is bounded by the edges inside its window.
    """
    memo = bucket.descends
    stack = [node]
    while stack:
        top = stack[-1]
        if top in memo:
            stack.pop()
            continue
        pending = [p for p in graph.preds[top] if p not in memo and position[p] >= bucket.first_pos]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        memo[top] = any(memo.get(p, False) for p in graph.preds[top])
    return memo[node]


# ---- DDP's gradient buckets (ddp-bucket-schedule) ---------------------------------------------
@dataclass(frozen=True)
class Bucket:
    """Planned bucket: gradient all-reduce nodes (readiness order) and the node after which
    the fused all-reduce launches (its last producer; -1 when every operand is an argument)."""

    members: tuple[int, ...]
    anchor: int
    nbytes: int


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
        if not isinstance(role, StringAttr) or role.data != "dw":
            return False
    return True


def plan_ddp_buckets(
    graph: DataflowGraph, gradients: Sequence[int], bucket_bytes: int
) -> list[Bucket]:
    """Assign gradient all-reduces to buckets as PyTorch DDP does.

    Gradients are visited in readiness order (program position of their last producer,
    ties by position of the all-reduce); each compatible kind (same reduction, group and
    element type) fills its own open bucket, which closes as soon as it holds at least
    `bucket_bytes`. A gradient that depends on a member of any open bucket (its own kind's
    or another's) closes that bucket first, so fusing never creates a cycle, not even
    between two buckets of different kinds (see `plan_buckets`). Buckets are returned in
    launch order (by anchor).
    """
    ready = {i: max(graph.preds[i], default=-1) for i in gradients}
    visit = sorted(gradients, key=lambda i: (ready[i], i))
    reach: list[int] | None = None
    open_buckets: dict[tuple, list[int]] = {}
    sizes: dict[tuple, int] = {}
    buckets: list[Bucket] = []

    def close(key: tuple) -> None:
        members = open_buckets.pop(key)
        buckets.append(Bucket(tuple(members), max(ready[m] for m in members), sizes.pop(key)))

    for i in visit:
        key = fusion_key(graph.ops[i])
        assert key is not None
        if open_buckets:
            reach = reach if reach is not None else graph.descendants()
            for other in [k for k, ms in open_buckets.items() if any(reach[m] >> i & 1 for m in ms)]:
                close(other)
        open_buckets.setdefault(key, [])
        open_buckets[key].append(i)
        sizes[key] = sizes.get(key, 0) + graph.payload_bytes[i]
        if sizes[key] >= bucket_bytes:
            close(key)
    for key in list(open_buckets):
        close(key)
    buckets.sort(key=lambda b: (b.anchor, b.members[0]))
    return buckets
