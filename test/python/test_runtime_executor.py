"""The numpy reference executor on small modules with hand-computed outputs."""

from __future__ import annotations

import numpy as np
import pytest

from lancet_mlir.runtime import compare_modules, execute
from lancet_mlir.runtime.executor import ExecResult
from lancet_mlir.runtime.loader import parse_module_text
from lancet_mlir.runtime.values import make_input
from lancet_mlir.tools.errors import UserError


def run(text: str, inputs: dict[int, list[np.ndarray]] | None = None, **kw) -> ExecResult:
    return execute(parse_module_text(text).module, inputs=inputs, **kw)


def f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def one_op(
    body: str, arg_types: list[str], result_types: list[str], world: int | None = None
) -> str:
    """A module whose function applies `body` (which defines %r0, %r1, ...) to %a0, %a1, ..."""
    attrs = f" attributes {{lancet.world_size = {world} : i64}}" if world else ""
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(arg_types))
    rets = ", ".join(f"%r{i}" for i in range(len(result_types)))
    return (
        f"builtin.module{attrs} {{\n  func.func @main({args}) -> ({', '.join(result_types)}) {{\n"
        f"    {body}\n    func.return {rets} : {', '.join(result_types)}\n  }}\n}}\n"
    )


# ---- compute, constants, inputs -----------------------------------------------------------------


def test_matmul_and_add_hand_computed() -> None:
    text = one_op(
        "%m = comp.matmul %a0, %a1 : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>\n"
        "    %c = arith.constant dense<[[1.0, 0.0], [0.0, -1.0]]> : tensor<2x2xf32>\n"
        "    %r0 = comp.add %m, %c : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>",
        ["tensor<2x2xf32>", "tensor<2x2xf32>"],
        ["tensor<2x2xf32>"],
    )
    res = run(text, {0: [f32([[1, 2], [3, 4]]), f32([[5, 6], [7, 8]])]})
    # [[1*5+2*7, 1*6+2*8], [3*5+4*7, 3*6+4*8]] + diag(1, -1)
    np.testing.assert_array_equal(res.outputs[0][0], f32([[20, 22], [43, 49]]))
    assert res.outputs[0][0].dtype == np.float32


def test_deterministic_inputs_depend_on_seed_rank_and_arg() -> None:
    text = one_op(
        "%r0 = comp.scale %a0 {alpha = 1.0 : f64} : (tensor<3xf32>) -> tensor<3xf32>\n"
        "    %r1 = comp.scale %a1 {alpha = 1.0 : f64} : (tensor<3xf32>) -> tensor<3xf32>",
        ["tensor<3xf32>", "tensor<3xf32> {lancet.init_scale = 0.5 : f64}"],
        ["tensor<3xf32>", "tensor<3xf32>"],
    )
    a = run(text, ranks=2, seed=7)
    b = run(text, ranks=2, seed=7)
    c = run(text, ranks=2, seed=8)
    for r in (0, 1):
        for i in (0, 1):
            np.testing.assert_array_equal(a.outputs[r][i], b.outputs[r][i])
            assert not np.array_equal(a.outputs[r][i], c.outputs[r][i])
    assert not np.array_equal(a.outputs[0][0], a.outputs[1][0])  # ranks differ
    # value = N(0, 1) draws of default_rng([seed, rank, arg]) times the init scale
    expected = (np.random.default_rng([7, 1, 1]).standard_normal(3) * 0.5).astype(np.float32)
    np.testing.assert_array_equal(a.outputs[1][1], expected)


def test_integer_inputs_respect_max_int() -> None:
    from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, TensorType, i64

    ty = TensorType(i64, [1000])
    ids = make_input(
        ty, DictionaryAttr({"lancet.max_int": IntegerAttr(5, i64)}), seed=0, rank=0, index=0
    )
    assert ids.dtype == np.int64
    assert ids.min() == 0
    assert ids.max() == 4
    default = make_input(ty, None, seed=0, rank=0, index=0)
    assert sorted(set(default.tolist())) == [0, 1]


