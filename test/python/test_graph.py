"""DataflowGraph, FIFO order and bucket planning on hand-built blocks."""

from __future__ import annotations

import pytest
from helpers import parse

from lancet_mlir.graph.buckets import Bucket, plan_buckets, plan_ddp_buckets, readiness_order
from lancet_mlir.graph.dataflow import (
    DataflowGraph,
    block_ops,
    collective_kind,
    first_forward_use,
    op_display_name,
)
from lancet_mlir.graph.fifo import fifo_order

TEXT = """
builtin.module attributes {lancet.world_size = 4 : i64} {
  func.func @f(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    %a = "test.op"(%x) : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %r = comm.allreduce %a : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %g = comm.allgather %a axis 1 : (tensor<8x4xf32>) -> tensor<8x16xf32>
    %w = "test.op"() ({
      "test.termop"(%r, %a) : (tensor<8x4xf32>, tensor<8x4xf32>) -> ()
    }) : () -> tensor<8x4xf32>
    %u = "foo.bar"(%w, %w, %g) : (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<8x4xf32>
    func.return %u : tensor<8x4xf32>
  }
}
"""


def _graph() -> DataflowGraph:
    module = parse(TEXT)
    func = next(op for op in module.walk() if op.name == "func.func")
    return DataflowGraph.from_block(func.regions[0].block)


def test_nodes_edges_and_kinds() -> None:
    g = _graph()
    assert [op_display_name(op) for op in g.ops] == [
        "test.op",
        "comm.allreduce",
        "comm.allgather",
        "test.op",
        "foo.bar",
    ]
    assert g.terminator is not None
    assert g.terminator.name == "func.return"
    # nested uses (%r, %a inside the region of %w) are edges of %w; duplicates collapse
    assert g.preds == [[], [0], [0], [0, 1], [2, 3]]
    assert g.succs == [[1, 2, 3], [3], [4], [4], []]
    assert g.is_comm == [False, True, True, False, False]
    assert [collective_kind(op) for op in g.ops] == [None, "allreduce", "allgather", None, None]
    # 8x4 f32 = 128 B; the allgather moves its 8x16 output = 512 B (nccl-tests convention)
    assert g.payload_bytes == [0, 128, 512, 0, 0]
    assert g.num_edges == 6
    assert g.ops[2].group_size() == 4  # from the module's lancet.world_size


def test_orders_and_reachability() -> None:
    g = _graph()
    assert g.topo_order() == [0, 1, 2, 3, 4]
    assert g.is_topological([0, 2, 1, 3, 4])
    assert not g.is_topological([0, 3, 1, 2, 4])
    assert not g.is_topological([0, 1, 2, 3])
    reach = g.descendants()
    assert reach[0] == 0b11110
    assert reach[1] == 0b11000
    assert reach[4] == 0
    assert g.first_use_before_def() is None
    # FIFO: the allreduce's consumer %w waits until the compute-ready queue is empty
    assert fifo_order(g) == [0, 1, 2, 3, 4]


FORWARD_USES = """
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %a = "test.op"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %w = "test.op"() ({
    "test.termop"(%c, %a) : (tensor<8xf32>, tensor<8xf32>) -> ()
  }) : () -> tensor<8xf32>
  %b = "test.op"(%d, %a, %c) : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %c = "test.op"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %d = "test.op"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %d : tensor<8xf32>
}
"""


def test_first_forward_use_matches_the_graph() -> None:
    module = parse(FORWARD_USES)
    func = next(op for op in module.walk() if op.name == "func.func")
    block = func.regions[0].block
    ops, terminator = block_ops(block)
    assert terminator is not None
    assert terminator.name == "func.return"
    assert len(ops) == 5
    # %w (op 1) uses %c (op 3) inside its region: the first forward use; op 2 (%b) uses %d
    # (op 4) and %c (op 3), its latest producer is op 4
    assert first_forward_use(ops) == (1, 3)
    assert DataflowGraph.from_block(block).first_use_before_def() == 1
    assert first_forward_use(ops[2:]) == (0, 2)
    assert first_forward_use(ops[3:]) is None
    assert first_forward_use(ops[:2]) is None  # %c is not in the sequence: no edge


