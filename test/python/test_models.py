"""The GPT-2 MoE training-graph generator (lancet_mlir/models/gpt2_moe.py) and `lancet-model`.

Counts asserted here follow from the configuration by hand:
* parameters per layer: ln1 (g, b), wqkv, bqkv, wo, bo, ln2 (g, b) = 8, plus a dense FFN
  (w1, b1, w2, b2) = 4 or an MoE FFN (gate wg + experts we1, we2) = 1 dense + 2 expert;
  plus wte, wpe, lnf_g, lnf_b;
* one `comm.allreduce` per dense parameter, none for expert weights;
* per MoE layer 2 forward + 2 backward all-to-alls;
* one optimizer update per parameter.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from xdsl.dialects.builtin import StringAttr
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation

from lancet_mlir.dialects.comm import AllReduceOp, AllToAllOp
from lancet_mlir.dialects.comp import kernel_of
from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.models.gpt2_moe import PRESETS, GPT2MoEConfig, build_gpt2_moe, param_specs
from lancet_mlir.tools.errors import UserError
from lancet_mlir.tools.lancet_model import main as lancet_model_main

SMALL = GPT2MoEConfig(layers=2, hidden=8, heads=2, seq=4, batch=2, world_size=2,
                      experts_per_rank=2, vocab=11)  # fmt: skip


def body_ops(module) -> list[Operation]:
    fn = next(op for op in module.walk() if isinstance(op, FuncOp))
    return [op for op in fn.body.block.ops if not isinstance(op, ReturnOp)]


def func_of(module) -> FuncOp:
    return next(op for op in module.walk() if isinstance(op, FuncOp))


def role(op: Operation) -> str | None:
    attr = op.attributes.get("lancet.role")
    return attr.data if isinstance(attr, StringAttr) else None


def kernel_count(ops: list[Operation], name: str) -> int:
    return sum(1 for op in ops if (k := kernel_of(op)) is not None and k.name == name)


def counts(cfg: GPT2MoEConfig) -> dict[str, int]:
    ops = body_ops(build_gpt2_moe(cfg))
    return {
        "a2a": sum(isinstance(op, AllToAllOp) for op in ops),
        "a2a_fwd": sum(isinstance(op, AllToAllOp) and role(op) == "fwd" for op in ops),
        "a2a_bwd": sum(isinstance(op, AllToAllOp) and role(op) == "dx" for op in ops),
        "allreduce": sum(isinstance(op, AllReduceOp) for op in ops),
        "update": sum(role(op) == "update" for op in ops),
        "adam": kernel_count(ops, "adam_update"),
        "moe_gate": kernel_count(ops, "moe_gate"),
    }


# ---- configuration -------------------------------------------------------------------------


def test_capacity_follows_gshard() -> None:
    # C = ceil(cf * k * T / E): T = 16*512 = 8192 tokens, E = 32 experts
    cfg = GPT2MoEConfig(batch=16, seq=512, world_size=16, experts_per_rank=2)
    assert cfg.capacity == 256
    assert dataclasses.replace(cfg, gate="top2").capacity == 512
    assert dataclasses.replace(cfg, capacity_factor=1.25).capacity == 320
    # 10 tokens over 4 experts: ceil(2.5) = 3
    odd = GPT2MoEConfig(batch=1, seq=10, world_size=2, experts_per_rank=2)
    assert odd.capacity == 3


def test_moe_every_selects_layers() -> None:
    assert GPT2MoEConfig(layers=6).moe_layers == [1, 3, 5]
    assert GPT2MoEConfig(layers=6, moe_every=3).moe_layers == [2, 5]
    assert GPT2MoEConfig(layers=3, moe_every=1).moe_layers == [0, 1, 2]
    assert GPT2MoEConfig(layers=3, moe_every=0).moe_layers == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"heads": 5}, "heads (5) must divide hidden (768)"),
        ({"gate": "top3"}, "gate must be one of switch, top2"),
        ({"dtype": "i32"}, "dtype must be one of"),
        ({"optimizer": "lamb"}, "optimizer must be one of adam, sgd"),
        ({"layers": 0}, "layers must be >= 1"),
        ({"capacity_factor": 0.0}, "capacity_factor must be a finite number > 0, got 0.0"),
        ({"capacity_factor": float("inf")}, "capacity_factor must be a finite number > 0, got inf"),
        ({"capacity_factor": float("nan")}, "capacity_factor must be a finite number > 0, got nan"),
        ({"world_size": 1, "experts_per_rank": 1, "gate": "top2"}, "top2 gate needs at least 2"),
    ],
)
def test_bad_configs_are_user_errors(change: dict, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_gpt2_moe(dataclasses.replace(GPT2MoEConfig(), **change))


# ---- small config: structure -----------------------------------------------------------------


@pytest.fixture(scope="module")
def small():
    module = build_gpt2_moe(SMALL)
    module.verify()
    return module


def test_small_config_verifies_and_is_topological(small) -> None:
    check_dominance(small)
    assert small.attributes["lancet.world_size"].value.data == 2


def test_small_config_counts(small) -> None:
    # layer 0 dense, layer 1 MoE: dense params 4 + 2*8 + 4 (FFN) + 1 (gate) = 25, experts 2
    c = counts(SMALL)
    assert c == {"a2a": 4, "a2a_fwd": 2, "a2a_bwd": 2, "allreduce": 25, "update": 27,
                 "adam": 27, "moe_gate": 1}  # fmt: skip


def test_every_op_has_a_role(small) -> None:
    roles = [role(op) for op in body_ops(small)]
    assert None not in roles
    assert set(roles) == {"fwd", "dx", "dw", "update"}


def test_expert_weights_are_not_allreduced(small) -> None:
    fn = func_of(small)
    names = {
        arg: attrs.data["lancet.name"].data
        for arg, attrs in zip(fn.body.block.args, fn.arg_attrs.data, strict=True)
    }
    for op in body_ops(small):
        if kernel_of(op) is None or kernel_of(op).name != "adam_update":
            continue
        param = names[op.operands[0]]
        grad_owner = op.operands[1].owner
        if param.endswith(("we1", "we2")):
            # scaled by 1/G = 0.5 (global mean loss), never all-reduced
            assert kernel_of(grad_owner).name == "scale"
            assert grad_owner.properties["alpha"].value.data == 0.5
        else:
            assert isinstance(grad_owner, AllReduceOp), param
            assert grad_owner.reduction.data.value == "avg"


def test_moe_shapes(small) -> None:
    # E = 4 experts, T = 8 tokens, C = ceil(8/4) = 2, M = 8: [E, C, M] -> [El, G*C, M]
    a2a = [op for op in body_ops(small) if isinstance(op, AllToAllOp)]
    shapes = [(op.operands[0].type.get_shape(), op.results[0].type.get_shape()) for op in a2a]
    assert shapes == [
        ((4, 2, 8), (2, 4, 8)),  # dispatch
        ((2, 4, 8), (4, 2, 8)),  # return
        ((4, 2, 8), (2, 4, 8)),  # backward of the return
        ((2, 4, 8), (4, 2, 8)),  # backward of the dispatch
    ]


def test_arguments_and_results(small) -> None:
    fn = func_of(small)
    attrs = fn.arg_attrs.data
    names = [a.data["lancet.name"].data for a in attrs]
    specs = param_specs(SMALL)
    n = len(specs)
    assert names[:2] == ["ids", "labels"]
    assert names[2 : 2 + n] == [s.name for s in specs]
    assert names[2 + n :] == [f"m_{s.name}" for s in specs] + [f"v_{s.name}" for s in specs]
    assert attrs[0].data["lancet.max_int"].value.data == 11
    assert attrs[2].data["lancet.init_scale"].value.data == 0.02
    assert attrs[2 + n].data["lancet.init_scale"].value.data == 0.0  # Adam moments start at 0
    outputs = fn.function_type.outputs.data
    assert len(outputs) == 1 + 3 * n
    assert str(outputs[0]) == "tensor<f32>"


def test_text_round_trip(small) -> None:
    from lancet_mlir.runtime.loader import parse_module_text

    text = str(small)
    again = parse_module_text(text, "small.mlir").module
    assert str(again) == text


def test_generation_is_deterministic() -> None:
    assert str(build_gpt2_moe(SMALL)) == str(build_gpt2_moe(SMALL))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_dtypes(dtype: str) -> None:
    module = build_gpt2_moe(dataclasses.replace(SMALL, dtype=dtype))
    module.verify()
    fn = func_of(module)
    assert str(fn.function_type.inputs.data[2].element_type) == dtype
    assert str(fn.function_type.outputs.data[0]) == "tensor<f32>"  # the loss stays f32


def test_sgd_and_top2() -> None:
    cfg = dataclasses.replace(SMALL, optimizer="sgd", gate="top2")
    module = build_gpt2_moe(cfg)
    module.verify()
    ops = body_ops(module)
    assert kernel_count(ops, "sgd_update") == 27
    assert kernel_count(ops, "adam_update") == 0
    # top2 doubles the capacity: ceil(2 * 8 / 4) = 4
    gate = next(op for op in ops if kernel_of(op) is not None and kernel_of(op).name == "moe_gate")
    assert gate.properties["capacity"].value.data == 4
    assert gate.properties["gate"].data == "top2"
    assert len(func_of(module).function_type.inputs.data) == 2 + 27


# ---- presets -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_generate(name: str) -> None:
    cfg = PRESETS[name]
    moe = cfg.layers // 2
    dense_params = 4 + 8 * cfg.layers + 4 * (cfg.layers - moe) + moe
    c = counts(cfg)
    assert c["a2a"] == 4 * moe
    assert c["a2a_fwd"] == 2 * moe
    assert c["a2a_bwd"] == 2 * moe
    assert c["allreduce"] == dense_params
    assert c["update"] == dense_params + 2 * moe
    assert c["moe_gate"] == moe


def test_preset_sizes_by_hand() -> None:
    cfg = PRESETS["gpt2_moe_nl12_m768_nh16_sl512_b48"]
    assert (cfg.world_size, cfg.experts_per_rank, cfg.num_experts) == (16, 2, 32)
    assert cfg.capacity == 768  # 48*512 tokens / 32 experts
    # wte 50257*768 + wpe 512*768 + 12 layers * (4*768 + 768*2304 + 2304 + 768*768 + 768)
    # + 6 dense FFNs * (2*768*3072 + 3072 + 768) + 6 MoE * (768*32 + 2*2*768*3072) + lnf 2*768
    expected = 50257 * 768 + 512 * 768 + 12 * 2365440 + 6 * 4722432 + 6 * 9461760 + 1536
    assert sum(math.prod(s.shape) for s in param_specs(cfg)) == expected == 152482560
    assert PRESETS["gpt2_moe_nl24_m1024_nh16_sl512_b8"].capacity == 128


# ---- numerics: the backward pass is the gradient of the global mean loss ---------------------


@pytest.fixture(scope="module")
def grad_setup():
    from lancet_mlir.runtime.executor import execute, select_function
    from lancet_mlir.runtime.values import make_inputs

    cfg = dataclasses.replace(SMALL, dtype="f64", optimizer="sgd", batch=4)
    module = build_gpt2_moe(cfg)
    fn = select_function(module)
    types, attrs = list(fn.function_type.inputs.data), list(fn.arg_attrs.data)
    names = [a.data["lancet.name"].data for a in attrs]
    inputs = {r: make_inputs(types, attrs, seed=3, rank=r) for r in range(2)}
    for i, name in enumerate(names):
        if name.endswith("_g"):  # layer-norm gains around 1, as in a trained model
            inputs[0][i] = inputs[0][i] + 1.0
        if name not in ("ids", "labels") and not name.endswith(("we1", "we2")):
            inputs[1][i] = inputs[0][i].copy()  # dense parameters are replicated
    base = execute(module, ranks=2, inputs=inputs)
    return module, names, inputs, base, execute


def _mean_loss(execute, module, inputs) -> float:
    res = execute(module, ranks=2, inputs=inputs)
    return (float(res.outputs[0][0]) + float(res.outputs[1][0])) / 2


@pytest.mark.parametrize(
    "param", ["wte", "wpe", "l0_wqkv", "l0_b1", "l0_ln1_g", "l1_wg", "l1_we1", "l1_we2", "lnf_b"]
)
def test_gradients_match_finite_differences(grad_setup, param: str) -> None:
    module, names, inputs, base, execute = grad_setup
    index = names.index(param)
    out = index - 2 + 1  # results: loss, then the updated parameters in argument order
    lr, eps = 0.01, 1e-6  # sgd_update's default learning rate
    expert = param.endswith(("we1", "we2"))
    ranks = (0,) if expert else (0, 1)  # a replicated parameter moves on every rank
    grad = (inputs[0][index] - base.outputs[0][out]) / lr
    rng = np.random.default_rng(index)
    for _ in range(2):
        e = np.zeros_like(grad)
        e[tuple(rng.integers(0, d) for d in grad.shape)] = 1.0
        shifted = {}
        for sign in (1.0, -1.0):
            moved = {r: list(v) for r, v in inputs.items()}
            for r in ranks:
                moved[r][index] = inputs[r][index] + sign * eps * e
            shifted[sign] = _mean_loss(execute, module, moved)
        numeric = (shifted[1.0] - shifted[-1.0]) / (2 * eps)
        assert numeric == pytest.approx(float((grad * e).sum()), rel=1e-4, abs=1e-9)


# ---- command line --------------------------------------------------------------------------


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        lancet_model_main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


SMALL_ARGS = ["gpt2-moe", "--layers", "2", "--hidden", "8", "--heads", "2", "--seq", "4",
              "--batch", "2", "--world-size", "2", "--experts-per-rank", "2", "--vocab", "11"]  # fmt: skip


def test_cli_prints_the_module(capsys) -> None:
    code, out, err = run_cli(SMALL_ARGS, capsys)
    assert code == 0
    assert err == ""
    assert out == str(build_gpt2_moe(SMALL)) + "\n"


def test_cli_writes_output_file(tmp_path, capsys) -> None:
    target = tmp_path / "m.mlir"
    code, out, _ = run_cli([*SMALL_ARGS, "--gate", "top2", "-o", str(target)], capsys)
    assert code == 0
    assert out == ""
    assert target.read_text() == str(build_gpt2_moe(dataclasses.replace(SMALL, gate="top2"))) + "\n"


def test_cli_preset_world_size(capsys) -> None:
    code, out, _ = run_cli(
        ["preset", "gpt2_moe_nl12_m768_nh16_sl512_b48", "--world-size", "8"], capsys
    )
    assert code == 0
    assert "lancet.world_size = 8 : i64" in out
    # 8 ranks x 2 experts = 16 experts: C = 24576 / 16 = 1536
    assert "capacity = 1536 : i64" in out


def test_cli_list(capsys) -> None:
    code, out, _ = run_cli(["list"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert [ln.split()[0] for ln in lines] == list(PRESETS)
    assert "capacity=768" in lines[0]
    assert "params/rank=152482560" in lines[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["preset", "nope"], "unknown preset 'nope'"),
        (["gpt2-moe", "--heads", "5"], "heads (5) must divide hidden (768)"),
        (["gpt2-moe", "--layers", "0"], "argument --layers: must be >= 1, got 0"),
        (["gpt2-moe", "--gate", "top3"], "invalid choice: 'top3'"),
    ],
)
def test_cli_errors_are_one_line(argv: list[str], message: str, capsys, tmp_path) -> None:
    target = tmp_path / "never.mlir"
    code, out, err = run_cli([*argv, "-o", str(target)] if argv[0] == "gpt2-moe" else argv, capsys)
    assert code == 1
    assert out == ""
    assert err.startswith("lancet-model: error: ")
    assert err.count("\n") == 1
    assert message in err
    assert not target.exists()