def test_timed_placeholder_ops_are_deterministic_functions_of_inputs() -> None:
    text = one_op(
        '%r0 = "test.op"(%a0) {lancet.time_us = 3.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>',
        ["tensor<4xf32>"],
        ["tensor<4xf32>"],
    )
    a = run(text, {0: [f32([1, 2, 3, 4])]})
    b = run(text, {0: [f32([1, 2, 3, 4])]})
    c = run(text, {0: [f32([1, 2, 3, 5])]})
    np.testing.assert_array_equal(a.outputs[0][0], b.outputs[0][0])
    assert not np.array_equal(a.outputs[0][0], c.outputs[0][0])


def test_unknown_op_is_a_clear_error() -> None:
    text = one_op(
        '%r0 = "foo.bar"(%a0) : (tensor<4xf32>) -> tensor<4xf32>',
        ["tensor<4xf32>"],
        ["tensor<4xf32>"],
    )
    with pytest.raises(UserError, match=r"foo\.bar %r0: the runtime cannot execute this op"):
        run(text)


def test_kernel_failure_names_op_and_rank() -> None:
    text = one_op(
        "%r0 = comp.embedding %a0, %a1 : (tensor<3x2xf32>, tensor<2xi64>) -> tensor<2x2xf32>",
        ["tensor<3x2xf32>", "tensor<2xi64>"],
        ["tensor<2x2xf32>"],
    )
    table = f32(np.arange(6).reshape(3, 2))
    with pytest.raises(UserError, match=r"comp\.embedding %r0 on rank 1: "):
        run(text, {0: [table, np.array([0, 2])], 1: [table, np.array([0, 9])]}, ranks=2)


def test_world_size_must_match_ranks() -> None:
    text = one_op(
        "%r0 = comm.allreduce %a0 : (tensor<2xf32>) -> tensor<2xf32>", ["tensor<2xf32>"],
        ["tensor<2xf32>"], world=4,
    )  # fmt: skip
    with pytest.raises(
        UserError, match="ranks: runs 2 ranks, but the module declares lancet.world_size = 4"
    ):
        run(text, ranks=2)


def test_func_selection() -> None:
    text = """
    func.func private @helper(%x: tensor<2xf32>) -> tensor<2xf32> {
      func.return %x : tensor<2xf32>
    }
    func.func @first(%x: tensor<2xf32>) -> tensor<2xf32> {
      %y = comp.scale %x {alpha = 2.0 : f64} : (tensor<2xf32>) -> tensor<2xf32>
      func.return %y : tensor<2xf32>
    }
    func.func @second(%x: tensor<2xf32>) -> tensor<2xf32> {
      %y = comp.scale %x {alpha = 3.0 : f64} : (tensor<2xf32>) -> tensor<2xf32>
      func.return %y : tensor<2xf32>
    }
    """
    ins = {0: [f32([1, 2])]}
    np.testing.assert_array_equal(run(text, ins).outputs[0][0], f32([2, 4]))
    np.testing.assert_array_equal(run(text, ins, func="second").outputs[0][0], f32([3, 6]))
    with pytest.raises(UserError, match="no function @nope"):
        run(text, ins, func="nope")


def test_bad_given_input_shape() -> None:
    text = one_op("%r0 = comp.scale %a0 : (tensor<2xf32>) -> tensor<2xf32>", ["tensor<2xf32>"],
                  ["tensor<2xf32>"])  # fmt: skip
    with pytest.raises(UserError, match=r"input #0 of rank 0: shape \(3,\)"):
        run(text, {0: [f32([1, 2, 3])]})


# ---- collectives on simulated ranks, hand-computed -----------------------------------------------

X4 = [f32([1, -2]), f32([3, 5]), f32([-4, 0.5]), f32([2, 2])]


@pytest.mark.parametrize(
    ("reduce", "world", "expected"),
    [
        ("sum", 2, [4, 3]),
        ("prod", 2, [3, -10]),
        ("max", 2, [3, 5]),
        ("min", 2, [1, -2]),
        ("avg", 2, [2, 1.5]),
        ("sum", 4, [2, 5.5]),
        ("prod", 4, [-24, -10]),
        ("max", 4, [3, 5]),
        ("min", 4, [-4, -2]),
        ("avg", 4, [0.5, 1.375]),
    ],
)
def test_allreduce(reduce: str, world: int, expected: list[float]) -> None:
    text = one_op(
        f"%r0 = comm.allreduce %a0 reduce {reduce} : (tensor<2xf32>) -> tensor<2xf32>",
        ["tensor<2xf32>"], ["tensor<2xf32>"], world,
    )  # fmt: skip
    res = run(text, {r: [X4[r]] for r in range(world)}, ranks=world)
    for r in range(world):
        np.testing.assert_array_equal(res.outputs[r][0], f32(expected))


