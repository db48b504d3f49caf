"""The bucket planner (`graph/buckets.py`) on random DAGs against a brute-force reference.

Random blocks mix compute ops with all-reduces (sum, max, a sub-group), all-gathers and
reduce-scatters of two element types and three sizes. The reference applies the same greedy
rules with the dependency test done on explicit reachability sets; the planner must agree
for every visit order that respects dependencies (FIFO, DDP's readiness order, a random
topological order), and fusing every bucket must leave the graph acyclic.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from helpers import closure, parse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lancet_mlir.graph.buckets import Bucket, plan_buckets, plan_ddp_buckets, readiness_order
from lancet_mlir.graph.core import topological_order
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.fifo import fifo_order
from lancet_mlir.graph.rewrite import fuse_collectives

DTYPE_BYTES = {"f32": 4, "bf16": 2}
GROUP4 = "group <[[0, 1, 2, 3]]>"
# collective variants: (name, text after the operand, output elements per input element);
# plain all-reduces twice as likely, so that buckets of several members are common
VARIANTS = [
    ("allreduce", "", 1),
    ("allreduce", "", 1),
    ("allreduce", " reduce max", 1),
    ("allreduce", " group <[[0, 1], [2, 3]]>", 1),
    ("allgather", f" {GROUP4}", 4),
    ("reduce_scatter", f" {GROUP4}", 0.25),
]


@dataclass
class RandomBlock:
    """MLIR text of one func and, per node (op index in its body), what the test knows:
    predecessors, the collective's compatibility label and payload bytes (None for compute)."""

    text: str
    preds: list[list[int]]
    label: list[str | None]
    nbytes: list[int]


@dataclass
class _Node:
    """One op of a random block before placement: its line of MLIR (operands by generation
    index) and the generation indices of its producers."""

    line: str
    preds: list[int]
    label: str | None
    nbytes: int


@st.composite
def random_blocks(draw: st.DrawFn) -> RandomBlock:
    """A func whose body is a random DAG of `test.op`s and collectives, its ops placed in a
    random topological order. Operands come from the last few values (chains through
    collectives of different kinds are common) or from any earlier one; the random placement
    puts collectives of early values late in the program, as in a backward pass, so DDP's
    readiness order differs from program order and a bucket's window from its first member.
    """
    n = draw(st.integers(min_value=1, max_value=30))
    args = [("%x", 64, "f32", -1), ("%h", 64, "bf16", -1)]
    values: list[tuple[str, int, str, int]] = list(args)  # name, elements, dtype, generation index
    nodes: list[_Node] = []
    for i in range(n):
        pool = draw(st.sampled_from([values, args + values[2:][-6:]]))
        if draw(st.booleans()):
            src, elems, dtype, node = draw(st.sampled_from(pool))
            name, suffix, factor = draw(st.sampled_from(VARIANTS))
            if elems * factor < 1:
                name, suffix, factor = VARIANTS[0]
            out = int(elems * factor)
            line = f"%v{i} = comm.{name} {src}{suffix} : (tensor<{elems}x{dtype}>) -> tensor<{out}x{dtype}>"
            preds = [node] if node >= 0 else []
            nodes.append(
                _Node(line, preds, f"{name}{suffix} {dtype}", max(elems, out) * DTYPE_BYTES[dtype])
            )
            values.append((f"%v{i}", out, dtype, i))
            continue
        srcs = draw(st.lists(st.sampled_from(pool), max_size=3))
        elems, dtype = (
            draw(st.sampled_from([4, 16, 64])),
            draw(st.sampled_from(["f32", "f32", "bf16"])),
        )
        operands = ", ".join(s[0] for s in srcs)
        types = ", ".join(f"tensor<{s[1]}x{s[2]}>" for s in srcs)
        line = f'%v{i} = "test.op"({operands}) : ({types}) -> tensor<{elems}x{dtype}>'
        nodes.append(_Node(line, sorted({s[3] for s in srcs if s[3] >= 0}), None, 0))
        values.append((f"%v{i}", elems, dtype, i))
    consumers: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for p in node.preds:
            consumers[p].append(i)
    placement = random_topological_order(
        [len(node.preds) for node in nodes], consumers, draw(st.randoms())
    )
    index = {g: k for k, g in enumerate(placement)}
    body = "\n".join(f"  {nodes[g].line}" for g in placement)
    return RandomBlock(
        f"func.func @f(%x: tensor<64xf32>, %h: tensor<64xbf16>) {{\n{body}\n  func.return\n}}",
        [sorted(index[p] for p in nodes[g].preds) for g in placement],
        [nodes[g].label for g in placement],
        [nodes[g].nbytes for g in placement],
    )


def random_topological_order(
    indegree: list[int], consumers: list[list[int]], rng: random.Random
) -> list[int]:
    """A random linear extension: repeatedly take a random node whose producers are placed."""
    indegree = list(indegree)
    ready = [i for i, d in enumerate(indegree) if d == 0]
    order: list[int] = []
    while ready:
        node = ready.pop(rng.randrange(len(ready)))
        order.append(node)
        for succ in consumers[node]:
            indegree[succ] -= 1
            if indegree[succ] == 0:
                ready.append(succ)
    return order


def descendants(preds: list[list[int]]) -> list[set[int]]:
    """Nodes reachable from each node (itself excluded), by explicit search over consumers."""
    succs: list[list[int]] = [[] for _ in preds]
    for node, ps in enumerate(preds):
        for p in ps:
            succs[p].append(node)
    return [closure(succs, start) for start in range(len(preds))]


