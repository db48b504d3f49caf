"""Op keys: op name + operand types + result types, in Lancet's T<...> notation."""

from __future__ import annotations

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
