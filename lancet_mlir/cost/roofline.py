"""Roofline compute-time estimates for ops without a measured time.

    time = max(flops / (peak(dtype) * COMPUTE_EFFICIENCY), bytes / (hbm_bw * MEMORY_EFFICIENCY))

* COMPUTE_EFFICIENCY = 0.75: large matmuls in XLA's H100 table reach 0.73-0.81 of the BF16
  peak (722-805 of 989 TFLOP/s for 2^35-2^39 FLOP); real kernels rarely exceed that.
* MEMORY_EFFICIENCY = 0.8: streaming (elementwise, normalization) kernels typically reach
  80-90 % of HBM bandwidth; 0.8 is the conservative end.

Matmuls (`MATMUL_CLASSES`, `MATMUL_OPS`) on devices with a calibration table (`lancet_mlir/data/matmul_*.csv`,
derived from XLA's matmul perf table, see lancet_mlir/data/README.md) use the measured time
curve instead of the compute term: the median measured time per FLOP count, made monotone and
interpolated piecewise-linearly in FLOPs (linear extrapolation outside, as comm tables). BF16 and
F16 use the `bf16` curve. XLA ran F32 matmuls at its default precision, i.e. on TF32 tensor
cores, so that curve is stored as `tf32`; an F32 matmul (no TF32: the numpy/cupy back-ends run
true FP32) costs the larger of the FP32 roofline term and the TF32 curve, which supplies the
small-size latency floor the plain roofline lacks; f64 and integer matmuls are costed the same
way, fp8/int8 ones against the bf16 curve scaled to their peak (`matmul_time_us`). The memory
term always applies. A device without a table floors a matmul's roofline at its `min_matmul_us`
(5 µs: the GEMM latency the tables show, devices.py) plus `matmul_k_step_us` per contracted
element (`contraction_length`: the serial K loop of a GEMM with few output tiles, devices.py)
instead of the 2 µs launch floor.

Launch floor: a GPU kernel never takes less than a few µs (launch, scheduling, tail), so an
estimate above 0 is raised to the device's `min_kernel_us` (2 µs, see devices.py). Not floored:
* an estimate of exactly 0 (0 FLOPs and 0 bytes: e.g. ops the StableHLO importer marks free,
  constants, bitcasts, reshapes -- nothing runs);
* view ops (`VIEW_CLASSES`, `VIEW_OPS`). A `comp.reshape` is estimated 0: where a layout
  change needs a copy the graph holds that copy as its own op (a `comp.transpose`, a
  column split, a PyTorch import's `aten.clone` before its `view`), so what a reshape reads
  is contiguous, and on a GPU a reshape of a contiguous tensor is a view (PyTorch `view`,
  XLA bitcast): no kernel, nothing moves. A `comp.split` into contiguous row
  blocks never gets here (the cost model's `in-place` source costs it 0,
  `destination.view_split`); any other split, and the other dialects' reshapes (`VIEW_OPS`:
  outside `comp` a layout may need a copy), keep their copy's memory-term estimate, a
  conservative upper bound, without the launch floor (a split returns views or slices XLA
  fuses into their consumers).
  `comp.transpose`, `comp.concat` and `comp.fill`/`comp.zeros` do launch a copy / fill kernel
  on a GPU (PyTorch `.contiguous()`, `torch.cat`, a fill or memset), so they are floored.
Measured (profiled) and explicit (`lancet.time_us`) times are never floored: the cost model
uses them before it asks this module.

FLOPs and bytes come from `lancet.flops` / `lancet.bytes` attributes when present (e.g. on
imported StableHLO; a missing `lancet.bytes` defaults to the operand + result tensor bytes, a
missing `lancet.flops` to 0), else from the compute-kernel registry (`op_flops_bytes`).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Callable
from functools import cache

from xdsl.dialects.builtin import FloatAttr, IntegerAttr, TensorType
from xdsl.ir import Attribute, Operation

from lancet_mlir import attrs
from lancet_mlir.cost.comm_model import PiecewiseLinear
from lancet_mlir.cost.devices import K_STEP_MAX, Device
from lancet_mlir.cost.fileio import data_path, read_text
from lancet_mlir.dialects.comm import tensor_bytes
from lancet_mlir.dialects.comp import (
    BatchMatmulDwOp,
    BatchMatmulDxOp,
    BatchMatmulOp,
    MatmulDwOp,
    MatmulDxOp,
    MatmulOp,
    ReshapeOp,
    SplitOp,
)
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.support.errors import UserError

COMPUTE_EFFICIENCY = 0.75
MEMORY_EFFICIENCY = 0.8


MATMUL_CLASSES: tuple[type[Operation], ...] = (
    MatmulOp,
    MatmulDxOp,
    MatmulDwOp,
    BatchMatmulOp,
    BatchMatmulDxOp,
    BatchMatmulDwOp,
)
"""The comp ops costed with the matmul calibration curve where a device has one."""

MATMUL_OPS: frozenset[str] = frozenset(
    {
        "stablehlo.dot",
        "stablehlo.dot_general",
        "linalg.matmul",
        "linalg.batch_matmul",
    }
)
"""Other dialects' ops (by name: they may be unregistered) costed as matmuls."""

