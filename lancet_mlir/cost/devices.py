"""GPU specs for the roofline model and each device's default communication model.

Peak numbers are NVIDIA datasheet values for one GPU, *dense* (the datasheets quote tensor-core
figures "with sparsity", which are twice the dense ones; we halve those):

* V100 SXM2 (Tesla V100 datasheet): FP64 7.8, FP32 15.7, FP16 tensor 125 TFLOP/s; HBM2 900 GB/s;
  NVLink 2 300 GB/s. No TF32/BF16 hardware: those dtypes run at the FP32 rate.
* A100 SXM4 80GB (A100 datasheet): FP64 tensor 19.5, FP32 19.5, TF32 156, BF16/FP16 312,
  INT8 624 TFLOP/s; HBM2e 2,039 GB/s; NVLink 3 600 GB/s.
* H100 SXM5 (H100 datasheet): FP64 tensor 67, FP32 67, TF32 494.7, BF16/FP16 989.4,
  FP8/INT8 1,978.9 TFLOP/s; HBM3 3.35 TB/s; NVLink 4 900 GB/s.
* H200 SXM (H200 datasheet): the H100's compute; HBM3e 4.8 TB/s; NVLink 4 900 GB/s.
* B200 (HGX B200 datasheet, 8-GPU figures / 8): FP64 37, FP32 75, TF32 1,125, BF16/FP16 2,250,
  FP8 4,500 TFLOP/s; HBM3e 8 TB/s; NVLink 5 1.8 TB/s.
* GB200 (GB200 NVL72 datasheet, per-superchip figures / 2): FP64 45, FP32 90, TF32 1,250,
  BF16/FP16 2,500, FP8 5,000 TFLOP/s; HBM3e 8 TB/s; NVLink 5 1.8 TB/s.

Communication: H100 and B200 and GB200 have measured tables derived from XLA's collective perf
table (lancet_mlir/data/README.md); the H200 reuses the H100 table (same NVLink 4 / NVSwitch
fabric, same per-GPU link bandwidth). V100 and A100 have no table and use NCCL's own
latency/bandwidth model of its ring protocols (`nccl_model.NcclRing`: per-protocol latencies
from NCCL's tuning, LL / LL128 / Simple, the cheapest taken, so the effective bandwidth ramps up
with the message size). Its large-message bus bandwidth is what the H100 table reaches, about
0.40 x its NVLink bandwidth (340-400 of 900 GB/s at 2 GiB, 8 GPUs), applied to NVLink 2
(300 GB/s -> 120 GB/s) and NVLink 3 (600 GB/s -> 240 GB/s; NCCL itself capped the A100's
one-node bus bandwidth at 235 GB/s in its 2.7-2.8 tuning). The LL cap is NCCL's per generation:
39 GB/s on Volta, 87.7 on Ampere. Table devices keep a plain alpha-beta as the fallback for a
kind their table lacks (measured busbw: H100 ~360 GB/s, B200 ~600 GB/s, GB200 ~650 GB/s, 20 µs).

Beyond one node (`gpus_per_node`, `internode_gbps_per_gpu`, `internode_latency_us`; the model
is `comm_model.InterNode`): the measured tables cover one NVLink domain only, so a collective
over more ranks than `gpus_per_node` also pays for the network. Defaults are the DGX-class
systems (one NIC per GPU) and, for the V100, the AWS instance Lancet-era work ran on:

* H100: DGX H100, 8 x ConnectX-7 400 Gb/s NDR InfiniBand per node, one per GPU: 400 Gb/s.
* H200: DGX H200, the same 8 x 400 Gb/s NDR: 400 Gb/s.
* B200: DGX B200, 8 x ConnectX-7 400 Gb/s: 400 Gb/s.
* GB200: NVL72, 72 GPUs in one NVLink domain (gpus_per_node = 72); scale-out at one
  400 Gb/s ConnectX-7 class NIC per GPU: 400 Gb/s.
* A100: DGX A100, 8 x ConnectX-6 200 Gb/s HDR InfiniBand: 200 Gb/s. (AWS p4de, Lancet's A100
  testbed, has 4 x 100 Gb/s EFA = 400 Gb/s per node, i.e. 50 Gb/s per GPU: a quarter of this.)
* V100: AWS p3dn.24xlarge, 100 Gb/s per node for 8 GPUs: 12.5 Gb/s per GPU.

Inter-node latency, a constant per collective: 15 µs on InfiniBand (a small all-reduce across
two InfiniBand nodes costs some 15-30 µs in nccl-tests, more than NVLink's ~10-20 µs by the
network round trips), 20 µs on the p3dn's Ethernet (EFA/TCP latency is higher than IB's).
These only matter for small messages, where `CommModel` takes the larger of this and the
intra-node table.

`min_kernel_us`, the shortest time a roofline-estimated kernel can take (`roofline.py`): 2 µs on
every device. A kernel launched back to back on a stream costs the GPU a few µs of launch,
scheduling and tail even when it does no work (launch overheads of 2-5 µs are typical from
Volta to Hopper, dominated by the driver and the GPU front end, not the SMs); 2 µs is the low
end, so that tiny ops are not overstated. XLA's H100 matmul table agrees: its smallest matmuls
take ~5 µs, never less.

`min_matmul_us`, the shortest time of a matmul on a device *without* a matmul table (V100,
A100): 5 µs. A GEMM kernel is not an elementwise kernel: before its first output it fills its
shared-memory pipeline (several K-tiles loaded from HBM) and after its last it runs the
epilogue, a few µs of memory latency that does not shrink with the FLOP rate. XLA's measured
tables show it: the smallest matmuls (33.5 MFLOP) take 4.99 µs on the H100 and 4.96 µs on the
B200, 2.3x apart in peak. Devices with a table get this floor from their curve; without one
the matmul roofline was floored at the 2 µs launch floor, i.e. a tiny matmul on a V100 was
estimated 2.5x faster than on an H100. Real V100 traces agree (docs/benchmarks.md
"Fidelity": batch-16 cuBLAS GEMMs take 4-23 µs, median 7 µs).

`matmul_k_step_us`, the serial K-loop latency of a tableless device's GEMM per contracted
element: the floor above grows to `min_matmul_us + matmul_k_step_us x K` (`roofline.
matmul_time_us`). Each output tile of a GEMM is a reduction over K, run as a loop of K-tiles in
which the next tile's loads from memory must arrive; when the output has few tiles (a skinny or
small GEMM: fewer CTAs than SMs), nothing else hides that latency and the time grows with K,
not with the FLOPs. Real traces show it: on the V100 DLRM ranks, GEMMs of equal FLOPs take
5-6 µs at K = 16 and 15-23 µs at K = 512; on the A100 TorchRec trace a 64 x 4096 x 2798 (M x K
x N) TF32 GEMM takes 139 µs and a 4096 x 2798 x 64 one 94 µs, both ~0.03 µs per unit of K,
where their FLOP rooflines say 9-16 µs. 0.025 µs (one memory round trip of ~0.2 µs per K-tile
of 8, the depth of the SIMT kernels) is calibrated on the eight V100 DLRM ranks (184 GEMMs:
median estimate / measured 0.62x before, 0.95x with it) and used unchanged for the A100, whose
trace it was not fitted to (0.31x before, 0.80x after). Hopper and Blackwell kernels pipeline K
far deeper (TMA, asynchronous warpgroup MMA, stream-K): XLA's tables grow by ~0.001-0.002 µs
per K at m = n = 256 (H100 bf16 5.0 -> 8.4 µs from K = 256 to 2048; B200 5.0 -> 10.1 µs to K =
4096), so the GB200, which has no table, takes the B200's 0.0013; devices with a table need no
term (their curve is measured). The term is held at K = 4096 (`K_STEP_MAX`), the longest K
measured: longer reductions are where libraries split K over more CTAs (cuBLAS ran the A100's 64
x 4096 x 100 GEMM as split-K plus a reduction in 21 µs; the term says 107), so extrapolating the
serial loop further would only grow an overestimate. For large GEMMs the roofline is far above this floor (a 4096^3
f32 GEMM on a V100: 11.7 ms against 107 µs), so it only moves small and skinny ones (e.g. a
MoE gate's tokens x d x experts GEMM).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lancet_mlir.cost.comm_model import AlphaBeta, InterNode, IntraNodeModel
from lancet_mlir.cost.nccl_model import LL_MAX_AMPERE_GB_PER_S, LL_MAX_VOLTA_GB_PER_S, NcclRing
from lancet_mlir.support.errors import UserError

T = 1e12
G = 1e9

MIN_KERNEL_US = 2.0  # launch + tail of one GPU kernel (module doc)
MIN_MATMUL_US = 5.0  # GEMM latency floor where a device has no matmul table (module doc)
VOLTA_AMPERE_K_STEP_US = 0.025  # serial K-loop latency per contracted element (module doc)
BLACKWELL_K_STEP_US = 0.0013  # the same, from the B200 matmul table (module doc)
K_STEP_MAX = 4096  # longest K the K-loop latency is measured at; longer K is held there
IB_LATENCY_US = 15.0  # InfiniBand inter-node latency per collective (module doc)


@dataclass(frozen=True)
class Device:
    """One GPU: peak dense FLOP/s per dtype, HBM bytes/s, and its comm model sources."""

    name: str
    description: str
    peak_flops: dict[str, float]
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float
    alpha_beta: IntraNodeModel  # collectives without a table (tableless devices: all of them)
    comm_table: str | None = None  # data file in lancet_mlir/data/
    matmul_table: str | None = None  # data file in lancet_mlir/data/
    xla_gpu: str | None = None  # `gpu` column value in XLA's perf tables
    aliases: tuple[str, ...] = field(default=())
    gpus_per_node: int = 8  # GPUs sharing one NVLink domain
    internode_gbps_per_gpu: float = 400.0  # network Gb/s per GPU (module doc)
    internode_latency_us: float = IB_LATENCY_US
    min_kernel_us: float = MIN_KERNEL_US  # floor of roofline-estimated kernel times
    min_matmul_us: float = MIN_MATMUL_US  # floor of a tableless device's matmul (module doc)
    matmul_k_step_us: float = 0.0  # a tableless device's GEMM latency per contracted element

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for `dtype`; dtypes without their own entry run at the f32 rate."""
        return self.peak_flops.get(dtype, self.peak_flops["f32"])

    def internode(self) -> InterNode:
        """The model of collectives spanning several of this device's nodes."""
        return InterNode(self.gpus_per_node, self.internode_gbps_per_gpu, self.internode_latency_us)


