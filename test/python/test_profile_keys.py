"""Op keys: op name + operand types + result types, in Lancet's T<...> notation."""

from __future__ import annotations

import json

from helpers import parse

from lancet_mlir.cost.keys import key_op_name, op_key, render_signature, render_type

MODULE = """
func.func @f(%a: tensor<64x128xf32>, %b: tensor<128x256xf32>, %s: tensor<f32>, %i: i32,
             %d: tensor<?x4xbf16>) {
  %y = comp.matmul %a, %b : (tensor<64x128xf32>, tensor<128x256xf32>) -> tensor<64x256xf32>
  %p, %q = "my.split"(%y) : (tensor<64x256xf32>) -> (tensor<32x256xf32>, tensor<32x256xf32>)
  "my.sink"(%s, %i, %d) : (tensor<f32>, i32, tensor<?x4xbf16>) -> ()
  %r = comm.allreduce %y : (tensor<64x256xf32>) -> tensor<64x256xf32>
  func.return
}
"""


def _ops() -> list:
    module = parse(MODULE)
    func = module.body.block.first_op
    return list(func.body.block.ops)


def test_matmul_key_matches_the_documented_example() -> None:
    assert op_key(_ops()[0]) == "comp.matmul;T<64x128xf32>,T<128x256xf32>,|T<64x256xf32>"


def test_unregistered_op_uses_its_real_name_and_tuple_results() -> None:
    assert op_key(_ops()[1]) == "my.split;T<64x256xf32>,|(T<32x256xf32>,T<32x256xf32>,)"


def test_no_results_rank0_non_tensor_and_dynamic_dims() -> None:
    assert op_key(_ops()[2]) == "my.sink;T<f32>,i32,T<?x4xbf16>,|"


def test_collective_key_and_op_name_part() -> None:
    key = op_key(_ops()[3])
    assert key == "comm.allreduce;T<64x256xf32>,|T<64x256xf32>"
    assert key_op_name(key) == "comm.allreduce"


def test_same_signature_same_key_and_cache_is_consistent() -> None:
    first, second = _ops(), _ops()
    assert [op_key(o) for o in first] == [op_key(o) for o in second]


def test_render_helpers() -> None:
    from xdsl.dialects.builtin import TensorType, f16, i64

    assert render_type(TensorType(f16, [2, 3, 4])) == "T<2x3x4xf16>"
    assert render_type(i64) == "i64"
    assert render_signature("x.y", [], []) == "x.y;|"


def test_generic_aten_calls_are_keyed_by_their_target(tmp_path) -> None:
    """Two `aten.op`s on the same types (a mul and an add launch different kernels) get
    different keys, named by their targets, and a profile entry for one does not cost the
    other: the add keeps the cost model's estimate."""
    from xdsl.dialects.builtin import ModuleOp, TensorType, f32
    from xdsl.dialects.func import FuncOp, ReturnOp
    from xdsl.ir import Block, Region

    from lancet_mlir.cost.cost_model import CostConfig, CostModel
    from lancet_mlir.dialects.aten import AtenOp

    t = TensorType(f32, [8, 8])
    block = Block(arg_types=[t, t])
    mul = AtenOp("aten.mul.Tensor", list(block.args), [t])
    add = AtenOp("aten.add.Tensor", list(block.args), [t])
    block.add_ops([mul, add, ReturnOp()])
    ModuleOp([FuncOp("f", ((t, t), ()), Region(block))])
    assert op_key(mul) == "aten.mul.Tensor;T<8x8xf32>,T<8x8xf32>,|T<8x8xf32>"
    assert op_key(add) == "aten.add.Tensor;T<8x8xf32>,T<8x8xf32>,|T<8x8xf32>"
    assert key_op_name(op_key(mul)) == "aten.mul.Tensor"
    estimate = CostModel.from_config(CostConfig(device="h100")).op_time_us(add)
    entry = {"mean_us": 123.0, "count": 1, "std_us": 0.0, "min_us": 123.0, "max_us": 123.0}
    path = tmp_path / "prof.json"
    path.write_text(json.dumps({"format": "lancet-profile", "version": 1,
                                "metadata": {"device": "h100"}, "entries": {op_key(mul): entry}}))  # fmt: skip
    profiled = CostModel.from_config(CostConfig(profiles=(str(path),), device="h100"))
    assert profiled.op_time_us(mul) == 123.0
    assert profiled.op_time_us(add) == estimate != 123.0
