"""The `cpu` measurement back-end: the kernel registry's numpy implementations, wall clock.

Each measured run is timed with `time.perf_counter_ns` around one call of the kernel's numpy
function (the arrays are prepared beforehand, so allocation of the inputs is not timed; the
outputs' allocation is, as on a GPU). `measure` pins numpy's BLAS threads (threadpoolctl,
`--threads`, default 1) around the whole measurement.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.ir import Operation

from lancet_mlir.support.errors import UserError


class NumpyBackend:
    """Times kernels on the CPU with numpy (device name `cpu`)."""

    name = "cpu"
    device = "cpu"

    def prepare(self, op: Operation, inputs: list[np.ndarray]) -> Callable[[], Any]:
        """A callable running the reference implementation of `op` (numpy) on `inputs`."""
        from lancet_mlir.dialects.comp import kernel_of, kernel_params
        from lancet_mlir.runtime.kernels import kernel_runner

        kernel = kernel_of(op)
        if kernel is None:
            raise UserError(f"{op.name}: no kernel in the registry to measure")
        run = kernel_runner(kernel, kernel_params(op))
        return lambda: run(inputs)

    def time(
        self, fn: Callable[[], Any], warmup: int, iters: int, deadline: float | None = None
    ) -> list[float]:
        """Wall-clock durations in µs of up to `iters` calls after up to `warmup` calls; no
        call starts at or after `deadline` (time.monotonic)."""
        for _ in range(warmup):
            if deadline is not None and time.monotonic() >= deadline:
                return []
            fn()
        samples = []
        for _ in range(iters):
            if deadline is not None and time.monotonic() >= deadline:
                break
            start = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - start) / 1000.0)
        return samples

    def metadata(self) -> dict[str, Any]:
        """CPU model and numpy version."""
        return {"cpu": platform.processor() or platform.machine(), "numpy": np.__version__}
