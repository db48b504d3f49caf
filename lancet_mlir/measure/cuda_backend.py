"""The `cuda` measurement back-end: kernels on an NVIDIA GPU, timed with CUDA events.

Timing: cuda-python's runtime bindings (`cuda.bindings.runtime`). One non-blocking stream per
back-end; for each measured run an event is recorded on the stream before and after the
kernel, the host waits for the second event, and `cudaEventElapsedTime` gives the duration
(ms, ~0.5 µs resolution). Every cuda-python call returns a tuple whose first element is a
`cudaError_t`; `check_cuda` turns anything but `cudaSuccess` into an error naming the call.

Kernels: CuPy (optional extra `gpu`, package `cupy-cuda13x`). Instead of a second, GPU-only
implementation of every kernel, the reference implementations (`lancet_mlir.runtime.kernels`,
written against an array-namespace argument `xp`) run with `xp = cupy`: CuPy implements the
NumPy API on the GPU, so every kernel runs there as written: matmuls go to cuBLAS,
element-wise code to CuPy kernels. What is timed is what `lancet-run` computes. CuPy launches on our stream through `cupy.cuda.ExternalStream`. Kernels whose
numpy code synchronises the host (data-dependent shapes, e.g. the MoE gate's `nonzero`) are
timed including that synchronisation, as they would run.

The module imports without a GPU, without a driver and without CuPy; `CudaBackend.for_rank`
raises a one-line UserError when the GPU or CuPy is missing. Not yet run on a GPU (see
docs/runtime.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.ir import Operation

from lancet_mlir.support.errors import UserError


class CudaError(RuntimeError):
    """A CUDA runtime call failed."""


def runtime_module() -> Any:
    """cuda-python's CUDA runtime bindings (`cuda.bindings.runtime`)."""
    from cuda.bindings import runtime  # pyright: ignore[reportAttributeAccessIssue] - optional GPU dependency

    return runtime


def check_cuda(result: Any, what: str) -> Any:
    """Unpack a cuda-python result `(err, *values)`; CudaError naming `what` on failure."""
    rt = runtime_module()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != rt.cudaError_t.cudaSuccess:
        _, name = rt.cudaGetErrorName(err)
        _, text = rt.cudaGetErrorString(err)
        raise CudaError(f"{what}: {_text(name)}: {_text(text)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_status() -> tuple[int, str]:
    """(number of CUDA devices, reason when 0) without raising."""
    try:
        rt = runtime_module()
    except ImportError as exc:  # cuda-python missing
        return 0, f"cuda-python is not installed ({exc})"
    try:
        count = check_cuda(rt.cudaGetDeviceCount(), "cudaGetDeviceCount")
    except CudaError as exc:
        return 0, str(exc)
    if not count:
        return 0, "cudaGetDeviceCount found no device"
    return int(count), ""


def _import_cupy() -> Any:
    try:
        import cupy  # pyright: ignore[reportMissingImports] - optional GPU dependency
    except ImportError as exc:
        raise UserError(
            "--backend cuda needs CuPy: install the 'gpu' extra (pip install 'lancet-mlir[gpu]', "
            f"i.e. cupy-cuda13x) ({exc})"
        ) from None
    return cupy


def canonical_device(gpu_name: str) -> str:
    """The cost-model device name of a GPU name ('NVIDIA H100 80GB HBM3' -> 'h100')."""
    lowered = gpu_name.lower()
    for name in ("gb200", "b200", "h200", "h100", "a100", "v100"):
        if name in lowered:
            return name
    return gpu_name


class CudaBackend:
    """Times registry kernels on one GPU with CUDA events (see the module doc)."""

    name = "cuda"

    @classmethod
    def for_rank(cls, rank: int = 0) -> CudaBackend:
        """The back-end on GPU `rank % device count`; UserError without a GPU or CuPy."""
        count, reason = gpu_status()
        if count == 0:
            raise UserError(f"--backend cuda: no CUDA GPU available ({reason})")
        _import_cupy()
        return cls(rank % count)

    def __init__(self, device_index: int):
        rt = runtime_module()
        cupy = _import_cupy()
        self.device_index = device_index
        check_cuda(rt.cudaSetDevice(device_index), f"cudaSetDevice({device_index})")
        props = check_cuda(rt.cudaGetDeviceProperties(device_index), "cudaGetDeviceProperties")
        self.gpu_name = _text(props.name).rstrip("\0")
        self.device = canonical_device(self.gpu_name)
        self._cupy = cupy
        cupy.cuda.Device(device_index).use()
        flags = rt.cudaStreamNonBlocking
        self._stream = check_cuda(rt.cudaStreamCreateWithFlags(flags), "cudaStreamCreateWithFlags")
        self._start = check_cuda(rt.cudaEventCreate(), "cudaEventCreate")
        self._end = check_cuda(rt.cudaEventCreate(), "cudaEventCreate")
        self._cupy_stream = cupy.cuda.ExternalStream(int(self._stream), device_index)

    def prepare(self, op: Operation, inputs: list[np.ndarray]) -> Callable[[], Any]:
        """A callable running `op`'s reference kernel with `xp = cupy` on device inputs."""
        from lancet_mlir.dialects.comp import kernel_of, kernel_params
        from lancet_mlir.runtime.kernels import kernel_runner

        kernel = kernel_of(op)
        if kernel is None:
            raise UserError(f"{op.name}: no kernel in the registry to measure")
        gpu_kernel = kernel_runner(kernel, kernel_params(op), xp=self._cupy)
        with self._cupy_stream:
            device_inputs = [self._cupy.asarray(x) for x in inputs]
        stream = self._cupy_stream

        def run() -> Any:
            with stream:
                return gpu_kernel(device_inputs)

        return run

    def time(
        self, fn: Callable[[], Any], warmup: int, iters: int, deadline: float | None = None
    ) -> list[float]:
        """Durations in µs between events recorded around each of up to `iters` runs (after up
        to `warmup` runs); no run starts at or after `deadline` (time.monotonic)."""
        import time

        rt = runtime_module()

        def late() -> bool:
            return deadline is not None and time.monotonic() >= deadline

        for _ in range(warmup):
            if late():
                break
            fn()
            if deadline is not None:  # the deadline bounds device time, not launches
                check_cuda(rt.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
        check_cuda(rt.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
        samples: list[float] = []
        for _ in range(iters):
            if late():
                break
            check_cuda(rt.cudaEventRecord(self._start, self._stream), "cudaEventRecord")
            fn()
            check_cuda(rt.cudaEventRecord(self._end, self._stream), "cudaEventRecord")
            check_cuda(rt.cudaEventSynchronize(self._end), "cudaEventSynchronize")
            ms = check_cuda(rt.cudaEventElapsedTime(self._start, self._end), "cudaEventElapsedTime")
            samples.append(float(ms) * 1000.0)
        return samples

    def metadata(self) -> dict[str, Any]:
        """GPU name and index, CuPy and cuda-python versions."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            bindings = version("cuda-bindings")
        except PackageNotFoundError:
            bindings = "unknown"
        return {
            "gpu": self.gpu_name,
            "gpu_index": self.device_index,
            "cupy": self._cupy.__version__,
            "cuda_bindings": bindings,
            "timing": "CUDA events on one stream",
        }

    def close(self) -> None:
        """Release the events and the stream."""
        rt = runtime_module()
        for event in (self._start, self._end):
            rt.cudaEventDestroy(event)
        rt.cudaStreamDestroy(self._stream)