def _nvlink_nccl(nvlink_gb_per_s: float, ll_max_gb_per_s: float) -> NcclRing:
    # NCCL's ring protocols at a bus bandwidth of 0.40 x NVLink, what the H100 table shows
    # (module doc)
    return NcclRing(0.40 * nvlink_gb_per_s, ll_max_gb_per_s)


DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        Device(
            "v100",
            "NVIDIA V100 SXM2",
            {"f64": 7.8 * T, "f32": 15.7 * T, "f16": 125 * T},
            900 * G,
            300 * G,
            _nvlink_nccl(300, LL_MAX_VOLTA_GB_PER_S),
            aliases=("sm_70", "v100-sxm2"),
            matmul_k_step_us=VOLTA_AMPERE_K_STEP_US,
            internode_gbps_per_gpu=100 / 8,  # p3dn.24xlarge: 100 Gb/s per 8-GPU node
            internode_latency_us=20.0,  # Ethernet (EFA), not InfiniBand
        ),
        Device(
            "a100",
            "NVIDIA A100 SXM4 80GB",
            {
                "f64": 19.5 * T,
                "f32": 19.5 * T,
                "tf32": 156 * T,
                "bf16": 312 * T,
                "f16": 312 * T,
                "i8": 624 * T,
            },
            2039 * G,
            600 * G,
            _nvlink_nccl(600, LL_MAX_AMPERE_GB_PER_S),
            aliases=("sm_80", "a100-sxm4"),
            matmul_k_step_us=VOLTA_AMPERE_K_STEP_US,
            internode_gbps_per_gpu=200.0,  # DGX A100: 8 x 200 Gb/s HDR
        ),
        Device(
            "h100",
            "NVIDIA H100 SXM5",
            {
                "f64": 67 * T,
                "f32": 67 * T,
                "tf32": 494.7 * T,
                "bf16": 989.4 * T,
                "f16": 989.4 * T,
                "f8E4M3FN": 1978.9 * T,
                "f8E5M2": 1978.9 * T,
                "i8": 1978.9 * T,
            },
            3350 * G,
            900 * G,
            AlphaBeta.from_busbw(20.0, 360),
            comm_table="comm_h100.csv",
            matmul_table="matmul_h100.csv",
            xla_gpu="sm_90",
            aliases=("sm_90", "h100-sxm", "h100-sxm5"),
            internode_gbps_per_gpu=400.0,  # DGX: 8 x ConnectX-7 400 Gb/s NDR
        ),
        Device(
            "h200",
            "NVIDIA H200 SXM",
            {
                "f64": 67 * T,
                "f32": 67 * T,
                "tf32": 494.7 * T,
                "bf16": 989.4 * T,
                "f16": 989.4 * T,
                "f8E4M3FN": 1978.9 * T,
                "f8E5M2": 1978.9 * T,
                "i8": 1978.9 * T,
            },
            4800 * G,
            900 * G,
            AlphaBeta.from_busbw(20.0, 360),
            comm_table="comm_h100.csv",
            matmul_table="matmul_h100.csv",
            xla_gpu="sm_90",
            aliases=("h200-sxm",),
            internode_gbps_per_gpu=400.0,  # DGX: 8 x ConnectX-7 400 Gb/s NDR
        ),
        Device(
            "b200",
            "NVIDIA B200 (HGX)",
            {
                "f64": 37 * T,
                "f32": 75 * T,
                "tf32": 1125 * T,
                "bf16": 2250 * T,
                "f16": 2250 * T,
                "f8E4M3FN": 4500 * T,
                "f8E5M2": 4500 * T,
            },
            8000 * G,
            1800 * G,
            AlphaBeta.from_busbw(20.0, 600),
            comm_table="comm_b200.csv",
            matmul_table="matmul_b200.csv",
            xla_gpu="sm_100_B200",
            aliases=("sm_100", "sm_100_b200"),
            internode_gbps_per_gpu=400.0,  # DGX: 8 x ConnectX-7 400 Gb/s NDR
        ),
        Device(
            "gb200",
            "NVIDIA GB200 (NVL72, per GPU)",
            {
                "f64": 45 * T,
                "f32": 90 * T,
                "tf32": 1250 * T,
                "bf16": 2500 * T,
                "f16": 2500 * T,
                "f8E4M3FN": 5000 * T,
                "f8E5M2": 5000 * T,
            },
            8000 * G,
            1800 * G,
            AlphaBeta.from_busbw(20.0, 650),
            comm_table="comm_gb200.csv",
            xla_gpu="sm_100_GB200",
            aliases=("sm_100_gb200",),
            matmul_k_step_us=BLACKWELL_K_STEP_US,
            gpus_per_node=72,  # NVL72: one NVLink domain of 72 GPUs
            internode_gbps_per_gpu=400.0,  # one 400 Gb/s NIC per GPU for scale-out
        ),
    )
}


def device_names() -> list[str]:
    """Canonical device names, in table order."""
    return list(DEVICES)


def get_device(name: str) -> Device:
    """The device called `name` (case-insensitive; aliases such as `sm_90` accepted)."""
    device = DEVICES.get(canonical_device_name(name))
    if device is not None:
        return device
    raise UserError(f"unknown device {name!r} (choices: {', '.join(device_names())})")


def canonical_device_name(name: str) -> str:
    """The canonical name of a known device or alias (`sm_90` -> `h100`); any other name
    (`cpu`, a GPU we have no spec for) lower-cased, so profile metadata compares reliably."""
    wanted = name.strip().lower()
    for device in DEVICES.values():
        if wanted == device.name or wanted in device.aliases:
            return device.name
    return wanted
