"""Cost-model fidelity on a real trace: our estimate of every GPU op against its measurement.

Ops are grouped into classes by the launching ATen op and the kernel name: `gemm` (the kernels
launched by mm, addmm, bmm, matmul, linear, baddbmm; FLOPs from the `cpu_op` Input Dims),
`gemm_unshaped` (a GEMM-named kernel launched by another op: a cuDNN convolution, a
torch.compile graph; its op's Input Dims are not the GEMM's, so no estimate), `embedding`
(FBGEMM / TorchRec kernels: their Input Dims include whole embedding tables, not the bytes
touched; no estimate), `nccl` (the comm table at
the collective's bytes and group, against the rendezvous wire time when several ranks are
given, else against the measured duration), `memcpy`/`memset` (memory traffic over HBM bandwidth:
the activity's own `bytes`, else a copy ATen op's input bytes, else no estimate: `copy_bytes`;
a device-to-device copy reads and writes them, twice the traffic: `copy_traffic_factor`), and
`elementwise` (other kernels: bytes of the input tensors read once and written once). An op
without shapes has no estimate and keeps its measured duration under `--costs model`. Each
estimate takes the device's launch floor (`min_kernel_us`). The device preset comes from the
trace's `deviceProperties` (`report.device_preset`), or `--device`.

A GEMM is one estimate per ATen op: cuBLAS may launch several kernels for it (split-K: the GEMM
and a `splitKreduce`; a GEMV: a dot and a reduction; addmm: a bias copy and the GEMM), so the
ratio is the estimate over the sum of its kernels' measured times, and under `--costs model`
each of its k kernels takes 1/k of the estimate. The GEMM's dtype is the inputs', except that an
f32 GEMM run by a TF32 tensor-core kernel (`tensorop_s1688gemm`, `s16816gemm`, `tf32` in the
name: PyTorch's `allow_tf32`) is costed at the TF32 peak (`gemm_dtype`).
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

from lancet_mlir.importers.traces.nccl import dtype_bytes
from lancet_mlir.importers.traces.report import device_preset, percentile
from lancet_mlir.importers.traces.step import StepTrace

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm")
DTYPE_NAMES = {
    "float": "f32",
    "double": "f64",
    "c10::half": "f16",
    "half": "f16",
    "c10::bfloat16": "bf16",
    "bfloat16": "bf16",
}


def comm_time_fn(
    steps: list[StepTrace], device: str | None
) -> tuple[Callable[[str, int, int], float] | None, str | None]:
    """(the comm table's time of (kind, bytes, group size), the device preset) for the steps'
    GPU; (None, None) if the GPU is not one of our presets."""
    name = device or next((p for p in (device_preset(s.device) for s in steps) if p), None)
    if name is None:
        return None, None
    from lancet_mlir.cost.cost_model import CostConfig, CostModel

    model = CostModel.build(CostConfig(device=name))
    return (
        lambda kind, nbytes, group: model.comm.time_us(kind, float(nbytes), group)
    ), model.device.name


def _tensors(args: dict[str, Any]) -> list[tuple[list[int], str]]:
    dims, types = args.get("Input Dims"), args.get("Input type")
    out = []
    if not isinstance(dims, list):
        return out
    for k, d in enumerate(dims):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            t = types[k] if isinstance(types, list) and k < len(types) else "float"
            out.append((d, str(t)))
    return out


COPY_OPS = (
    "aten::copy_",
    "aten::to",
    "aten::_to_copy",
    "aten::clone",
    "aten::contiguous",
    "aten::fill_",
    "aten::zero_",
    "aten::zeros_like",
    "aten::ones_like",
    "aten::full_like",
)
"""ATen ops whose own work is one copy or fill of a tensor the size of their first input (the
destination of `copy_`/`fill_`/`zero_`, the source of `to`/`clone`/`*_like`): its bytes are
the bytes a memcpy / memset they launch moves. (`zeros`, `full`, `new_zeros` are not here:
their first input, if any, is not the tensor they fill.)"""


def copy_bytes(st: StepTrace, j: int) -> int | None:
    """The bytes memcpy / memset op `j` moves: its activity's own `bytes` (Kineto args), else
    the first input tensor of its launching ATen op when that op is a copy or fill
    (`COPY_OPS`), else None (no estimate: under `--costs model` it keeps its measured time).
    Another op's inputs say nothing about a copy it launches: a memset inside an embedding op
    clears a small buffer, not the embedding tables its Input Dims list."""
    inf = st.info[j]
    if inf.copy_bytes is not None:
        return inf.copy_bytes
    if inf.cpu_op is None or inf.cpu_op.name not in COPY_OPS:
        return None
    tensors = _tensors(inf.cpu_op.args)
    if not tensors:
        return None
    dims, dtype = tensors[0]
    return int(prod(dims) * dtype_bytes(dtype))


DEVICE_COPY_PREFIXES = ("Memcpy DtoD", "Memcpy AtoA", "Memcpy AtoD", "Memcpy DtoA")
"""Copies between two buffers of one GPU's memory: the copy reads its bytes and writes them,
so its HBM traffic is twice its bytes (a memset only writes them; a host copy moves them once
over HBM, and its PCIe leg is not modelled). A peer copy (`Memcpy PtoP`) is not here: each
GPU's memory sees its bytes once (the source reads them, the peer writes them) and its limit
is the link between them, which the memory roofline does not price."""


def copy_traffic_factor(name: str) -> int:
    """The memory traffic of a memcpy / memset named `name` in units of its bytes: 2 for a
    copy within one GPU's memory (`DEVICE_COPY_PREFIXES`), else 1. Before this factor the
    HTA traces' large device-to-device copies came out at 0.49x (review 20, finding 8)."""
    return 2 if name.startswith(DEVICE_COPY_PREFIXES) else 1


def op_class(st: StepTrace, j: int) -> str:
    """The fidelity class of op `j` (module doc)."""
    inf = st.info[j]
    if inf.kind in ("comm", "memcpy", "memset"):
        return "nccl" if inf.kind == "comm" else inf.kind
    aten = inf.cpu_op.name if inf.cpu_op is not None else ""
    kernel = inf.name.lower()
    if aten in GEMM_OPS:
        return "gemm"
    if "fbgemm" in kernel or aten.startswith("fbgemm::") or "splitlookupfunction" in aten.lower():
        return "embedding"
    if "gemm" in kernel:
        return "gemm_unshaped"
    return "elementwise"


TF32_KERNEL_MARKS = ("tensorop_s1688", "s16816gemm", "tf32")


def gemm_dtype(input_type: str, kernel: str) -> str:
    """The dtype a GEMM is costed at: the inputs' (`float` -> f32, ...), but tf32 for f32 inputs
    run by a TF32 tensor-core kernel (module doc)."""
    dtype = DTYPE_NAMES.get(input_type.lower(), "f32")
    low = kernel.lower()
    if dtype == "f32" and any(m in low for m in TF32_KERNEL_MARKS):
        return "tf32"
    return dtype


def estimate_us(st: StepTrace, j: int, device_name: str) -> float | None:
    """Our cost model's time of op `j` on `device_name` (None: no shapes to estimate from)."""
    from lancet_mlir.cost.devices import get_device
    from lancet_mlir.cost.roofline import matmul_time_us, roofline_time_us

    device = get_device(device_name)
    inf = st.info[j]
    cls = op_class(st, j)
    args = inf.cpu_op.args if inf.cpu_op is not None else {}
    tensors = _tensors(args)
    if cls == "gemm":
        mats = [(d, t) for d, t in tensors if len(d) >= 2]
        if len(mats) < 2:
            return None
        a, b = mats[-2][0], mats[-1][0]
        batch = prod(a[:-2]) if len(a) > 2 else 1
        m, k = a[-2], a[-1]
        n = b[-1] if b[-2] == k else b[-2]
        flops = 2.0 * batch * m * k * n
        size = dtype_bytes(mats[-1][1])
        nbytes = float(size * (batch * m * k + k * n + batch * m * n))
        dtype = gemm_dtype(mats[-1][1], inf.name)
        t = matmul_time_us(flops, nbytes, dtype, device, float(k))
    elif cls in ("memcpy", "memset"):
        nbytes = copy_bytes(st, j)
        if nbytes is None:
            return None
        t = roofline_time_us(0.0, float(nbytes * copy_traffic_factor(inf.name)), "f32", device)
    elif cls == "elementwise":
        if not tensors:
            return None
        biggest = max(prod(d) * dtype_bytes(t) for d, t in tensors)
        total = sum(prod(d) * dtype_bytes(t) for d, t in tensors) + biggest
        t = roofline_time_us(0.0, float(total), "f32", device)
    else:
        return None
    return max(t, device.min_kernel_us)


def gemm_groups(st: StepTrace) -> dict[int, list[int]]:
    """For each `gemm` op: the ops launched by the same ATen op (its kernels, in order)."""
    by_op: dict[int, list[int]] = {}
    for j in range(len(st.graph.ops)):
        inf = st.info[j]
        if inf.cpu_op is not None and op_class(st, j) == "gemm":
            by_op.setdefault(id(inf.cpu_op), []).append(j)
    return {j: group for group in by_op.values() for j in group}


def model_durations(steps: list[StepTrace], device: str | None) -> tuple[list[list[float]], dict]:
    """Per rank, per op: our estimate where we have one, else the measured duration; and the
    per-class ratios (estimate / measured: median, p90, count) over the ranks' step-N ops."""
    _, name = comm_time_fn(steps, device)
    comm, _ = comm_time_fn(steps, device)
    if name is None:
        from lancet_mlir.support.errors import UserError

        raise UserError(
            "--costs model: the trace's GPU ("
            + (steps[0].device or "unknown")
            + ") is not one of our device presets; pass --device"
        )
    out: list[list[float]] = []
    ratios: dict[str, list[float]] = {}
    unmodeled: dict[str, int] = {}
    for st in steps:
        row = []
        target = set(st.target)
        groups = gemm_groups(st)
        for j, o in enumerate(st.graph.ops):
            cls = op_class(st, j)
            if cls == "nccl":
                row.append(o.dur)  # the wire part is the comm table's: report.py splits it
                inf = st.info[j]
                if (
                    comm is not None
                    and inf.comm_kind
                    and inf.comm_bytes
                    and j in target
                    and o.dur > 0
                ):
                    size = len(inf.group or ()) or st.world_size
                    if size < 2:  # no group size known (a Chakra trace): no price, not 0 us
                        unmodeled["nccl"] = unmodeled.get("nccl", 0) + 1
                        continue
                    try:
                        est = comm(inf.comm_kind, inf.comm_bytes, size)
                    except Exception:  # noqa: BLE001 - a kind our tables do not know (sendrecv)
                        unmodeled["nccl"] = unmodeled.get("nccl", 0) + 1
                        continue
                    ratios.setdefault("nccl_vs_measured", []).append(est / o.dur)
                continue
            group = groups.get(j)
            if group is not None:
                est = estimate_us(st, group[0], name)
                if est is not None:
                    row.append(est / len(group))
                    measured = sum(st.graph.ops[i].dur for i in group)
                    if j == group[0] and j in target and measured > 0:
                        ratios.setdefault(cls, []).append(est / measured)
                    continue
            else:
                est = estimate_us(st, j, name)
            if est is None:
                row.append(o.dur)
                if j in target:
                    unmodeled[cls] = unmodeled.get(cls, 0) + 1
                continue
            row.append(est)
            if j in target and o.dur > 0:
                ratios.setdefault(cls, []).append(est / o.dur)
        out.append(row)
    classes = {
        cls: {
            "count": len(v),
            "median_ratio": round(percentile(v, 0.5), 4),
            "p90_ratio": round(percentile(v, 0.9), 4),
        }
        for cls, v in sorted(ratios.items())
    }
    return out, {"device": name, "classes": classes, "unmodeled": dict(sorted(unmodeled.items()))}
