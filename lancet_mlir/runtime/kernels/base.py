"""Reference-implementation core: the array-namespace protocol, dtype conversion, registry.

An implementation is `fn(xp, inputs, params) -> outputs` where `xp` is an array namespace
(the `numpy` module, or `cupy` for the CUDA back-end: CuPy implements the NumPy API on the
GPU), `inputs` are arrays of that namespace in the op's compute dtype and `params` are the
kernel's parameters with defaults filled in. Implementations create and combine arrays only
through `xp` (never `import numpy`), so one definition serves `lancet-run` and the GPU
measurements; what is timed is what the reference executor computes.

numpy has no bfloat16: bf16 kernels compute in float32 (`numpy_dtype("bf16")`); every other
dtype computes in its own numpy type (CuPy uses the same dtype objects).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lancet_mlir.dialects.dtypes import NUMPY_DTYPES
from lancet_mlir.dialects.kernels import DType, KernelError, dtype_bytes

Array = Any
"""An array of the namespace in use (numpy.ndarray or cupy.ndarray)."""

ArrayNamespace = Any
"""An array namespace: the `numpy` or `cupy` module."""

Impl = Callable[[ArrayNamespace, list[Array], dict[str, Any]], list[Array]]
"""A reference implementation: (xp, input arrays, resolved params) -> output arrays."""

IMPLEMENTATIONS: dict[str, Impl] = {}
"""Reference implementation of every kernel, by kernel name."""

IntoImpl = Callable[[ArrayNamespace, list[Array], dict[str, Any], list[Array | None]], list[Array]]
"""A destination-passing implementation: (xp, inputs, params, destinations) -> outputs, result
j written into destinations[j] (a contiguous array of its shape and compute dtype) with the
namespace's `out=` where it is not None, and returned as that array."""

INTO: dict[str, IntoImpl] = {}
"""The kernels whose last step can write into a given array (`out=`), by kernel name; the
others are computed and copied into a destination (`kernels.kernel_runner_into`)."""


def implements_into(name: str) -> Callable[[IntoImpl], IntoImpl]:
    """Decorator registering the destination-passing implementation of kernel `name`."""

    def register(fn: IntoImpl) -> IntoImpl:
        if name in INTO:
            raise KernelError(f"kernel '{name}' already has a destination-passing implementation")
        INTO[name] = fn
        return fn

    return register


def implements(name: str) -> Callable[[Impl], Impl]:
    """Decorator registering the reference implementation of kernel `name`."""

    def register(fn: Impl) -> Impl:
        if name in IMPLEMENTATIONS:
            raise KernelError(f"kernel '{name}' already has an implementation")
        IMPLEMENTATIONS[name] = fn
        return fn

    return register


def numpy_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype a kernel of `dtype` computes in (bf16 computes in float32)."""
    dtype_bytes(dtype)  # validates the name
    return np.dtype(NUMPY_DTYPES[dtype])


def dtype_of(a: Array) -> DType:
    """The registry dtype that an input array represents (its compute dtype)."""
    for name in ("f16", "f32", "f64", "i32", "i64", "i1"):
        if a.dtype == NUMPY_DTYPES[name]:
            return name
    raise KernelError(f"unsupported array dtype {a.dtype}")


def contiguous(xp: ArrayNamespace, a: Array, dtype: np.dtype | None = None) -> Array:
    """`a` as a C-contiguous array (xp.ascontiguousarray would turn rank 0 into rank 1)."""
    out = xp.asarray(a, dtype=dtype)
    return out if out.flags.c_contiguous else out.copy(order="C")


def cast(xp: ArrayNamespace, arrays: Sequence[Array], dtype: DType) -> list[Array]:
    """Outputs as contiguous arrays of the op's compute dtype."""
    nd = numpy_dtype(dtype)
    return [contiguous(xp, a, nd) for a in arrays]


def as_dtype(xp: ArrayNamespace, a: Array, dtype: DType) -> Array:
    """Input converted (if needed) to the dtype the kernel computes in."""
    return xp.asarray(a, dtype=numpy_dtype(dtype))


def check_ids(xp: ArrayNamespace, ids: Array, bound: int) -> Array:
    """`ids` as int64; KernelError when one lies outside [0, bound)."""
    flat = xp.asarray(ids).astype(xp.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= bound):
        raise KernelError(f"ids out of range [0, {bound}): min {flat.min()}, max {flat.max()}")
    return flat


def log_softmax(xp: ArrayNamespace, x: Array) -> Array:
    """log(softmax(x)) over the last axis, stabilised by the row maximum."""
    z = x - x.max(axis=-1, keepdims=True)
    return z - xp.log(xp.exp(z).sum(axis=-1, keepdims=True))
