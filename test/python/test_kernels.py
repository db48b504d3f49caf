"""Kernel registry and reference implementations: numerics (hand-computed and finite
differences), shape rules, costs, partition rules (checked by executing the split
computation), one implementation per kernel written against an array namespace."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from lancet_mlir.dialects.kernels import (
    KERNELS,
    PARTIAL,
    Kernel,
    KernelError,
    ParamSpec,
    TensorSig,
    default_bytes,
    dtype_bytes,
    get_kernel,
    register,
)
from lancet_mlir.runtime.kernels import IMPLEMENTATIONS, kernel_runner, numpy_dtype, run_kernel

RNG_SEED = 1234


def run(name: str, *arrays: Any, **params: Any) -> list[np.ndarray]:
    """Run a kernel's reference implementation (numpy) on `arrays`."""
    return run_kernel(name, [np.asarray(a) for a in arrays], params)


def one(name: str, *arrays: Any, **params: Any) -> np.ndarray:
    (out,) = run(name, *arrays, **params)
    return out


def sig(a: np.ndarray) -> TensorSig:
    names = {np.float16: "f16", np.float32: "f32", np.float64: "f64", np.int32: "i32",
             np.int64: "i64", np.bool_: "i1"}  # fmt: skip
    return TensorSig(a.shape, names[a.dtype.type])