def test_allreduce_avg_of_integers_floors() -> None:
    text = one_op("%r0 = comm.allreduce %a0 reduce avg : (tensor<2xi32>) -> tensor<2xi32>",
                  ["tensor<2xi32>"], ["tensor<2xi32>"], 2)  # fmt: skip
    res = run(text, {0: [np.array([1, -4], np.int32)], 1: [np.array([2, 1], np.int32)]}, ranks=2)
    np.testing.assert_array_equal(res.outputs[1][0], np.array([1, -2], np.int32))  # 3//2, -3//2


def test_fused_allreduce_with_groups() -> None:
    text = one_op(
        "%r0, %r1 = comm.allreduce %a0, %a1 group <[[0, 2], [1, 3]]> : "
        "(tensor<2xf32>, tensor<1xf32>) -> (tensor<2xf32>, tensor<1xf32>)",
        ["tensor<2xf32>", "tensor<1xf32>"], ["tensor<2xf32>", "tensor<1xf32>"], 4,
    )  # fmt: skip
    ins = {r: [X4[r], f32([10.0**r])] for r in range(4)}
    res = run(text, ins, ranks=4)
    for r in (0, 2):
        np.testing.assert_array_equal(res.outputs[r][0], f32([-3, -1.5]))
        np.testing.assert_array_equal(res.outputs[r][1], f32([101]))
    for r in (1, 3):
        np.testing.assert_array_equal(res.outputs[r][0], f32([5, 7]))
        np.testing.assert_array_equal(res.outputs[r][1], f32([1010]))


M2 = [f32([[1, 2], [3, 4]]), f32([[5, 6], [7, 8]])]


def test_allgather_axis0_and_axis1_two_ranks() -> None:
    text = one_op(
        "%r0 = comm.allgather %a0 : (tensor<2x2xf32>) -> tensor<4x2xf32>\n"
        "    %r1 = comm.allgather %a0 axis 1 : (tensor<2x2xf32>) -> tensor<2x4xf32>",
        ["tensor<2x2xf32>"], ["tensor<4x2xf32>", "tensor<2x4xf32>"], 2,
    )  # fmt: skip
    res = run(text, {0: [M2[0]], 1: [M2[1]]}, ranks=2)
    for r in (0, 1):
        np.testing.assert_array_equal(res.outputs[r][0], f32([[1, 2], [3, 4], [5, 6], [7, 8]]))
        np.testing.assert_array_equal(res.outputs[r][1], f32([[1, 2, 5, 6], [3, 4, 7, 8]]))


def test_allgather_group_order_is_the_written_order() -> None:
    text = one_op("%r0 = comm.allgather %a0 group <[[3, 0], [1, 2]]> : (tensor<1xf32>) -> tensor<2xf32>",
                  ["tensor<1xf32>"], ["tensor<2xf32>"], 4)  # fmt: skip
    res = run(text, {r: [f32([r])] for r in range(4)}, ranks=4)
    np.testing.assert_array_equal(res.outputs[0][0], f32([3, 0]))
    np.testing.assert_array_equal(res.outputs[3][0], f32([3, 0]))
    np.testing.assert_array_equal(res.outputs[1][0], f32([1, 2]))


def test_reduce_scatter_axis0_and_axis1() -> None:
    text = one_op(
        "%r0 = comm.reduce_scatter %a0 : (tensor<2x2xf32>) -> tensor<1x2xf32>\n"
        "    %r1 = comm.reduce_scatter %a0 reduce max axis 1 : (tensor<2x2xf32>) -> tensor<2x1xf32>",
        ["tensor<2x2xf32>"], ["tensor<1x2xf32>", "tensor<2x1xf32>"], 2,
    )  # fmt: skip
    res = run(text, {0: [M2[0]], 1: [f32([[5, 0], [-7, 8]])]}, ranks=2)
    # sum = [[6, 2], [-4, 12]]; max = [[5, 2], [3, 8]]
    np.testing.assert_array_equal(res.outputs[0][0], f32([[6, 2]]))
    np.testing.assert_array_equal(res.outputs[1][0], f32([[-4, 12]]))
    np.testing.assert_array_equal(res.outputs[0][1], f32([[5], [3]]))
    np.testing.assert_array_equal(res.outputs[1][1], f32([[2], [8]]))


