"""Element-wise arithmetic, activations and optimizer updates."""

from __future__ import annotations

import math
from typing import Any

from lancet_mlir.runtime.kernels.base import (
    Array,
    ArrayNamespace,
    as_dtype,
    cast,
    dtype_of,
    implements,
    implements_into,
)

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


def _binary(name: str, ufunc: str) -> None:
    @implements(name)
    def run(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
        dtype = dtype_of(xs[0])
        fn = getattr(xp, ufunc)
        return cast(xp, [fn(as_dtype(xp, xs[0], dtype), as_dtype(xp, xs[1], dtype))], dtype)

    @implements_into(name)
    def run_into(
        xp: ArrayNamespace, xs: list[Array], p: dict[str, Any], outs: list[Array | None]
    ) -> list[Array]:
        dtype = dtype_of(xs[0])
        fn = getattr(xp, ufunc)
        return [fn(as_dtype(xp, xs[0], dtype), as_dtype(xp, xs[1], dtype), out=outs[0])]


_binary("add", "add")
_binary("sub", "subtract")
_binary("mul", "multiply")


@implements("bias_add")
def _bias_add(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    return cast(xp, [xs[0] + xs[1]], dtype_of(xs[0]))


@implements_into("bias_add")
def _bias_add_into(
    xp: ArrayNamespace, xs: list[Array], p: dict[str, Any], outs: list[Array | None]
) -> list[Array]:
    return [xp.add(xs[0], xs[1], out=outs[0])]


@implements("scale")
def _scale(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    return cast(xp, [xs[0] * xs[0].dtype.type(p["alpha"])], dtype_of(xs[0]))


@implements("gelu")
def _gelu(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    x = xs[0]
    t = xp.tanh(x.dtype.type(_GELU_C) * (x + x.dtype.type(_GELU_A) * x**3))
    return cast(xp, [x.dtype.type(0.5) * x * (1 + t)], dtype_of(x))


@implements_into("gelu")
def _gelu_into(
    xp: ArrayNamespace, xs: list[Array], p: dict[str, Any], outs: list[Array | None]
) -> list[Array]:
    x = xs[0]
    t = xp.tanh(x.dtype.type(_GELU_C) * (x + x.dtype.type(_GELU_A) * x**3))
    return [xp.multiply(x.dtype.type(0.5) * x, 1 + t, out=outs[0])]


@implements("gelu_dx")
def _gelu_dx(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    dy, x = xs
    c, a, half = (x.dtype.type(v) for v in (_GELU_C, _GELU_A, 0.5))
    t = xp.tanh(c * (x + a * x**3))
    grad = half * (1 + t) + half * x * (1 - t * t) * c * (1 + 3 * a * x * x)
    return cast(xp, [dy * grad], dtype_of(x))


@implements("sgd_update")
def _sgd(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    param, grad = xs
    return cast(xp, [param - param.dtype.type(p["lr"]) * grad], dtype_of(param))


@implements("adam_update")
def _adam(xp: ArrayNamespace, xs: list[Array], p: dict[str, Any]) -> list[Array]:
    """Adam in at least f32 arithmetic, results in the parameter's dtype: as the fused GPU
    optimizers compute an f16 step (in f16 itself `eps = 1e-8` is 0 and `grad * grad`
    underflows, so the update is 0 / 0)."""
    dtype = dtype_of(xs[0])
    wide = xp.promote_types(xs[0].dtype, xp.float32)
    param, grad, m, v = (xp.asarray(x, dtype=wide) for x in xs)
    f = param.dtype.type
    b1, b2, step = p["beta1"], p["beta2"], p["step"]
    m_new = f(b1) * m + f(1 - b1) * grad
    v_new = f(b2) * v + f(1 - b2) * grad * grad
    m_hat = m_new / f(1 - b1**step)  # bias correction
    v_hat = v_new / f(1 - b2**step)
    param_new = param - f(p["lr"]) * m_hat / (xp.sqrt(v_hat) + f(p["eps"]))
    return cast(xp, [param_new, m_new, v_new], dtype)