def numgrad(f: Callable[[np.ndarray], float], x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central finite differences of a scalar function."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        g[idx] = (f(xp) - f(xm)) / (2 * h)
    return g


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(RNG_SEED + seed).standard_normal(shape)


# ---------------------------------------------------------------------------------------
# Basics
# ---------------------------------------------------------------------------------------


def test_dtype_bytes_and_sigs() -> None:
    assert [dtype_bytes(d) for d in ("bf16", "f16", "f32", "i32", "f64", "i64", "i1")] == [
        2, 2, 4, 4, 8, 8, 1,
    ]  # fmt: skip
    s = TensorSig((64, 128), "bf16")
    assert (s.numel, s.nbytes, s.rank, str(s)) == (8192, 16384, 2, "tensor<64x128xbf16>")
    scalar = TensorSig((), "f32")
    assert (scalar.numel, scalar.nbytes, str(scalar)) == (1, 4, "tensor<f32>")
    assert numpy_dtype("bf16") == np.float32
    assert numpy_dtype("f16") == np.float16
    with pytest.raises(KernelError, match="unknown dtype 'f8'"):
        TensorSig((2,), "f8")
    with pytest.raises(KernelError, match="negative or dynamic"):
        TensorSig((-1, 2), "f32")


def test_registry_lookup_and_registration() -> None:
    assert get_kernel("matmul").op_name == "comp.matmul"
    with pytest.raises(KeyError, match="unknown kernel 'matmull'.*matmul"):
        get_kernel("matmull")
    with pytest.raises(KernelError, match="already registered"):
        register(get_kernel("add"))
    required = {
        "matmul", "matmul_dx", "matmul_dw", "batch_matmul", "batch_matmul_dx",
        "batch_matmul_dw", "add", "sub", "mul", "bias_add", "layer_norm", "layer_norm_dx",
        "layer_norm_dw", "softmax", "softmax_dx", "gelu", "gelu_dx", "embedding",
        "embedding_dw", "reshape", "transpose", "split", "concat", "cross_entropy",
        "cross_entropy_dx", "moe_gate", "moe_dispatch", "moe_combine", "moe_dispatch_dx",
        "moe_combine_dx", "moe_combine_dw", "reduce_sum", "sgd_update", "adam_update",
        "fill", "zeros",
    }  # fmt: skip
    assert required <= set(KERNELS)
    assert all(k.doc for k in KERNELS.values())
    roles = {n: k.role for n, k in KERNELS.items()}
    assert roles["matmul"] == "fwd"
    assert roles["matmul_dx"] == "dx"
    assert roles["matmul_dw"] == "dw"
    assert roles["adam_update"] == "update"
    assert roles["reshape"] is None


def test_params_resolution_and_errors() -> None:
    mm = get_kernel("matmul")
    assert mm.resolve_params({"transpose_b": True}) == {"transpose_a": False, "transpose_b": True}
    with pytest.raises(
        KernelError, match=r"unknown parameter 'foo' \(allowed: transpose_a, transpose_b\)"
    ):
        mm.resolve_params({"foo": 1})
    with pytest.raises(KernelError, match="parameter 'transpose_a' expects a bool, got 1"):
        mm.resolve_params({"transpose_a": 1})
    with pytest.raises(KernelError, match="missing required parameter 'num'"):
        get_kernel("split").resolve_params({})
    with pytest.raises(KernelError, match="must be one of switch, top2, got 'top3'"):
        get_kernel("moe_gate").resolve_params({"capacity": 2, "gate": "top3"})
    # ints are fine for float params, tuples accept lists
    assert get_kernel("sgd_update").resolve_params({"lr": 1})["lr"] == 1.0
    assert get_kernel("reshape").resolve_params({"shape": [2, 3]})["shape"] == (2, 3)
    assert ParamSpec.of((1, 2)) == ParamSpec(tuple, (1, 2))
    # the stored callables accept partial params (defaults filled in)
    a, b = TensorSig((2, 3), "f32"), TensorSig((3, 4), "f32")
    assert mm.infer([a, b], {}) == [TensorSig((2, 4), "f32")]
    assert mm.infer([a, b]) == [TensorSig((2, 4), "f32")]
    with pytest.raises(KernelError, match="expected 2 inputs, got 3"):
        mm.infer([a, b, b], {})


def test_custom_kernel_definition() -> None:
    k = Kernel(
        name="double",
        num_inputs=1,
        params={"k": 2.0},
        infer=lambda ins, p: [ins[0]],
        flops=lambda ins, outs, p: float(ins[0].numel),
    )
    s = TensorSig((3,), "f32")
    assert k.cost([s], [s]) == (3.0, 24.0)  # default bytes: input + output
    assert k.allowed_partitions([s], [s]) == [((None,), (None,))]
    # a spec without a registered implementation cannot run
    with pytest.raises(KernelError, match="kernel 'double' has no reference implementation"):
        run_kernel(k, [np.ones(3)])
    with pytest.raises(KernelError, match="lower-case identifier"):
        Kernel(name="Bad-Name", num_inputs=1, params={}, infer=k.infer, flops=k.flops)
    assert default_bytes([s], [s, s], {}) == 36.0


# ---------------------------------------------------------------------------------------
# Matmul family
# ---------------------------------------------------------------------------------------

A2 = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
B2 = np.array([[5.0, 6.0], [7.0, 8.0]], dtype=np.float32)


def test_matmul_hand_values() -> None:
    np.testing.assert_array_equal(one("matmul", A2, B2), [[19, 22], [43, 50]])
    np.testing.assert_array_equal(one("matmul", A2, B2, transpose_b=True), [[17, 23], [39, 53]])
    np.testing.assert_array_equal(one("matmul", A2, B2, transpose_a=True), [[26, 30], [38, 44]])
    assert one("matmul", A2, B2).dtype == np.float32
    assert one("matmul", A2.astype(np.float16), B2.astype(np.float16)).dtype == np.float16
    # explicit dX / dW of y = a·b with dy = ones: dX = dy·bᵀ, dW = aᵀ·dy
    dy = np.ones((2, 2), dtype=np.float32)
    np.testing.assert_array_equal(one("matmul_dx", dy, B2), [[11, 15], [11, 15]])
    np.testing.assert_array_equal(one("matmul_dw", A2, dy), [[4, 4], [6, 6]])
    batched = one("batch_matmul", np.stack([A2, B2]), np.stack([B2, A2]))
    np.testing.assert_array_equal(batched, [[[19, 22], [43, 50]], [[23, 34], [31, 46]]])


def test_matmul_shape_errors_and_flops() -> None:
    mm = get_kernel("matmul")
    a, b = TensorSig((64, 128), "f32"), TensorSig((256, 128), "f32")
    assert mm.infer([a, b], {"transpose_b": True}) == [TensorSig((64, 256), "f32")]
    with pytest.raises(KernelError, match="^contraction dims differ: 128 vs 256$"):
        mm.infer([a, b], {})
    with pytest.raises(KernelError, match="rhs must have rank 2"):
        mm.infer([a, TensorSig((1, 128, 4), "f32")], {})
    with pytest.raises(KernelError, match="dtype mismatch: f32 vs f16"):
        mm.infer([a, TensorSig((128, 4), "f16")], {})
    with pytest.raises(KernelError, match="lhs must have a float dtype"):
        mm.infer([TensorSig((64, 128), "i32"), TensorSig((128, 4), "i32")], {})
    out = TensorSig((64, 256), "f32")
    assert mm.cost([a, b], [out], {"transpose_b": True}) == (
        2 * 64 * 128 * 256,
        (64 * 128 + 256 * 128 + 64 * 256) * 4,
    )
    bmm = get_kernel("batch_matmul")
    x, w = TensorSig((4, 8, 16), "f32"), TensorSig((4, 16, 32), "f32")
    (y,) = bmm.infer([x, w], {})
    assert y == TensorSig((4, 8, 32), "f32")
    assert bmm.flops([x, w], [y], {}) == 2 * 4 * 8 * 16 * 32
    with pytest.raises(KernelError, match="batch dims differ: 4 vs 3"):
        bmm.infer([x, TensorSig((3, 16, 32), "f32")], {})
    # dX / dW kernels cost as much as their forward matmul
    dy = TensorSig((4, 8, 32), "f32")
    assert get_kernel("batch_matmul_dx").flops([dy, w], [x], {}) == 2 * 4 * 8 * 16 * 32
    assert get_kernel("batch_matmul_dw").flops([x, dy], [w], {}) == 2 * 4 * 8 * 16 * 32


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize(("ta", "tb"), [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_gradients_match_finite_differences(batch: bool, ta: bool, tb: bool) -> None:
    pre = (2,) if batch else ()
    m, k, n = 3, 4, 2
    a = rand(*pre, *((k, m) if ta else (m, k)), seed=1)
    b = rand(*pre, *((n, k) if tb else (k, n)), seed=2)
    w = rand(*pre, m, n, seed=3)
    fwd = "batch_matmul" if batch else "matmul"
    p = {"transpose_a": ta, "transpose_b": tb}
    dx = one(f"{fwd}_dx", w, b, **p)
    dw = one(f"{fwd}_dw", a, w, **p)
    np.testing.assert_allclose(
        dx, numgrad(lambda x: float((w * one(fwd, x, b, **p)).sum()), a), rtol=1e-6, atol=1e-8
    )
    np.testing.assert_allclose(
        dw, numgrad(lambda x: float((w * one(fwd, a, x, **p)).sum()), b), rtol=1e-6, atol=1e-8
    )
    assert get_kernel(f"{fwd}_dx").infer([sig(w), sig(b)], p) == [sig(a)]
    assert get_kernel(f"{fwd}_dw").infer([sig(a), sig(w)], p) == [sig(b)]


# ---------------------------------------------------------------------------------------
# Element-wise and normalisation
# ---------------------------------------------------------------------------------------


def test_elementwise_broadcasting() -> None:
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    b = np.array([10.0, 20.0], dtype=np.float32)
    np.testing.assert_array_equal(one("add", x, b), [[11, 22], [13, 24]])
    np.testing.assert_array_equal(one("sub", x, b), [[-9, -18], [-7, -16]])
    np.testing.assert_array_equal(one("mul", x, b), [[10, 40], [30, 80]])
    np.testing.assert_array_equal(one("bias_add", x, b), [[11, 22], [13, 24]])
    np.testing.assert_array_equal(one("scale", x, alpha=0.5), [[0.5, 1], [1.5, 2]])
    add = get_kernel("add")
    assert add.infer([TensorSig((4, 1, 3), "f32"), TensorSig((5, 1), "f32")]) == [
        TensorSig((4, 5, 3), "f32")
    ]
    with pytest.raises(
        KernelError, match=r"shapes tensor<4x3xf32> and tensor<5xf32> are not broadcast-compatible"
    ):
        add.infer([TensorSig((4, 3), "f32"), TensorSig((5,), "f32")])
    with pytest.raises(KernelError, match="bias size 5 differs from last input dim 3"):
        get_kernel("bias_add").infer([TensorSig((4, 3), "f32"), TensorSig((5,), "f32")])
    assert add.flops([TensorSig((4, 3), "f32")] * 2, [TensorSig((4, 3), "f32")]) == 12


def test_layer_norm_hand_values() -> None:
    x = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    ones, zeros = np.ones(3, np.float32), np.zeros(3, np.float32)
    r = math.sqrt(1.5)  # (x - 2) / sqrt(var = 2/3)
    np.testing.assert_allclose(one("layer_norm", x, ones, zeros, eps=0.0), [[-r, 0, r]], rtol=1e-6)
    np.testing.assert_allclose(
        one("layer_norm", x, 2 * ones, ones, eps=0.0), [[1 - 2 * r, 1, 1 + 2 * r]], rtol=1e-6
    )
    # default eps = 1e-5 enters the variance
    expect = -1 / math.sqrt(2 / 3 + 1e-5)
    assert one("layer_norm", x, ones, zeros)[0, 0] == pytest.approx(expect, rel=1e-6)
    assert one("layer_norm", x, ones, zeros).dtype == np.float32
    with pytest.raises(KernelError, match="gamma size 4 differs from last input dim 3"):
        get_kernel("layer_norm").infer(
            [TensorSig((2, 3), "f32"), TensorSig((4,), "f32"), TensorSig((3,), "f32")]
        )


def test_layer_norm_gradients() -> None:
    x, gamma, beta, w = rand(3, 5, seed=4), rand(5, seed=5), rand(5, seed=6), rand(3, 5, seed=7)

    def loss(x_: np.ndarray, g_: np.ndarray, b_: np.ndarray) -> float:
        return float((w * one("layer_norm", x_, g_, b_)).sum())

    dx = one("layer_norm_dx", w, x, gamma)
    dgamma, dbeta = run("layer_norm_dw", w, x)
    np.testing.assert_allclose(dx, numgrad(lambda v: loss(v, gamma, beta), x), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        dgamma, numgrad(lambda v: loss(x, v, beta), gamma), rtol=1e-6, atol=1e-8
    )
    np.testing.assert_allclose(
        dbeta, numgrad(lambda v: loss(x, gamma, v), beta), rtol=1e-6, atol=1e-8
    )
    assert get_kernel("layer_norm_dw").infer([sig(w), sig(x)]) == [TensorSig((5,), "f64")] * 2


def test_softmax_hand_values_and_gradient() -> None:
    np.testing.assert_allclose(one("softmax", np.array([0.0, math.log(2.0)])), [1 / 3, 2 / 3])
    scores = np.array([[1.0, 5.0], [0.0, math.log(3.0)]], dtype=np.float32)
    causal = one("softmax", scores, causal=True)
    np.testing.assert_allclose(causal, [[1, 0], [0.25, 0.75]], rtol=1e-6)
    assert causal.dtype == np.float32
    cols = one("softmax", np.array([[0.0, 1.0], [0.0, 1.0]]), axis=0)
    np.testing.assert_allclose(cols, [[0.5, 0.5], [0.5, 0.5]])
    with pytest.raises(KernelError, match="causal softmax must normalise the last axis"):
        get_kernel("softmax").infer([TensorSig((2, 2), "f32")], {"axis": 0, "causal": True})
    with pytest.raises(KernelError, match="axis 2 out of range for rank 2"):
        get_kernel("softmax").infer([TensorSig((2, 2), "f32")], {"axis": 2})
    x, w = rand(2, 4, seed=8), rand(2, 4, seed=9)
    y = one("softmax", x)
    dx = one("softmax_dx", w, y)
    np.testing.assert_allclose(
        dx, numgrad(lambda v: float((w * one("softmax", v)).sum()), x), rtol=1e-6, atol=1e-9
    )


def test_gelu_hand_values_and_gradient() -> None:
    y = one("gelu", np.array([0.0, 1.0, -1.0, 2.0], dtype=np.float32))
    np.testing.assert_allclose(y, [0.0, 0.8411920, -0.1588080, 1.9545977], rtol=1e-6, atol=1e-7)
    assert y.dtype == np.float32
    x, w = rand(7, seed=10), rand(7, seed=11)
    np.testing.assert_allclose(
        one("gelu_dx", w, x),
        numgrad(lambda v: float((w * one("gelu", v)).sum()), x),
        rtol=1e-6,
        atol=1e-9,
    )
    # gelu'(0) = 0.5
    assert one("gelu_dx", np.array([1.0]), np.array([0.0]))[0] == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------
# Embedding, layout, reductions
# ---------------------------------------------------------------------------------------


def test_embedding_and_scatter_add() -> None:
    table = np.array([[0.0, 1.0], [10.0, 11.0], [20.0, 21.0]], dtype=np.float32)
    ids = np.array([2, 0, 2], dtype=np.int32)
    np.testing.assert_array_equal(one("embedding", table, ids), [[20, 21], [0, 1], [20, 21]])
    dy = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=np.float32)
    np.testing.assert_array_equal(
        one("embedding_dw", dy, ids, num_embeddings=3), [[3, 4], [0, 0], [6, 8]]
    )
    t64, w = rand(3, 2, seed=12), rand(3, 2, seed=13)
    np.testing.assert_allclose(
        one("embedding_dw", w, ids, num_embeddings=3),
        numgrad(lambda v: float((w * one("embedding", v, ids)).sum()), t64),
        rtol=1e-6,
    )
    with pytest.raises(KernelError, match=r"ids out of range \[0, 3\)"):
        one("embedding", table, np.array([3]))
    with pytest.raises(KernelError, match="ids must have dtype i32 or i64"):
        get_kernel("embedding").infer([sig(table), TensorSig((3,), "f32")])
    ek = get_kernel("embedding")
    (out,) = ek.infer([sig(table), sig(ids)])
    assert out == TensorSig((3, 2), "f32")
    assert ek.bytes_moved([sig(table), sig(ids)], [out]) == 12 + 2 * 24  # only gathered rows


def test_layout_kernels() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert one("reshape", x, shape=(6, -1)).shape == (6, 4)
    np.testing.assert_array_equal(one("transpose", x, perm=(2, 0, 1))[3, 1, 2], x[1, 2, 3])
    parts = run("split", x, axis=2, num=2)
    assert [p.shape for p in parts] == [(2, 3, 2), (2, 3, 2)]
    np.testing.assert_array_equal(one("concat", *parts, axis=2), x)
    np.testing.assert_array_equal(one("concat", x[:1], x[1:]), x)
    # uneven slices: the sizes are given, concat takes the slices back whatever their sizes
    uneven = run("split", x, axis=2, num=3, sizes=(2, 1, 1))
    assert [p.shape for p in uneven] == [(2, 3, 2), (2, 3, 1), (2, 3, 1)]
    np.testing.assert_array_equal(uneven[1], x[:, :, 2:3])
    np.testing.assert_array_equal(uneven[2], x[:, :, 3:])
    np.testing.assert_array_equal(one("concat", *uneven, axis=2), x)
    (s0, s1) = get_kernel("split").infer([sig(x)], {"axis": 1, "num": 2, "sizes": (1, 2)})
    assert (s0.shape, s1.shape) == ((2, 1, 4), (2, 2, 4))
    assert get_kernel("concat").num_inputs is None
    with pytest.raises(KernelError, match=r"cannot reshape 24 elements into \(5, -1\)"):
        get_kernel("reshape").infer([sig(x)], {"shape": (5, -1)})
    with pytest.raises(KernelError, match=r"perm \(0, 0, 1\) is not a permutation"):
        get_kernel("transpose").infer([sig(x)], {"perm": (0, 0, 1)})
    with pytest.raises(
        KernelError, match="cannot split dim 3 of tensor<2x3x4xf32> into 2 equal parts"
    ):
        get_kernel("split").infer([sig(x)], {"axis": 1, "num": 2})
    with pytest.raises(KernelError, match=r"split sizes \(2, 2\) sum to 4, not to dim 3 of"):
        get_kernel("split").infer([sig(x)], {"axis": 1, "num": 2, "sizes": (2, 2)})
    with pytest.raises(KernelError, match=r"split sizes \(3, 0\) must all be >= 1"):
        get_kernel("split").infer([sig(x)], {"axis": 1, "num": 2, "sizes": (3, 0)})
    with pytest.raises(KernelError, match=r"split sizes \(1, 2\) give 2 parts, not num = 3"):
        get_kernel("split").infer([sig(x)], {"axis": 1, "num": 3, "sizes": (1, 2)})
    with pytest.raises(KernelError, match="input #1 shape tensor<2x3x5xf32> does not match"):
        get_kernel("concat").infer([sig(x), TensorSig((2, 3, 5), "f32")])


def test_reduce_sum() -> None:
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    np.testing.assert_array_equal(one("reduce_sum", x), [4, 6])
    np.testing.assert_array_equal(one("reduce_sum", x, axes=(1,), keepdims=True), [[3], [7]])
    total = one("reduce_sum", x, axes=(0, 1))
    assert total.shape == ()
    assert total == 10
    rk = get_kernel("reduce_sum")
    assert rk.infer([sig(x)], {"axes": (-1, 0)}) == [TensorSig((), "f32")]
    with pytest.raises(KernelError, match="repeated axis"):
        rk.infer([sig(x)], {"axes": (1, -1)})


# ---------------------------------------------------------------------------------------
# Loss
# ---------------------------------------------------------------------------------------


def test_cross_entropy_hand_values_and_gradient() -> None:
    uniform = one("cross_entropy", np.zeros((2, 4), np.float32), np.array([1, 3], np.int64))
    assert uniform.shape == ()
    assert uniform.dtype == np.float32
    assert float(uniform) == pytest.approx(math.log(4), rel=1e-6)
    logits = np.array([[0.0, math.log(3.0)]], dtype=np.float32)  # p = [1/4, 3/4]
    assert float(one("cross_entropy", logits, np.array([1]))) == pytest.approx(
        -math.log(0.75), rel=1e-6
    )
    np.testing.assert_allclose(
        one("cross_entropy_dx", logits, np.array([1])), [[0.25, -0.25]], rtol=1e-6
    )
    ce = get_kernel("cross_entropy")
    assert ce.infer([TensorSig((8, 50), "f16"), TensorSig((8,), "i32")]) == [TensorSig((), "f32")]
    with pytest.raises(KernelError, match="token dims differ: 8 vs 7"):
        ce.infer([TensorSig((8, 50), "f32"), TensorSig((7,), "i32")])
    x, labels = rand(3, 5, seed=14), np.array([4, 0, 2])
    np.testing.assert_allclose(
        one("cross_entropy_dx", x, labels),
        numgrad(lambda v: float(one("cross_entropy", v, labels)), x),
        rtol=1e-6,
        atol=1e-9,
    )


# ---------------------------------------------------------------------------------------
# Mixture of experts
# ---------------------------------------------------------------------------------------

E1 = 1 / (1 + math.exp(-1.0))  # softmax([1, 0])[0]


def test_moe_gate_switch_positions_and_capacity_drop() -> None:
    # experts by token: 0, 0, 1, 0, 1 -> token 3 is the third for expert 0 and is dropped
    logits = np.array([[1, 0], [2, 0], [0, 1], [3, 0], [0, 5]], dtype=np.float32)
    combine, dispatch = run("moe_gate", logits, gate="switch", capacity=2)
    assert combine.shape == dispatch.shape == (5, 2, 2)
    assert combine.dtype == np.float32
    kept = {(0, 0, 0), (1, 0, 1), (2, 1, 0), (4, 1, 1)}
    expect = np.zeros((5, 2, 2))
    for s, e, c in kept:
        expect[s, e, c] = 1
    np.testing.assert_array_equal(dispatch, expect)
    assert combine[0, 0, 0] == pytest.approx(E1, rel=1e-6)
    assert combine[1, 0, 1] == pytest.approx(1 / (1 + math.exp(-2)), rel=1e-6)
    assert combine[4, 1, 1] == pytest.approx(1 / (1 + math.exp(-5)), rel=1e-6)
    assert combine[3].sum() == 0  # dropped
    np.testing.assert_array_equal(combine > 0, dispatch > 0)


def test_moe_gate_top2_gshard_positions() -> None:
    probs = np.array([[0.5, 0.3, 0.2], [0.6, 0.1, 0.3], [0.7, 0.2, 0.1], [0.1, 0.5, 0.4]])
    combine, dispatch = run("moe_gate", np.log(probs), gate="top2", capacity=2)
    # first choices: e0 <- t0 (slot 0), t1 (slot 1), t2 dropped; e1 <- t3 (slot 0)
    # second choices start after the kept first choices: t0 -> e1 slot 1, t1 -> e2 slot 0,
    # t2 -> e1 slot 2 (dropped), t3 -> e2 slot 1
    expect = np.zeros((4, 3, 2))
    expect[0, 0, 0], expect[0, 1, 1] = 0.5 / 0.8, 0.3 / 0.8
    expect[1, 0, 1], expect[1, 2, 0] = 0.6 / 0.9, 0.3 / 0.9
    expect[3, 1, 0], expect[3, 2, 1] = 0.5 / 0.9, 0.4 / 0.9
    np.testing.assert_allclose(combine, expect, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(dispatch, expect > 0)
    with pytest.raises(KernelError, match="capacity must be >= 1"):
        get_kernel("moe_gate").infer([TensorSig((4, 3), "f32")], {"capacity": 0})
    with pytest.raises(KernelError, match="top2 gating needs at least 2 experts"):
        get_kernel("moe_gate").infer([TensorSig((4, 1), "f32")], {"capacity": 2, "gate": "top2"})


@pytest.mark.parametrize("gate", ["switch", "top2"])
def test_moe_gate_dx_matches_finite_differences(gate: str) -> None:
    logits = 2 * rand(8, 3, seed=15)  # capacity 3 drops some tokens
    w = rand(8, 3, 3, seed=16)
    p = {"gate": gate, "capacity": 3}
    combine, dispatch = run("moe_gate", logits, **p)
    assert dispatch.sum() < (2 if gate == "top2" else 1) * 8  # some tokens were dropped
    analytic = one("moe_gate_dx", w, logits, **p)
    numeric = numgrad(lambda v: float((w * run("moe_gate", v, **p)[0]).sum()), logits)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


def test_moe_dispatch_combine_hand_values() -> None:
    logits = np.array([[1, 0], [2, 0], [0, 1], [3, 0], [0, 5]], dtype=np.float64)
    combine, dispatch = run("moe_gate", logits, capacity=2)
    x = np.arange(10, dtype=np.float64).reshape(5, 2)  # token s = [2s, 2s+1]
    buf = one("moe_dispatch", x, dispatch)
    np.testing.assert_array_equal(buf, [[[0, 1], [2, 3]], [[4, 5], [8, 9]]])
    y = one("moe_combine", buf, combine)
    np.testing.assert_allclose(y[0], E1 * x[0])
    np.testing.assert_array_equal(y[3], [0, 0])  # dropped token contributes nothing
    np.testing.assert_allclose(y[4], 1 / (1 + math.exp(-5)) * x[4])
    size = {"s": 5, "e": 2, "c": 2, "m": 2}
    k = get_kernel("moe_dispatch")
    assert k.flops([sig(x), sig(dispatch)], [sig(buf)]) == 2 * size["e"] * size["c"] * size["m"]
    with pytest.raises(KernelError, match="token dims differ: 5 vs 4"):
        k.infer([sig(x), TensorSig((4, 2, 2), "f64")])


def test_moe_backward_kernels_match_finite_differences() -> None:
    combine, dispatch = run("moe_gate", rand(6, 2, seed=17), capacity=2)
    x, eo = rand(6, 3, seed=18), rand(2, 2, 3, seed=19)
    w_buf, w_y = rand(2, 2, 3, seed=20), rand(6, 3, seed=21)
    np.testing.assert_allclose(
        one("moe_dispatch_dx", w_buf, dispatch),
        numgrad(lambda v: float((w_buf * one("moe_dispatch", v, dispatch)).sum()), x),
        rtol=1e-6, atol=1e-9,
    )  # fmt: skip
    np.testing.assert_allclose(
        one("moe_combine_dx", w_y, combine),
        numgrad(lambda v: float((w_y * one("moe_combine", v, combine)).sum()), eo),
        rtol=1e-6, atol=1e-9,
    )  # fmt: skip
    np.testing.assert_allclose(
        one("moe_combine_dw", w_y, eo),
        numgrad(lambda v: float((w_y * one("moe_combine", eo, v)).sum()), combine),
        rtol=1e-6, atol=1e-9,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------
# Optimizer and constants
# ---------------------------------------------------------------------------------------


def test_sgd_and_adam_one_step() -> None:
    p = np.array([1.0, 2.0], dtype=np.float32)
    g = np.array([0.5, -1.0], dtype=np.float32)
    np.testing.assert_allclose(one("sgd_update", p, g, lr=0.1), [0.95, 2.1], rtol=1e-6)
    zeros = np.zeros(2, np.float32)
    p1, m1, v1 = run("adam_update", p, g, zeros, zeros, lr=0.1)
    # step 1: m = 0.1 g, v = 0.001 g², bias-corrected m̂ = g, v̂ = g² -> p -= lr·g/(|g| + eps)
    np.testing.assert_allclose(m1, [0.05, -0.1], rtol=1e-6)
    np.testing.assert_allclose(v1, [0.00025, 0.001], rtol=1e-6)
    np.testing.assert_allclose(p1, [0.9, 2.1], rtol=1e-6)
    assert p1.dtype == m1.dtype == v1.dtype == np.float32
    # step 2 from (m1, v1) with the same gradient: m̂ = g, v̂ = g² again
    p2, m2, v2 = run("adam_update", p1, g, m1, v1, lr=0.1, step=2)
    np.testing.assert_allclose(m2, 0.9 * m1 + 0.1 * g, rtol=1e-6)
    np.testing.assert_allclose(p2, [0.8, 2.2], rtol=1e-5)
    with pytest.raises(KernelError, match="grad shape tensor<3xf32> differs from param shape"):
        get_kernel("sgd_update").infer([TensorSig((2,), "f32"), TensorSig((3,), "f32")])


def test_adam_on_f16_computes_in_f32() -> None:
    # in f16 itself eps = 1e-8 rounds to 0 and g² = 1e-8 underflows: the update was 0 / 0
    p = np.array([1.0, -2.0], dtype=np.float16)
    g = np.array([1e-4, 0.0], dtype=np.float16)
    zeros = np.zeros(2, np.float16)
    p1, m1, v1 = run("adam_update", p, g, zeros, zeros, lr=0.1)
    assert p1.dtype == m1.dtype == v1.dtype == np.float16
    assert np.isfinite(p1).all()
    # m̂ = g, v̂ = g² in f32 (1e-8 as f32): p -= 0.1 · g / (|g| + eps), about 0.1 for g != 0
    np.testing.assert_allclose(p1.astype(np.float64), [0.9, -2.0], rtol=2e-3)
    # the moments are the f32 ones rounded to f16 (g² itself is below f16's range)
    assert m1.tolist() == [np.float16(0.1 * np.float32(1e-4)), 0.0]
    assert v1.tolist() == [0.0, 0.0]


def test_fill_and_zeros() -> None:
    f = one("fill", shape=(2, 3), dtype="i32", value=7.0)
    assert f.dtype == np.int32
    assert f.tolist() == [[7, 7, 7], [7, 7, 7]]
    z = one("zeros", shape=(4,))
    assert z.dtype == np.float32
    assert not z.any()
    assert get_kernel("zeros").infer([], {"shape": ()}) == [TensorSig((), "f32")]
    assert get_kernel("fill").cost([], [TensorSig((2, 3), "f64")], {"shape": (2, 3)}) == (0, 48)


# ---------------------------------------------------------------------------------------
# Every kernel: numpy outputs agree with `infer`; partition rules compute the same values
# ---------------------------------------------------------------------------------------


def _samples() -> dict[str, tuple[list[np.ndarray], dict[str, Any]]]:
    """One small f64 example per kernel (even sizes, so every axis can be halved)."""
    x, y = rand(4, 6, seed=30), rand(4, 6, seed=31)
    v6 = rand(6, seed=32)
    b3 = rand(2, 4, 6, seed=33)
    w3 = rand(2, 6, 2, seed=34)
    dy3 = rand(2, 4, 2, seed=35)
    ids = np.array([[1, 3], [0, 3]], dtype=np.int64)
    logits = rand(4, 2, seed=36)
    combine, dispatch = run("moe_gate", logits, gate="top2", capacity=4)
    eo = rand(2, 4, 6, seed=37)
    return {
        "matmul": ([x, rand(6, 2, seed=40)], {}),
        "matmul_dx": ([rand(4, 2, seed=41), rand(2, 6, seed=42)], {"transpose_b": True}),
        "matmul_dw": ([rand(6, 4, seed=43), rand(4, 2, seed=44)], {"transpose_a": True}),
        "batch_matmul": ([b3, w3], {}),
        "batch_matmul_dx": ([dy3, w3], {}),
        "batch_matmul_dw": ([b3, dy3], {}),
        "add": ([x, v6], {}),
        "sub": ([x, y], {}),
        "mul": ([rand(4, 1, seed=45), v6], {}),
        "bias_add": ([x, v6], {}),
        "scale": ([x], {"alpha": 0.5}),
        "layer_norm": ([x, v6, rand(6, seed=46)], {}),
        "layer_norm_dx": ([y, x, v6], {}),
        "layer_norm_dw": ([y, x], {}),
        "softmax": ([b3], {"causal": False}),
        "softmax_dx": ([y, one("softmax", x)], {}),
        "gelu": ([x], {}),
        "gelu_dx": ([y, x], {}),
        "embedding": ([rand(4, 6, seed=47), ids], {}),
        "embedding_dw": ([rand(2, 2, 6, seed=48), ids], {"num_embeddings": 4}),
        "reshape": ([b3], {"shape": (8, 6)}),
        "transpose": ([b3], {"perm": (2, 0, 1)}),
        "split": ([b3], {"axis": 1, "num": 2}),
        "concat": ([x, y], {"axis": 1}),
        "reduce_sum": ([b3], {"axes": (1,)}),
        "cross_entropy": ([x, np.array([0, 5, 2, 2])], {}),
        "cross_entropy_dx": ([x, np.array([0, 5, 2, 2])], {}),
        "moe_gate": ([logits], {"gate": "top2", "capacity": 4}),
        "moe_gate_dx": ([rand(4, 2, 4, seed=49), logits], {"gate": "top2", "capacity": 4}),
        "moe_gate_window": ([logits, np.array([1, 0], dtype=np.int64)], {"capacity": 3}),
        "moe_gate_window_dx": (
            [rand(4, 2, 3, seed=38), logits, np.array([1, 0], dtype=np.int64)],
            {"capacity": 3},
        ),  # fmt: skip
        "moe_dispatch": ([x, dispatch], {}),
        "moe_combine": ([eo, combine], {}),
        "moe_dispatch_dx": ([eo, dispatch], {}),
        "moe_combine_dx": ([x, combine], {}),
        "moe_combine_dw": ([x, eo], {}),
        "sgd_update": ([x, y], {"lr": 0.1}),
        "adam_update": ([x, y, 0.1 * x, y * y], {"step": 3}),
        "fill": ([], {"shape": (2, 4), "dtype": "f64", "value": 1.5}),
        "zeros": ([], {"shape": (2, 4), "dtype": "f64"}),
    }


SAMPLES = _samples()


def test_every_kernel_has_a_sample() -> None:
    assert set(SAMPLES) == set(KERNELS)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_numpy_agrees_with_infer(name: str) -> None:
    arrays, params = SAMPLES[name]
    kernel = get_kernel(name)
    outs = run_kernel(kernel, arrays, params)
    expected = kernel.infer([sig(a) for a in arrays], params)
    assert [sig(o) for o in outs] == expected
    again = run_kernel(kernel, [a.copy() for a in arrays], params)  # deterministic
    assert all(a.tobytes() == b.tobytes() for a, b in zip(outs, again, strict=True))
    flops, nbytes = kernel.cost([sig(a) for a in arrays], expected, params)
    assert flops >= 0
    assert nbytes > 0


def _part(a: np.ndarray, axis: Any, k: int, n: int) -> np.ndarray:
    return a if axis is None else np.split(a, n, axis=axis)[k]


EXTRA_PARTITION_CASES = [
    ("softmax", [rand(2, 4, 4, seed=50)], {"causal": True}),
    ("softmax", [rand(4, 6, seed=51)], {"axis": 0}),
    ("reshape", [rand(2, 4, 6, seed=52)], {"shape": (4, 12)}),
    ("reshape", [rand(4, 1, 6, seed=53)], {"shape": (2, 2, 6)}),
    ("reduce_sum", [rand(2, 4, 6, seed=54)], {"axes": (0, 2), "keepdims": True}),
    (
        "matmul",
        [rand(6, 4, seed=55), rand(2, 6, seed=56)],
        {"transpose_a": True, "transpose_b": True},
    ),
    (
        "batch_matmul",
        [rand(2, 6, 4, seed=57), rand(2, 2, 6, seed=58)],
        {"transpose_a": True, "transpose_b": True},
    ),
    ("split", [rand(4, 6, seed=59)], {"axis": 0, "num": 2}),
    ("split", [rand(5, 6, seed=62)], {"axis": 0, "num": 2, "sizes": (3, 2)}),
    ("add", [rand(2, 1, 6, seed=60), rand(4, 1, seed=61)], {}),
]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_partition_rules_compute_the_same_values(name: str) -> None:
    arrays, params = SAMPLES[name]
    _check_partitions(name, arrays, params)


@pytest.mark.parametrize(("name", "arrays", "params"), EXTRA_PARTITION_CASES)
def test_partition_rules_more_cases(
    name: str, arrays: list[np.ndarray], params: dict[str, Any]
) -> None:
    combos = _check_partitions(name, arrays, params)
    assert len(combos) >= 2


def _check_partitions(name: str, arrays: list[np.ndarray], params: dict[str, Any]) -> list[Any]:
    """Run every allowed split with 2 parts and reassemble: concat, sum (PARTIAL) or whole."""
    kernel = get_kernel(name)
    ins = [sig(a) for a in arrays]
    whole = run_kernel(kernel, arrays, params)
    outs = [sig(o) for o in whole]
    combos = kernel.allowed_partitions(ins, outs, params)
    assert combos[0] == ((None,) * len(ins), (None,) * len(outs))
    for in_axes, out_axes in combos[1:]:
        parts = []
        for k in range(2):
            p = dict(params)
            if "shape" in p:  # shape-carrying kernels take the part's output shape
                p["shape"] = _part(whole[0], out_axes[0], k, 2).shape
            parts.append(
                run_kernel(
                    kernel, [_part(a, ax, k, 2) for a, ax in zip(arrays, in_axes, strict=True)], p
                )
            )
        for i, axis in enumerate(out_axes):
            if axis == PARTIAL:
                got = parts[0][i] + parts[1][i]
            elif axis is None:
                got = parts[0][i]
            else:
                got = np.concatenate([parts[0][i], parts[1][i]], axis=axis)
            np.testing.assert_allclose(
                got, whole[i], rtol=1e-10, atol=1e-12, err_msg=f"{name} {in_axes}->{out_axes}"
            )
    return combos


def test_partition_rule_examples() -> None:
    mm = get_kernel("matmul")
    a, b, y = TensorSig((64, 128), "f32"), TensorSig((128, 256), "f32"), TensorSig((64, 256), "f32")
    assert mm.allowed_partitions([a, b], [y]) == [
        ((None, None), (None,)),
        ((0, None), (0,)),  # rows of a
        ((1, 0), (PARTIAL,)),  # contraction dim: partial sums
        ((None, 1), (1,)),  # columns of b
    ]
    sm = get_kernel("softmax")
    s = TensorSig((8, 1, 16), "f32")
    assert sm.allowed_partitions([s], [s]) == [((None,), (None,)), ((0,), (0,))]
    rs = get_kernel("reshape")
    src, dst = TensorSig((6, 4), "f32"), TensorSig((24,), "f32")
    assert rs.allowed_partitions([src], [dst], {"shape": (24,)}) == [
        ((None,), (None,)),
        ((0,), (0,)),
    ]
    causal = TensorSig((2, 4, 4), "f32")
    assert sm.allowed_partitions([causal], [causal], {"causal": True}) == [
        ((None,), (None,)),
        ((0,), (0,)),
    ]
    assert get_kernel("moe_gate").allowed_partitions(
        [TensorSig((8, 4), "f32")], [s, s], {"capacity": 1}
    ) == [((None,), (None, None))]


# ---- reference implementations: one per kernel, written against an array namespace ------------


def test_every_kernel_has_exactly_one_implementation() -> None:
    from lancet_mlir.runtime.kernels.base import implements

    assert set(IMPLEMENTATIONS) == set(KERNELS)
    with pytest.raises(KernelError, match="kernel 'add' already has an implementation"):
        implements("add")(IMPLEMENTATIONS["add"])


class SpyNamespace:
    """An array namespace that forwards to numpy and records which names a kernel used."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        self.used.add(name)
        return getattr(np, name)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_implementations_use_the_given_namespace(name: str) -> None:
    """Running with another namespace gives bit-identical results and goes through it: the
    CUDA back-end passes CuPy the same way."""
    arrays, params = SAMPLES[name]
    spy = SpyNamespace()
    got = run_kernel(name, arrays, params, xp=spy)
    want = run_kernel(name, arrays, params)
    assert spy.used
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]


def test_implementation_modules_never_import_numpy() -> None:
    """Only `base` (dtype objects) imports numpy; the kernels use their `xp` argument."""
    from pathlib import Path

    import lancet_mlir.runtime.kernels as package

    folder = Path(package.__file__).parent
    importing = sorted(
        p.name for p in folder.glob("*.py") if "import numpy" in p.read_text(encoding="utf-8")
    )
    assert importing == ["__init__.py", "base.py"]


def test_kernel_runner_validates_once() -> None:
    with pytest.raises(KernelError, match="unknown parameter 'bogus'"):
        kernel_runner("scale", {"bogus": 1})
    run2 = kernel_runner("scale", {"alpha": 2.0})
    np.testing.assert_array_equal(run2([np.ones(2, dtype=np.float32)])[0], [2.0, 2.0])
    with pytest.raises(KernelError, match="expected 1 inputs, got 2"):
        run2([np.ones(2), np.ones(2)])


def test_zero_size_edges_agree_between_spec_and_implementation() -> None:
    """Zero-size tensors are legal types: a kernel either rejects them in `infer` (verifier
    error) or runs them to the inferred shape. Before the fix softmax / cross_entropy over an
    empty axis passed `infer` and then failed inside numpy, and embedding_dw of a zero-width
    gradient failed in a reshape."""
    ids = np.array([[1, 3], [0, 3]], dtype=np.int64)
    dy = np.zeros((2, 2, 0))
    (dw,) = run_kernel(get_kernel("embedding_dw"), [dy, ids], {"num_embeddings": 4})
    assert (
        sig(dw) == get_kernel("embedding_dw").infer([sig(dy), sig(ids)], {"num_embeddings": 4})[0]
    )
    assert dw.shape == (4, 0)
    with pytest.raises(KernelError, match=r"softmax over an empty axis of tensor<2x3x0xf64>"):
        get_kernel("softmax").infer([TensorSig((2, 3, 0), "f64")])
    get_kernel("softmax").infer([TensorSig((0, 3), "f64")])  # empty rows are fine
    labels = TensorSig((3,), "i64")
    for name in ("cross_entropy", "cross_entropy_dx"):
        with pytest.raises(KernelError, match="at least one token and one class"):
            get_kernel(name).infer([TensorSig((3, 0), "f32"), labels])
