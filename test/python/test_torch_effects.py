"""In-place writes and random draws keep their program order through `optimize`
(importers/torch/effects.py, `lancet.effects`): a read of a buffer is never moved after the
write that replaces it, and dropout masks are drawn in the original order. One process on a
fake process group; each graph gives the scheduler a collective to hide the moved op behind
(before the fix the scheduler moved `copy_` ahead of the read and the second `bernoulli_`
ahead of the first, and the values differed)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
import torch.nn.functional as F
from helpers import parse
from xdsl.dialects.builtin import ArrayAttr, StringAttr

import lancet_mlir.torch as lt
from lancet_mlir import attrs
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.importers.torch import is_wait
from lancet_mlir.importers.torch.effects import node_effects
from lancet_mlir.support.errors import UserError

PIPELINE = "lancet-schedule{partition=none max-seconds=0.2}"


@pytest.fixture(autouse=True)
def fake_group() -> Iterator[None]:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _dropouts(w0, w1, w2, x):  # noqa: ANN001, ANN202 - a traced step
    w0, w1, w2 = (w.detach().requires_grad_(True) for w in (w0, w1, w2))
    d1 = F.dropout(fc.all_reduce(x @ w0, "sum", "0") @ w1, 0.5, training=True)
    d2 = F.dropout(x @ w2, 0.5, training=True)  # independent of the all-reduce
    loss = (d1 + 3.0 * d2).pow(2).mean()
    grads = torch.autograd.grad(loss, [w0, w1, w2])
    return (loss.detach(), *[w.detach() - 0.1 * fc.all_reduce(g, "sum", "0")
                             for w, g in zip((w0, w1, w2), grads, strict=True)])  # fmt: skip


def _overwrite(w0, w1, w2, w3, x):  # noqa: ANN001, ANN202 - a traced step
    w0, w1 = (w.detach().requires_grad_(True) for w in (w0, w1))
    h = fc.all_reduce(x @ w0, "sum", "0") @ w1
    with torch.no_grad():
        buf = x @ w2
        snap = buf * h  # reads buf after the all-reduce ...
        buf.copy_(x @ w3)  # ... then overwrites it (independent of the all-reduce)
    loss = (h * snap).mean() + buf.mean()
    grads = torch.autograd.grad(loss, [w0, w1])
    return (loss.detach(), *[w.detach() - 0.1 * fc.all_reduce(g, "sum", "0")
                             for w, g in zip((w0, w1), grads, strict=True)])  # fmt: skip


def _targets(gm: torch.fx.GraphModule, *names: str) -> list[str]:
    return [n.name for n in gm.graph.nodes if n.name in names]


def _same_values(step, args: list[torch.Tensor]) -> tuple[torch.fx.GraphModule, bool]:  # noqa: ANN001
    gm = lt.capture(step, args, world_size=2)
    new = lt.optimize(gm, world_size=2, cluster="p3dn", pipeline=PIPELINE).graph_module
    torch.manual_seed(0)
    before = gm(*args)
    torch.manual_seed(0)
    after = new(*args)
    return new, all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_dropout_masks_are_drawn_in_program_order() -> None:
    torch.manual_seed(1)
    args = [torch.randn(256, 256) / 20 for _ in range(4)]
    new, same = _same_values(_dropouts, args)
    assert same
    assert _targets(new, "bernoulli_", "bernoulli__1") == ["bernoulli_", "bernoulli__1"]


def test_a_read_stays_before_the_in_place_write_that_replaces_its_value() -> None:
    torch.manual_seed(2)
    args = [torch.randn(512, 512) / 20 for _ in range(5)]
    new, same = _same_values(_overwrite, args)
    assert same
    assert _targets(new, "mul", "copy_") == ["mul", "copy_"]


def test_effects_of_each_node() -> None:
    torch.manual_seed(3)
    args = [torch.randn(64, 64) / 20 for _ in range(5)]
    gm = lt.capture(_overwrite, args, world_size=2)
    found = {n.name: e for n, e in node_effects(gm.graph, is_wait).items()}
    # buf (mm_2) is the one storage written: copy_ writes it, its readers read it, and
    # the nodes of storages nobody writes have no effects
    assert found["copy_"] == ["write:s0"]
    assert found["mul"] == ["read:s0"]
    assert all(e in (["read:s0"], ["write:s0"]) for e in found.values()), found
    module = lt.import_graph(gm, world_size=2)
    marked = {op.attributes["lancet.fx_node"].data: op.attributes[attrs.EFFECTS]  # type: ignore[union-attr]
              for op in module.walk() if attrs.EFFECTS in op.attributes}  # fmt: skip
    assert marked["copy_"] == ArrayAttr([StringAttr("write:s0")])
    assert set(marked) == set(found)
    gm = lt.capture(_dropouts, args[:4], world_size=2)
    found = {n.name: e for n, e in node_effects(gm.graph, is_wait).items()}
    # make_fx's dropout: empty_like, bernoulli_ (draws: the RNG, in place: the mask),
    # div_ (in place), then the forward's and the backward's products read the mask
    assert found == {
        "bernoulli_": ["write:rng", "write:s0"], "div_": ["write:s0"],
        "bernoulli__1": ["write:rng", "write:s1"], "div__1": ["write:s1"],
        "mul": ["read:s0"], "mul_1": ["read:s1"], "mul_6": ["read:s1"], "mul_7": ["read:s0"],
    }  # fmt: skip


def test_a_malformed_pipeline_is_one_user_error() -> None:
    gm = lt.capture(_dropouts, [torch.randn(8, 8) for _ in range(4)], world_size=2)
    with pytest.raises(UserError, match=r"^pipeline 'lancet-schedule\{': ") as caught:
        lt.optimize(gm, world_size=2, pipeline="lancet-schedule{")
    assert "\n" not in str(caught.value)


def test_a_coalesced_all_reduce_is_exported_as_itself() -> None:
    def step(w1, w2, x):  # noqa: ANN001, ANN202
        w1, w2 = (w.detach().requires_grad_(True) for w in (w1, w2))
        loss = (torch.tanh(x @ w1) @ w2).pow(2).mean()
        g1, g2 = torch.autograd.grad(loss, [w1, w2])
        r1, r2 = fc.all_reduce_coalesced([g1, g2], "avg", "0")
        return loss.detach(), w1.detach() - 0.1 * r1, w2.detach() - 0.1 * r2

    torch.manual_seed(4)
    args = [torch.randn(64, 64), torch.randn(64, 64), torch.randn(32, 64)]
    gm = lt.capture(step, args, world_size=2)
    new = lt.optimize(gm, world_size=2, cluster="p3dn").graph_module
    assert [str(n.target) for n in new.graph.nodes if "coalesced" in str(n.target)] == [
        "_c10d_functional.all_reduce_coalesced.default"
    ]
    assert all(torch.equal(a, b) for a, b in zip(gm(*args), new(*args), strict=True))


def _graph(text: str) -> DataflowGraph:
    fn = next(iter(parse(text).body.block.ops))
    return DataflowGraph.from_block(fn.regions[0].blocks[0])


def test_dataflow_orders_each_named_resource_on_its_own() -> None:
    # a: write s0; b: read s0; c: write rng; d: read s0 + write s1; e: write s0; f: write rng
    g = _graph("""func.func @f(%x: tensor<4xf32>) {
      %a = "test.op"(%x) {lancet.effects = ["write:s0"]} : (tensor<4xf32>) -> tensor<4xf32>
      %b = "test.op"(%x) {lancet.effects = ["read:s0"]} : (tensor<4xf32>) -> tensor<4xf32>
      %c = "test.op"(%x) {lancet.effects = ["write:rng"]} : (tensor<4xf32>) -> tensor<4xf32>
      %d = "test.op"(%x) {lancet.effects = ["read:s0", "write:s1"]} : (tensor<4xf32>) -> tensor<4xf32>
      %e = "test.op"(%x) {lancet.effects = ["write:s0"]} : (tensor<4xf32>) -> tensor<4xf32>
      %f = "test.op"(%x) {lancet.effects = ["read:rng", "write:rng"]} : (tensor<4xf32>) -> tensor<4xf32>
      %h = "test.op"(%x) : (tensor<4xf32>) -> tensor<4xf32>
      func.return
    }""")
    assert g.preds == [[], [0], [], [0], [0, 1, 3], [2], []]


@pytest.mark.parametrize("bad", ["foo", torch.nn.Linear(2, 2), torch.fx.Graph()])
def test_optimize_of_something_else_than_a_graph_module_is_one_user_error(bad: object) -> None:
    with pytest.raises(UserError, match=r"^expected a torch.fx.GraphModule .*, got \w+$"):
        lt.optimize(bad, world_size=2)  # type: ignore[arg-type]


def test_a_boolean_world_size_is_refused() -> None:
    gm = lt.capture(_dropouts, [torch.randn(8, 8) for _ in range(4)], world_size=2)
    with pytest.raises(UserError, match=r"^world_size must be a positive integer, got True$"):
        lt.optimize(gm, world_size=True)


def test_a_collective_with_effects_is_never_fused() -> None:
    # comm-bucket-fusion put the fused all-reduce where r2 was, after the write r1 must
    # precede (the FX graph then read the zeroed buffer)
    from helpers import run_pipeline

    module = parse("""func.func @f(%x: tensor<1024xf32>, %y: tensor<1024xf32>) -> (tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>) {
      %r1 = comm.allreduce %x {lancet.effects = ["read:s0"]} : (tensor<1024xf32>) -> tensor<1024xf32>
      %z = comp.add %y, %y {lancet.effects = ["write:s0"]} : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
      %r2 = comm.allreduce %y : (tensor<1024xf32>) -> tensor<1024xf32>
      %r3 = comm.allreduce %y : (tensor<1024xf32>) -> tensor<1024xf32>
      func.return %r1, %z, %r2 : tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>
    }""")  # fmt: skip
    run_pipeline(module, "comm-bucket-fusion")
    fn = next(iter(module.body.block.ops))
    ops = [op for op in fn.regions[0].blocks[0].ops][:-1]
    # r2 and r3 fuse; r1 stays alone, before the write
    assert [(op.name, len(op.operands)) for op in ops] == [
        ("comm.allreduce", 1), ("comp.add", 2), ("comm.allreduce", 2)
    ]  # fmt: skip
    assert attrs.EFFECTS in ops[0].attributes


def _set_alias(w0, w1, w2, w3, x):  # noqa: ANN001, ANN202 - a traced step
    w0, w1 = (w.detach().requires_grad_(True) for w in (w0, w1))
    h = fc.all_reduce(x @ w0, "sum", "0") @ w1
    with torch.no_grad():
        src = x @ w2
        a = torch.empty(0)
        a.set_(src)  # a shares src's memory: a's write below changes src
        snap = src * h
        a.add_(x @ w3)
    loss = (h * snap).mean() + src.mean()
    grads = torch.autograd.grad(loss, [w0, w1])
    return (loss.detach(), *[w.detach() - 0.1 * fc.all_reduce(g, "sum", "0")
                             for w, g in zip((w0, w1), grads, strict=True)])  # fmt: skip


def test_a_tensor_set_to_another_shares_its_writes() -> None:
    # src.mean() was scheduled before a.add_: set_'s schema does not say a takes src's memory
    torch.manual_seed(5)
    args = [torch.randn(256, 256) / 20 for _ in range(5)]
    _, same = _same_values(_set_alias, args)
    assert same