def reference_buckets(block: RandomBlock, visit: list[int], bucket_bytes: int) -> list[Bucket]:
    """The greedy rules, spelled out: per label one open bucket; before a node joins, close
    every open bucket one of whose members it is reachable from; close at bucket_bytes."""
    reach = descendants(block.preds)
    open_buckets: dict[str, tuple[list[int], int]] = {}
    closed: list[tuple[list[int], int]] = []
    for node in visit:
        for label in [
            k for k, (ms, _) in open_buckets.items() if any(node in reach[m] for m in ms)
        ]:
            closed.append(open_buckets.pop(label))
        label = block.label[node]
        assert label is not None
        members, nbytes = open_buckets.pop(label, ([], 0))
        members.append(node)
        nbytes += block.nbytes[node]
        if nbytes >= bucket_bytes:
            closed.append((members, nbytes))
        else:
            open_buckets[label] = (members, nbytes)
    closed.extend(open_buckets.values())
    closed.sort(key=lambda b: visit.index(b[0][0]))
    return [Bucket(tuple(ms), nbytes) for ms, nbytes in closed]


def respects_dependencies(block: RandomBlock, visit: list[int]) -> bool:
    """True if no visited node comes before a visited node it is reachable from."""
    reach = descendants(block.preds)
    return all(visit[k] not in reach[later] for k in range(len(visit)) for later in visit[k + 1 :])


def assert_fusing_is_acyclic(block: RandomBlock, buckets: list[Bucket]) -> None:
    """No member reaches another of its bucket, the quotient graph (one node per bucket) is
    acyclic, and fusing the buckets in the IR gives a block whose graph is a DAG."""
    reach = descendants(block.preds)
    for bucket in buckets:
        assert not any(b in reach[a] for a in bucket.members for b in bucket.members)
    rep = list(range(len(block.preds)))
    for bucket in buckets:
        for m in bucket.members:
            rep[m] = bucket.members[0]
    quotient: list[set[int]] = [set() for _ in rep]
    for node, ps in enumerate(block.preds):
        quotient[rep[node]].update(rep[p] for p in ps if rep[p] != rep[node])
    qpreds = [sorted(ps) for ps in quotient]
    qsuccs: list[list[int]] = [[] for _ in rep]
    for node, ps in enumerate(qpreds):
        for p in ps:
            qsuccs[p].append(node)
    topological_order(qpreds, qsuccs)  # raises ValueError on a cycle
    graph = graph_of(block)
    for bucket in buckets:
        if len(bucket.members) > 1:
            fuse_collectives([graph.ops[i] for i in bucket.members])
    assert graph.block is not None
    DataflowGraph.from_block(graph.block).topo_order()  # raises ValueError on a cycle


def graph_of(block: RandomBlock) -> DataflowGraph:
    module = parse(block.text)
    func = next(op for op in module.walk() if op.name == "func.func")
    graph = DataflowGraph.from_block(func.regions[0].block)
    assert graph.preds == block.preds  # the test's own bookkeeping matches the IR
    return graph


SETTINGS = settings(
    max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
BUCKET_BYTES = st.sampled_from([1, 256, 2048, 10**6])


@SETTINGS
@given(
    random_blocks(),
    BUCKET_BYTES,
    st.sets(st.sampled_from(["allreduce", "allgather", "reduce_scatter"])),
)
def test_fifo_visit_matches_reference(
    block: RandomBlock, bucket_bytes: int, kinds: set[str]
) -> None:
    graph = graph_of(block)
    visit = [i for i in fifo_order(graph) if graph.comm_kind[i] in kinds]
    buckets = plan_buckets(graph, visit, bucket_bytes)
    assert buckets == reference_buckets(block, visit, bucket_bytes)
    assert sorted(m for b in buckets for m in b.members) == sorted(visit)
    assert_fusing_is_acyclic(block, buckets)


@SETTINGS
@given(random_blocks(), BUCKET_BYTES)
def test_readiness_visit_matches_reference(block: RandomBlock, bucket_bytes: int) -> None:
    graph = graph_of(block)
    collectives = [i for i, label in enumerate(block.label) if label is not None]
    visit = sorted(collectives, key=lambda i: (max(block.preds[i], default=-1), i))
    assert readiness_order(graph, collectives) == visit
    assert respects_dependencies(block, visit)  # why the planner may take this order
    expected = reference_buckets(block, visit, bucket_bytes)
    assert plan_buckets(graph, visit, bucket_bytes) == expected

    def launch_point(bucket: Bucket) -> tuple[int, int]:  # after the members' last producer
        return max((p for m in bucket.members for p in block.preds[m]), default=-1), bucket.members[
            0
        ]

    launch = sorted(expected, key=launch_point)
    assert plan_ddp_buckets(graph, collectives, bucket_bytes) == launch
    assert_fusing_is_acyclic(block, expected)


@SETTINGS
@given(random_blocks(), BUCKET_BYTES, st.randoms(use_true_random=False))
def test_any_topological_visit_matches_reference(
    block: RandomBlock, bucket_bytes: int, rng: random.Random
) -> None:
    graph = graph_of(block)
    order = random_topological_order([len(ps) for ps in block.preds], graph.succs, rng)
    visit = [i for i in order if block.label[i] is not None]
    buckets = plan_buckets(graph, visit, bucket_bytes)
    assert buckets == reference_buckets(block, visit, bucket_bytes)
    assert_fusing_is_acyclic(block, buckets)
