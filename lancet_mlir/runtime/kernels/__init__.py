"""Reference implementations of the compute kernels, written once for any array namespace.

`run_kernel(kernel, inputs, params, xp=numpy)` executes one kernel: `lancet-run` and the numpy
measurement back-end pass numpy, the CUDA back-end passes CuPy. The specs (shapes, costs,
partition rules) are in `lancet_mlir.dialects.kernels`; every registered kernel has exactly
one implementation here, in the module of its family:

| module | kernels |
|---|---|
| `linalg` | matmul family, MoE dispatch/combine (contractions through `xp.matmul`) |
| `elementwise` | add, sub, mul, bias_add, scale, gelu (+ dx), sgd_update, adam_update |
| `norm` | layer_norm (+ dx, dw), softmax (+ dx), cross_entropy (+ dx) |
| `layout` | embedding (+ dw), reshape, transpose, split, concat, reduce_sum, fill, zeros |
| `moe` | moe_gate (+ dx), moe_gate_window (+ dx) |
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lancet_mlir.dialects.kernels import Kernel, KernelError, get_kernel
from lancet_mlir.runtime.kernels import elementwise, layout, linalg, moe, norm  # noqa: F401
from lancet_mlir.runtime.kernels.base import (
    IMPLEMENTATIONS,
    Array,
    ArrayNamespace,
    Impl,
    dtype_of,
    numpy_dtype,
)

__all__ = [
    "IMPLEMENTATIONS",
    "Array",
    "ArrayNamespace",
    "Impl",
    "dtype_of",
    "implementation",
    "kernel_runner",
    "numpy_dtype",
    "run_kernel",
]


def implementation(kernel: Kernel | str) -> Impl:
    """The reference implementation of a kernel; KernelError when it has none."""
    name = kernel if isinstance(kernel, str) else kernel.name
    impl = IMPLEMENTATIONS.get(name)
    if impl is None:
        raise KernelError(f"kernel '{name}' has no reference implementation")
    return impl


def kernel_runner(
    kernel: Kernel | str, params: Mapping[str, Any] | None = None, xp: ArrayNamespace = np
) -> Callable[[Sequence[Array]], list[Array]]:
    """`inputs -> outputs` for one kernel and parameter set (validated once, here)."""
    spec = get_kernel(kernel) if isinstance(kernel, str) else kernel
    resolved = spec.resolve_params(params)
    impl = implementation(spec)

    def run(inputs: Sequence[Array]) -> list[Array]:
        spec.check_num_inputs(len(inputs))
        return impl(xp, list(inputs), resolved)

    return run


def run_kernel(
    kernel: Kernel | str,
    inputs: Sequence[Array],
    params: Mapping[str, Any] | None = None,
    xp: ArrayNamespace = np,
) -> list[Array]:
    """Execute `kernel` on arrays of namespace `xp` (numpy by default), computing in the
    op's dtype; `params` may be partial (defaults are filled in). Raises KernelError on bad
    parameters, input counts or data (e.g. ids out of range)."""
    return kernel_runner(kernel, params, xp)(inputs)