def test_reduce_scatter_four_ranks_avg() -> None:
    text = one_op("%r0 = comm.reduce_scatter %a0 reduce avg : (tensor<4xf32>) -> tensor<1xf32>",
                  ["tensor<4xf32>"], ["tensor<1xf32>"], 4)  # fmt: skip
    ins = {r: [f32([r, 2 * r, 4, -r])] for r in range(4)}  # column sums 6, 12, 16, -6
    res = run(text, ins, ranks=4)
    assert [float(res.outputs[r][0][0]) for r in range(4)] == [1.5, 3.0, 4.0, -1.5]


def test_all_to_all_two_ranks_split0_concat1() -> None:
    text = one_op("%r0 = comm.all_to_all %a0 split 0 concat 1 : (tensor<2x2xf32>) -> tensor<1x4xf32>",
                  ["tensor<2x2xf32>"], ["tensor<1x4xf32>"], 2)  # fmt: skip
    res = run(text, {0: [M2[0]], 1: [M2[1]]}, ranks=2)
    # rank 0 receives row 0 of every rank, rank 1 row 1, concatenated along axis 1
    np.testing.assert_array_equal(res.outputs[0][0], f32([[1, 2, 5, 6]]))
    np.testing.assert_array_equal(res.outputs[1][0], f32([[3, 4, 7, 8]]))


def test_all_to_all_four_ranks_same_axis() -> None:
    text = one_op("%r0 = comm.all_to_all %a0 : (tensor<4xf32>) -> tensor<4xf32>",
                  ["tensor<4xf32>"], ["tensor<4xf32>"], 4)  # fmt: skip
    ins = {r: [f32([10 * r + j for j in range(4)])] for r in range(4)}
    res = run(text, ins, ranks=4)
    for r in range(4):  # a transpose: element j of rank r = element r of rank j
        np.testing.assert_array_equal(res.outputs[r][0], f32([10 * j + r for j in range(4)]))


def test_all_to_all_with_groups() -> None:
    text = one_op(
        "%r0 = comm.all_to_all %a0 split 0 concat 0 group <[[0, 1], [2, 3]]> : "
        "(tensor<2xf32>) -> tensor<2xf32>", ["tensor<2xf32>"], ["tensor<2xf32>"], 4,
    )  # fmt: skip
    ins = {r: [f32([10 * r, 10 * r + 1])] for r in range(4)}
    res = run(text, ins, ranks=4)
    expected = {0: [0, 10], 1: [1, 11], 2: [20, 30], 3: [21, 31]}
    for r, e in expected.items():
        np.testing.assert_array_equal(res.outputs[r][0], f32(e))


def test_all_to_allv_with_counts() -> None:
    text = one_op(
        "%r0, %r1 = comm.all_to_allv %a0, %a1 : (tensor<2x2x1xf32>, tensor<2xi64>) -> "
        "(tensor<2x2x1xf32>, tensor<2xi64>)",
        ["tensor<2x2x1xf32>", "tensor<2xi64>"], ["tensor<2x2x1xf32>", "tensor<2xi64>"], 2,
    )  # fmt: skip
    d0 = f32([[[1], [2]], [[3], [4]]])
    d1 = f32([[[5], [6]], [[7], [8]]])
    ins = {0: [d0, np.array([1, 2])], 1: [d1, np.array([0, 1])]}
    res = run(text, ins, ranks=2)
    # rank 0 receives 1 row of its own chunk 0 and 0 rows of rank 1's chunk 0
    np.testing.assert_array_equal(res.outputs[0][0], f32([[[1], [0]], [[0], [0]]]))
    np.testing.assert_array_equal(res.outputs[0][1], np.array([1, 0]))
    # rank 1 receives 2 rows of rank 0's chunk 1 and 1 row of its own chunk 1
    np.testing.assert_array_equal(res.outputs[1][0], f32([[[3], [4]], [[7], [0]]]))
    np.testing.assert_array_equal(res.outputs[1][1], np.array([2, 1]))