VIEW_CLASSES: tuple[type[Operation], ...] = (ReshapeOp, SplitOp)
"""The comp ops that are views on a GPU (no kernel launch): exempt from the launch floor."""

VIEW_OPS: frozenset[str] = frozenset(
    {
        "stablehlo.reshape",
        "stablehlo.bitcast_convert",
        "tensor.reshape",
        "tensor.collapse_shape",
        "tensor.expand_shape",
    }
)
"""Other dialects' ops (by name) that are views on a GPU: exempt from the launch floor."""

MATMUL_TABLE_HEADER = ("dtype", "flops", "time_us")
_XLA_MATMUL_DTYPES = {"bf16xbf16->bf16": "bf16", "f32xf32->f32": "tf32"}


def roofline_time_us(
    flops: float,
    nbytes: float,
    dtype: str,
    device: Device,
    compute_efficiency: float = COMPUTE_EFFICIENCY,
    memory_efficiency: float = MEMORY_EFFICIENCY,
) -> float:
    """max(compute time, memory time) in µs for `flops` FLOPs and `nbytes` bytes of traffic."""
    compute = flops / (device.peak(dtype) * compute_efficiency)
    memory = nbytes / (device.hbm_bytes_per_s * memory_efficiency)
    return max(compute, memory) * 1e6