def test_plan_buckets_respects_dependencies() -> None:
    text = """
    func.func @f(%x: tensor<16xf32>) -> tensor<16xf32> {
      %r1 = comm.allreduce %x : (tensor<16xf32>) -> tensor<16xf32>
      %d = "test.op"(%r1) : (tensor<16xf32>) -> tensor<16xf32>
      %r2 = comm.allreduce %d : (tensor<16xf32>) -> tensor<16xf32>
      %r3 = comm.allreduce %x : (tensor<16xf32>) -> tensor<16xf32>
      %r4 = comm.allreduce %x : (tensor<16xf32>) -> tensor<16xf32>
      func.return %r4 : tensor<16xf32>
    }
    """
    module = parse(text)
    func = next(op for op in module.walk() if op.name == "func.func")
    g = DataflowGraph.from_block(func.regions[0].block)
    order = fifo_order(g)
    assert order == [0, 3, 4, 1, 2]
    visit = [i for i in order if g.comm_kind[i] == "allreduce"]
    # visit r1, r3, r4 (ready first), then r2 which depends on r1: r1's bucket closes
    assert plan_buckets(g, visit, 10_000) == [Bucket((0, 3, 4), 192), Bucket((2,), 64)]
    # 128-byte buckets: r1+r3 is full, r4 then waits for r2 (independent of r4) to join
    assert plan_buckets(g, visit, 128) == [Bucket((0, 3), 128), Bucket((4, 2), 128)]
    assert plan_buckets(g, [], 10_000) == []
    # DDP's readiness order (last producer: -1 for r1, r3, r4; %d = node 1 for r2) is the
    # same visit; buckets come by launch point, r2's bucket after %d
    assert readiness_order(g, [0, 2, 3, 4]) == [0, 3, 4, 2]
    assert plan_ddp_buckets(g, [0, 2, 3, 4], 10_000) == [Bucket((0, 3, 4), 192), Bucket((2,), 64)]
    assert plan_ddp_buckets(g, [0, 2, 3, 4], 128) == [Bucket((0, 3), 128), Bucket((4, 2), 128)]
    with pytest.raises(ValueError, match="node 1 .* is not a collective"):
        plan_buckets(g, [0, 1], 10_000)


def test_ddp_buckets_come_in_launch_order() -> None:
    # r2 reduces an argument (ready first), r3 is ready after %a, r1 after %b; the
    # max-reduction r3 fills its own bucket
    text = """
    func.func @f(%x: tensor<16xf32>) -> tensor<16xf32> {
      %a = "test.op"(%x) : (tensor<16xf32>) -> tensor<16xf32>
      %b = "test.op"(%a) : (tensor<16xf32>) -> tensor<16xf32>
      %r1 = comm.allreduce %b : (tensor<16xf32>) -> tensor<16xf32>
      %r2 = comm.allreduce %x : (tensor<16xf32>) -> tensor<16xf32>
      %r3 = comm.allreduce %a reduce max : (tensor<16xf32>) -> tensor<16xf32>
      func.return %r1 : tensor<16xf32>
    }
    """
    module = parse(text)
    func = next(op for op in module.walk() if op.name == "func.func")
    g = DataflowGraph.from_block(func.regions[0].block)
    assert readiness_order(g, [2, 3, 4]) == [3, 4, 2]
    # one sum bucket {r2, r1} launched after %b (node 1), the max bucket {r3} after %a (node 0)
    assert plan_ddp_buckets(g, [2, 3, 4], 10_000) == [Bucket((4,), 64), Bucket((3, 2), 128)]
    assert plan_buckets(g, [3, 4, 2], 10_000) == [Bucket((3, 2), 128), Bucket((4,), 64)]


def test_bucket_window_follows_its_lowest_member() -> None:
    # readiness order visits r1 (ready at once, node 3) before r2 (node 1, ready after %a):
    # the bucket's window drops to node 1, so %v's search walks back through %y (node 2)
    # and finds that %v depends on r2: the bucket {r1, r2} closes and %v is alone
    text = """
    func.func @f(%x: tensor<16xf32>) {
      %a = "test.op"() : () -> tensor<16xf32>
      %r2 = comm.allreduce %a : (tensor<16xf32>) -> tensor<16xf32>
      %y = "test.op"(%r2) : (tensor<16xf32>) -> tensor<16xf32>
      %r1 = comm.allreduce %x : (tensor<16xf32>) -> tensor<16xf32>
      %v = comm.allreduce %y : (tensor<16xf32>) -> tensor<16xf32>
      func.return
    }
    """
    module = parse(text)
    func = next(op for op in module.walk() if op.name == "func.func")
    g = DataflowGraph.from_block(func.regions[0].block)
    assert readiness_order(g, [1, 3, 4]) == [3, 1, 4]
    assert plan_buckets(g, [3, 1, 4], 10_000) == [Bucket((3, 1), 128), Bucket((4,), 64)]
