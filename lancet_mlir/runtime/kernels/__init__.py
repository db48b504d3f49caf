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

`kernel_runner_into` runs a kernel into given destinations (the parts of an in-place
`comp.concat`, `dialects/destination.py`): add, sub, mul, bias_add, gelu, layer_norm,
softmax and the matmul family (when the output needs no transposition) write there with
`out=`; every other kernel is computed and copied into its slice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lancet_mlir.dialects.kernels import Kernel, KernelError, get_kernel
from lancet_mlir.runtime.kernels import elementwise, layout, linalg, moe, norm  # noqa: F401
from lancet_mlir.runtime.kernels.base import (
    IMPLEMENTATIONS,
    INTO,
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
    "kernel_runner_into",
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


def kernel_runner_into(
    kernel: Kernel | str, params: Mapping[str, Any] | None = None, xp: ArrayNamespace = np
) -> Callable[[Sequence[Array], Sequence[Array | None]], list[Array]]:
    """`(inputs, destinations) -> outputs` for one kernel: result j is written into
    destinations[j] where that is not None (a contiguous array of the result's shape and
    dtype, e.g. a slice of an in-place concat's buffer) and returned as it. The kernel's
    destination-passing implementation (`out=`, `base.INTO`) writes it when the kernel has
    one and the inputs share the destination's dtype; otherwise the result is computed and
    copied into the destination (a slice assignment)."""
    spec = get_kernel(kernel) if isinstance(kernel, str) else kernel
    resolved = spec.resolve_params(params)
    impl, into = implementation(spec), INTO.get(spec.name)

    def run(inputs: Sequence[Array], outs: Sequence[Array | None]) -> list[Array]:
        spec.check_num_inputs(len(inputs))
        wanted = [d for d in outs if d is not None]
        same = all(d.dtype == x.dtype for d in wanted for x in inputs)
        if into is not None and same:
            results = into(xp, list(inputs), resolved, list(outs))
        else:
            results = impl(xp, list(inputs), resolved)
        placed = []
        for result, dest in zip(results, outs, strict=True):
            if dest is not None and result is not dest:
                if tuple(result.shape) != tuple(dest.shape):
                    raise KernelError(
                        f"result shape {tuple(result.shape)} does not fit its "
                        f"destination {tuple(dest.shape)}"
                    )
                xp.copyto(dest, result)
                result = dest
            placed.append(result)
        return placed

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