# ---- matmul calibration ------------------------------------------------------------------------
def parse_matmul_table(text: str, source: str) -> dict[str, PiecewiseLinear]:
    """Read `dtype,flops,time_us` rows into one monotone curve per dtype."""
    reader = csv.reader(
        io.StringIO("\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))
    )
    header = next(reader, None)
    if header is None or tuple(c.strip() for c in header) != MATMUL_TABLE_HEADER:
        raise UserError(f"{source}: expected header {','.join(MATMUL_TABLE_HEADER)}")
    samples: dict[str, list[tuple[float, float]]] = {}
    for n, cells in enumerate(reader, 2):
        if not cells:
            continue
        try:
            flops, t = float(cells[1]), float(cells[2])
        except (ValueError, IndexError):
            raise UserError(f"{source}: row {n}: expected dtype,flops,time_us") from None
        if not (math.isfinite(flops) and math.isfinite(t)) or flops < 0 or t < 0:
            raise UserError(f"{source}: row {n}: flops and time_us must be finite and >= 0")
        samples.setdefault(cells[0].strip(), []).append((flops, t))
    return {dtype: PiecewiseLinear.fit(rows) for dtype, rows in sorted(samples.items())}


@cache
def load_matmul_calibration(name: str) -> dict[str, PiecewiseLinear]:
    """The shipped matmul calibration file `name` (cached)."""
    path = data_path(name)
    return parse_matmul_table(read_text(path), str(path))


def derive_matmul_table(
    text: str, gpu: str, source: str = "<xla matmul table>"
) -> list[tuple[str, int, float]]:
    """From XLA's matmul perf table (`gpu,b,m,n,k,dtypes,flops_per_s`): the median time (µs) per
    FLOP count (2*b*m*n*k) for `gpu`, as (dtype, flops, time_us) rows sorted by dtype, flops."""
    reader = csv.DictReader(io.StringIO(text))
    times: dict[tuple[str, int], list[float]] = {}
    for row in reader:
        dtype = _XLA_MATMUL_DTYPES.get(row.get("dtypes", ""))
        if row.get("gpu") != gpu or dtype is None:
            continue
        flops = 2 * int(row["b"]) * int(row["m"]) * int(row["n"]) * int(row["k"])
        rate = float(row["flops_per_s"])
        if rate <= 0:
            continue
        times.setdefault((dtype, flops), []).append(flops / rate * 1e6)
    if not times:
        raise UserError(f"{source}: no bf16/f32 matmul rows for gpu {gpu!r}")
    return [(d, f, statistics.median(v)) for (d, f), v in sorted(times.items())]


def matmul_time_us(
    flops: float, nbytes: float, dtype: str, device: Device, contraction: float = 0.0
) -> float:
    """Matmul time: the device's calibration curve where it has one, else the roofline,
    floored at `min_matmul_us + matmul_k_step_us x contraction` (K, the contracted length:
    devices.py explains the serial K-loop latency).

    bf16/f16 and tf32 use their own curve (and the memory term). Every other dtype takes the
    larger of its roofline and a curve at the *equivalent work*: dtypes no faster than TF32
    (f32, f64, integers on the f32 rate) the TF32 curve at the same FLOPs, faster ones (fp8,
    int8) the bf16 curve at FLOPs x peak(bf16) / peak(dtype). So a small matmul never escapes
    the measured launch latency (an f64 matmul is not estimated faster than the same f32 one),
    and a large one keeps its dtype's peak.
    """
    if flops == 0:
        # a zero-size dimension (0x512 . 512x512): no kernel does any work, so neither the
        # launch floor nor the other operand's bytes count
        return 0.0
    curves = load_matmul_calibration(device.matmul_table) if device.matmul_table else {}
    memory = nbytes / (device.hbm_bytes_per_s * MEMORY_EFFICIENCY) * 1e6
    if dtype in ("bf16", "f16") and "bf16" in curves:
        return max(curves["bf16"](flops), memory)
    if dtype == "tf32" and "tf32" in curves:
        return max(curves["tf32"](flops), memory)
    roofline = roofline_time_us(flops, nbytes, dtype, device)
    reference = "bf16" if device.peak(dtype) > device.peak("bf16") else "tf32"
    if reference not in curves:
        floor = device.min_matmul_us + device.matmul_k_step_us * min(contraction, K_STEP_MAX)
        return max(roofline, floor) if roofline > 0 else roofline
    equivalent = flops * min(1.0, device.peak(reference) / device.peak(dtype))
    return max(roofline, curves[reference](equivalent))


# ---- ops ---------------------------------------------------------------------------------------
_DTYPE_NAMES: dict[Attribute, str] = {}  # element type -> name: printing types is slow


def element_dtype(ty: Attribute) -> str | None:
    """The dtype name (`f32`, `bf16`, `i8`, ...) of a tensor type, else None."""
    if not isinstance(ty, TensorType):
        return None
    name = _DTYPE_NAMES.get(ty.element_type)
    if name is None:
        name = _DTYPE_NAMES[ty.element_type] = str(ty.element_type)
    return name


def op_dtype(op: Operation) -> str:
    """The dtype an op computes in: its first tensor result's, else first tensor operand's,
    else f32."""
    for value in (*op.results, *op.operands):
        dtype = element_dtype(value.type)
        if dtype is not None:
            return dtype
    return "f32"


def numeric_attr(op: Operation, name: str) -> float | None:
    """A finite, non-negative number attribute of `op` (None if absent; UserError if bad)."""
    attr = op.attributes.get(name)
    if attr is None:
        return None
    if isinstance(attr, IntegerAttr | FloatAttr):
        value = float(attr.value.data)
        if math.isfinite(value) and value >= 0:
            return value
    raise UserError(
        f"{op_display_name(op)}: {name} must be a finite number >= 0, got {attr}", op=op
    )


def _io_bytes(op: Operation) -> int:
    return sum(tensor_bytes(v.type) for v in (*op.operands, *op.results))


@cache
def _kernel_flops_bytes() -> Callable[[Operation], tuple[float, float] | None] | None:
    """The compute dialect's `op_flops_bytes`, or None while the dialect is not available."""
    for module in ("lancet_mlir.dialects.comp", "lancet_mlir.dialects.kernels"):
        try:
            imported = __import__(module, fromlist=["op_flops_bytes"])
        except ImportError:
            continue
        fn = getattr(imported, "op_flops_bytes", None)
        if fn is not None:
            return fn
    return None


def op_flops_bytes(op: Operation) -> tuple[float, float] | None:
    """FLOPs and bytes of `op` from `lancet.flops`/`lancet.bytes`, else the kernel registry;
    None when nothing knows the op."""
    flops = numeric_attr(op, attrs.FLOPS)
    nbytes = numeric_attr(op, attrs.BYTES)
    if flops is not None or nbytes is not None:
        return (flops or 0.0, float(_io_bytes(op)) if nbytes is None else nbytes)
    counter = _kernel_flops_bytes()
    if counter is None:
        return None
    counted = counter(op)
    if counted is None:
        return None
    return float(counted[0]), float(counted[1])


def op_roofline_us(op: Operation, device: Device, fill: float = 1.0) -> float | None:
    """Estimated time of a compute op on `device` (launch floor included), None when its
    FLOPs/bytes are unknown. `fill` (its `lancet.fill`) scales the estimate before the
    launch floor."""
    if isinstance(op, ReshapeOp):  # a view of a dense tensor: no kernel (module doc)
        return 0.0
    counted = op_flops_bytes(op)
    if counted is None:
        return None
    flops, nbytes = counted
    dtype = op_dtype(op)
    name = op_display_name(op)
    if isinstance(op, MATMUL_CLASSES) or name in MATMUL_OPS:
        estimate = matmul_time_us(flops, nbytes, dtype, device, contraction_length(op, flops))
    else:
        estimate = roofline_time_us(flops, nbytes, dtype, device)
    view = isinstance(op, VIEW_CLASSES) or name in VIEW_OPS
    return launch_floor_us(estimate * fill, device, view)


def contraction_length(op: Operation, flops: float) -> float:
    """K of a matmul-like op: its FLOPs over twice its output elements (2 x batch x M x N x K
    FLOPs make batch x M x N outputs, whatever the op's layout: `matmul_dw` contracts the
    tokens); 0 when its first result is not a statically shaped tensor."""
    if not op.results or not isinstance(op.results[0].type, TensorType):
        return 0.0
    shape = op.results[0].type.get_shape()
    outputs = math.prod(shape)
    if outputs <= 0 or any(d < 0 for d in shape):
        return 0.0
    return flops / (2.0 * outputs)


def launch_floor_us(estimate_us: float, device: Device, view: bool = False) -> float:
    """`estimate_us` raised to the device's `min_kernel_us`, except for a 0 estimate (nothing
    runs) and for view ops (module doc)."""
    if estimate_us <= 0 or view:
        return estimate_us
    return max(estimate_us, device.min_kernel_us)