def test_all_to_allv_bad_count_is_an_error() -> None:
    text = one_op(
        "%r0, %r1 = comm.all_to_allv %a0, %a1 : (tensor<2x2xf32>, tensor<2xi64>) -> "
        "(tensor<2x2xf32>, tensor<2xi64>)",
        ["tensor<2x2xf32>", "tensor<2xi64>"], ["tensor<2x2xf32>", "tensor<2xi64>"], 2,
    )  # fmt: skip
    d = f32([[1, 2], [3, 4]])
    with pytest.raises(UserError, match=r"count 3 is outside \[0, 2\]"):
        run(text, {0: [d, np.array([1, 1])], 1: [d, np.array([3, 0])]}, ranks=2)


def test_groups_must_cover_the_world() -> None:
    text = one_op("%r0 = comm.allreduce %a0 group <[[0, 1]]> : (tensor<2xf32>) -> tensor<2xf32>",
                  ["tensor<2xf32>"], ["tensor<2xf32>"], 4)  # fmt: skip
    with pytest.raises(UserError, match="rank 2 is in no group"):
        run(text, ranks=4)


# ---- equivalence checker -------------------------------------------------------------------------


def test_compare_modules_detects_a_changed_computation() -> None:
    a = one_op("%r0 = comp.scale %a0 {alpha = 2.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>",
               ["tensor<4xf32>"], ["tensor<4xf32>"])  # fmt: skip
    b = one_op("%t = comp.add %a0, %a0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
               "    %r0 = comp.scale %t {alpha = 1.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>",
               ["tensor<4xf32>"], ["tensor<4xf32>"])  # fmt: skip
    c = one_op("%r0 = comp.scale %a0 {alpha = 2.001 : f64} : (tensor<4xf32>) -> tensor<4xf32>",
               ["tensor<4xf32>"], ["tensor<4xf32>"])  # fmt: skip
    ma, mb, mc = (parse_module_text(t).module for t in (a, b, c))
    same = compare_modules(ma, mb, ranks=1, seed=3)
    assert same.ok
    assert same.max_abs_err == 0.0
    diff = compare_modules(ma, mc, ranks=1, seed=3)
    assert not diff.ok
    x = make_input(
        ma.body.block.first_op.function_type.inputs.data[0], None, seed=3, rank=0, index=0
    )
    assert diff.max_abs_err == pytest.approx(float(np.max(np.abs(x * np.float32(0.001)))), rel=1e-3)
    assert diff.max_rel_err == pytest.approx(0.001 / 2.001, rel=1e-3)


def test_all_to_allv_four_ranks_with_groups() -> None:
    text = one_op(
        "%r0, %r1 = comm.all_to_allv %a0, %a1 group <[[0, 3], [1, 2]]> : "
        "(tensor<2x2xf32>, tensor<2xi64>) -> (tensor<2x2xf32>, tensor<2xi64>)",
        ["tensor<2x2xf32>", "tensor<2xi64>"], ["tensor<2x2xf32>", "tensor<2xi64>"], 4,
    )  # fmt: skip
    # rank r: chunk j = row j (capacity 2); the first counts[j] entries go to member j
    ins = {
        r: [f32([[10 * r, 10 * r + 1], [10 * r + 2, 10 * r + 3]]), np.array([2, 1])]
        for r in range(4)
    }
    ins[3][1] = np.array([0, 2])
    res = run(text, ins, ranks=4)
    # group [0, 3]: member 0 = rank 0, member 1 = rank 3
    np.testing.assert_array_equal(res.outputs[0][0], f32([[0, 1], [0, 0]]))  # 2 rows of r0, 0 of r3
    np.testing.assert_array_equal(res.outputs[0][1], np.array([2, 0]))
    np.testing.assert_array_equal(
        res.outputs[3][0], f32([[2, 0], [32, 33]])
    )  # 1 row of r0, 2 of r3
    np.testing.assert_array_equal(res.outputs[3][1], np.array([1, 2]))
    # group [1, 2]
    np.testing.assert_array_equal(res.outputs[2][0], f32([[12, 0], [22, 0]]))
    np.testing.assert_array_equal(res.outputs[2][1], np.array([1, 1]))
