"""PyTorch import and export on one process (fake process group): counts, FLOPs, roles,
the optimized graph's signature and wait placement, bad input, and that `import lancet_mlir`
never imports torch. Values on real gloo ranks: test_torch_ranks.py."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from functools import cache

import pytest
import torch
import torch.distributed as dist
from torch.utils.flop_counter import FlopCounterMode
from torch_ranks import PIPELINE, REPO, model

import lancet_mlir.torch as lt
from lancet_mlir.dialects.comm import CollectiveOp
from lancet_mlir.importers.torch import is_collective, is_wait
from lancet_mlir.support.errors import UserError


@cache
def captured(name: str) -> torch.fx.GraphModule:
    step, args = model(name, 0)
    return lt.capture(step, args, world_size=2)


def _calls(gm: torch.fx.GraphModule, predicate) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and predicate(n)]


def _ops(module):
    return [
        op
        for op in module.walk()
        if "." in op.name and not op.name.startswith(("func.", "builtin."))
    ]


def test_plain_import_does_not_import_torch() -> None:
    code = "import sys, lancet_mlir, lancet_mlir.passes, lancet_mlir.tools.launch; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("name", "kinds", "num_waits"),
    [
        # 1 layer: 7 dense parameters all-reduced, dispatch + combine forward and backward
        ("capacity", {"comm.allreduce": 7, "comm.all_to_all": 4}, 11),
        # the token counts' exchange is an even all-to-all (waited twice: by the model and
        # by the tracer), the 4 data ones are uneven
        ("dropless", {"comm.allreduce": 7, "comm.all_to_all": 1, "comm.all_to_allv": 4}, 13),
        ("mlp", {"comm.allreduce": 6}, 6),  # 3 layers x (weight, bias)
    ],
)
def test_collectives_and_waits(name: str, kinds: dict[str, int], num_waits: int) -> None:
    gm = captured(name)
    collectives = _calls(gm, is_collective)
    waits = _calls(gm, is_wait)
    assert len(collectives) == sum(kinds.values())
    assert len(waits) == num_waits

    def waited(wait: torch.fx.Node) -> torch.fx.Node:
        source = wait.all_input_nodes[0]
        return waited(source) if is_wait(source) else source

    assert {waited(w) for w in waits} == set(collectives)  # each one waited
    module = lt.import_graph(gm, world_size=2)
    module.verify()
    counted = Counter(op.name for op in module.walk() if isinstance(op, CollectiveOp))
    assert counted == kinds
    assert not any("wait" in op.name for op in _ops(module))  # waits folded


@pytest.mark.parametrize("name", ["capacity", "mlp"])
def test_flops_equal_flop_counter(name: str) -> None:
    gm = captured(name)
    _, args = model(name, 0)
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        with FlopCounterMode(display=False) as counter:
            gm(*args)
    finally:
        dist.destroy_process_group()
    module = lt.import_graph(gm, world_size=2)
    flops = sum(
        op.attributes["lancet.flops"].value.data
        for op in _ops(module)
        if "lancet.flops" in op.attributes
    )
    assert flops == counter.get_total_flops() > 0


def test_mlp_flops_by_hand() -> None:
    # 3 layers of [8,16] @ [16,16]: forward 3 mm, backward 3 dW + 2 dX (no dX into x)
    module = lt.import_graph(captured("mlp"), world_size=2)
    mm = [op for op in _ops(module) if op.name == "comp.matmul"]
    assert len(mm) == 8
    assert all(op.attributes["lancet.flops"].value.data == 2 * 8 * 16 * 16 for op in mm)


def test_roles_every_dw_reaches_an_update() -> None:
    gm = captured("capacity")
    imported = lt.optimize(gm, world_size=2, pipeline="program-order").imported
    roles = {n: imported.roles.get(n.name) for n in gm.graph.nodes}
    counts = Counter(r for r in roles.values() if r)
    assert all(counts[r] > 0 for r in ("fwd", "dx", "dw", "update"))
    updates = {n for n, r in roles.items() if r == "update"}
    for node, role in roles.items():
        if role != "dw":
            continue
        seen, todo = set(), [node]
        while todo and not seen & updates:
            n = todo.pop()
            seen.add(n)
            todo.extend(u for u in n.users if u not in seen)
        assert seen & updates, f"{node.name} reaches no update"
    # the matmuls of the forward are fwd; the gate weight's gradient is a dW matmul
    first_mm = next(n for n in gm.graph.nodes if "mm" in str(n.target))
    assert roles[first_mm] == "fwd"
    assert all(
        roles[n] != "fwd" for n in gm.graph.nodes if str(n.target).startswith("aten.ones_like")
    )


@pytest.mark.parametrize("name", ["capacity", "dropless", "mlp"])
def test_round_trip_signature_and_waits(name: str) -> None:
    gm = captured(name)
    opt = lt.optimize(gm, world_size=2, pipeline=PIPELINE, cluster="p3dn")
    new = opt.graph_module
    new.graph.lint()
    old_in = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    assert [n.name for n in new.graph.nodes if n.op == "placeholder"] == old_in
    out_old = next(n for n in gm.graph.nodes if n.op == "output")
    out_new = next(n for n in new.graph.nodes if n.op == "output")
    assert [str(a) for a in out_new.args[0]] == [str(a) for a in out_old.args[0]]
    order = {n: i for i, n in enumerate(new.graph.nodes)}
    for wait in _calls(new, is_wait):
        source = wait.all_input_nodes[0]
        while source.target is __import__("operator").getitem:
            source = source.all_input_nodes[0]
        first = min(order[u] for u in wait.users)
        assert order[source] < order[wait] == first - 1  # just before its first user
    assert opt.report["makespan_us"] <= opt.report["input_makespan_us"]
    assert opt.report["speedup"] > 1.0  # p3dn: the all-reduces hide behind the backward


def test_upper_bound_note_for_data_dependent_splits() -> None:
    imported = lt.optimize(captured("dropless"), world_size=2, pipeline="program-order").imported
    assert len([n for n in imported.notes if "upper bound" in n]) == 4
    bounded = [op for op in imported.module.walk() if "lancet.bound" in op.attributes]
    assert len(bounded) == 4


def test_no_bound_is_one_error_line() -> None:
    def step(x: torch.Tensor) -> torch.Tensor:
        import torch.distributed._functional_collectives as fcol

        n = x.sum().long().item()  # unbounded data-dependent size
        got = fcol.all_to_all_single(x[: 2 * n], [n, n], [n, n], "0")
        return fcol.wait_tensor(got) * 2

    gm = lt.capture(step, [torch.ones(8, 4)], world_size=2)
    with pytest.raises(UserError, match="has no upper bound"):
        lt.import_graph(gm, world_size=2)


def test_bad_world_size_and_pipeline() -> None:
    with pytest.raises(UserError, match="world_size"):
        lt.import_graph(captured("mlp"), world_size=0)
    with pytest.raises(UserError, match="pipeline 'no-such-pass'"):
        lt.optimize(captured("mlp"), world_size=2, pipeline="no-such-pass")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pipeline": "lancet-schedule{bogus=1}"}, "lancet-schedule: unknown option bogus;"),
        ({"cluster": "nope"}, "simulate: lancet.cluster: unknown cluster 'nope' (choices:"),
        ({"device": "tpu"}, "simulate: lancet.device: unknown device 'tpu' (choices:"),
        ({"gpus_per_node": 0}, "simulate: lancet.gpus_per_node: expected an integer >= 1"),
        ({"network_gbps": -1.0}, "simulate: lancet.network_gbps: expected a finite number > 0"),
    ],
)
def test_bad_options_are_user_errors(options: dict, message: str) -> None:
    # an outside review: these were xDSL's PassFailedException / OpError, not UserError
    with pytest.raises(UserError) as err:
        lt.optimize(captured("mlp"), world_size=2, **options)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_examples_dir_is_importable() -> None:
    assert (REPO / "examples" / "torch" / "moe_step.py").is_file()


def test_moe_pairs_and_capacity_axis() -> None:
    from lancet_mlir.exporters.torch.moe import Desc, find_pairs, part_sizes

    pairs = find_pairs(captured("capacity"), 2)
    # forward (dispatch -> combine) and backward (combine's gradient -> dispatch's): the
    # axis is the capacity (16 tokens, 4 experts: 4 slots), innermost in each rank's rows
    assert [(p.first.name, p.second.name) for p in pairs] == [
        ("all_to_all_single", "all_to_all_single_1"),
        ("all_to_all_single_2", "all_to_all_single_3"),
    ]
    assert [p.size for p in pairs] == [4, 4]
    assert all(p.descs[p.wait] == Desc(0, 4, 1) for p in pairs)
    # the batched expert matmuls see [local experts, ranks x capacity, d]: axis in dim 1
    bmms = [n for n in pairs[0].span if "bmm" in str(n.target)]
    assert [pairs[0].descs[n] for n in bmms] == [Desc(1, 4, 1), Desc(1, 4, 1)]
    assert part_sizes(4, 3) == [2, 1, 1]
    assert find_pairs(captured("dropless"), 2) == []  # data-dependent splits: not split


def test_partitioned_graph_keeps_signature_uneven_parts() -> None:
    from lancet_mlir.exporters.torch.moe import partition_graph

    gm = captured("capacity")
    new, pairs = partition_graph(gm, 3, world_size=2)
    assert pairs == 2
    new.graph.lint()
    a2a = [n for n in new.graph.nodes if "all_to_all_single" in str(n.target)]
    assert len(a2a) == 12  # 2 pairs x 2 exchanges x 3 parts
    # part rows: 4 experts x (2, 1, 1) slots
    assert sorted({tuple(n.meta["val"].shape) for n in a2a}) == [(4, 16), (8, 16)]
    out_old = next(n for n in gm.graph.nodes if n.op == "output")
    out_new = next(n for n in new.graph.nodes if n.op == "output")
    shapes = [tuple(a.meta["val"].shape) for a in out_old.args[0]]
    assert [tuple(a.meta["val"].shape) for a in out_new.args[0]] == shapes
    with pytest.raises(UserError, match="no MoE all-to-all pair"):
        lt.optimize(captured("mlp"), world_size=2, pipeline="program-order", partition=2)


def test_group_names_resolve_to_rank_groups() -> None:
    from lancet_mlir.importers.torch.collectives import Groups

    groups = Groups(4, {"7": [[0, 1], [2, 3]], "8": [[0, 1, 2, 3]]}, [])
    attr = groups.property("7", None, "node")
    assert attr is not None
    assert attr.rank_lists == ((0, 1), (2, 3))
    assert groups.property("8", None, "node") is None  # the whole world: no groups property
    assert groups.property("0", None, "node") is None  # the default group, no live group
    blocks = groups.property("9", 2, "node")  # an all-gather's group size, name unknown
    assert blocks is not None
    assert blocks.rank_lists == ((0, 1), (2, 3))
    assert groups.notes == ["group '9' taken as consecutive blocks of 2 ranks"]
    with pytest.raises(UserError, match="process group '5' is unknown"):
        groups.property("5", None, "node")
    with pytest.raises(UserError, match="does not divide"):
        groups.property("6", 3, "node")


def test_a_gradient_shaped_activation_gradient_is_not_the_weights_gradient() -> None:
    # an outside review: the expert input w [12, 12] has the shape of the exchanged tokens'
    # gradient (12 tokens x 12 features), which comes first in the backward; calling it w's
    # gradient made its successors `update`, among them the input of a backward all-to-all
    # (`dw`, a collective): dw-schedule then failed with "chains form a cycle"
    import torch.distributed._functional_collectives as fcol

    def step(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
        w = w.detach().requires_grad_(True)
        got = fcol.all_to_all_single_autograd(x, None, None, "0")
        h = torch.nn.functional.gelu(got @ w)
        back = fcol.all_to_all_single_autograd(h, None, None, "0")
        (grad,) = torch.autograd.grad((back * back).sum(), [w])
        grad = fcol.wait_tensor(fcol.all_reduce(grad, "sum", "0"))
        return (w.detach() - 0.1 * grad,)

    gm = lt.capture(step, [torch.randn(12, 12), torch.randn(12, 12)], world_size=2)
    done = lt.optimize(gm, world_size=2, pipeline="dw-schedule", cluster="p3dn")
    roles = done.imported.roles
    by_target = {}
    for n in gm.graph.nodes:
        if n.op == "call_function":
            by_target.setdefault(str(n.target), []).append(roles.get(n.name))
    # the real gradient is the mm of the exchanged tokens' transpose with the gradient; the
    # activation gradients ([12, 12] too) feed the backward all-to-all: none is `update`
    assert by_target["aten.gelu_backward.default"] == ["dw"]
    assert by_target["aten.mm.default"][-1] == "dw"
    assert "update" not in by_target["aten.mm.default"]
    updates = {str(n.target) for n in gm.graph.nodes if roles.get(n.name) == "update"}
    assert updates == {"aten.mul.Tensor", "aten.sub.Tensor"}
    # every all-to-all's input is made before it: no update feeds the body
    for n in gm.graph.nodes:
        if is_collective(n):
            assert all(roles.get(i.name) != "update" for i in n.all_input_nodes)
    done.graph_module.graph.lint()
