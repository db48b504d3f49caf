"""Named cluster presets: hardware as data (device, GPUs per node, network per GPU, latency).

A cluster says which GPU every rank has (`devices.py` holds its roofline and intra-node comm
model), how many GPUs share one NVLink domain, and the network bandwidth *per GPU* that
collectives spanning several nodes use (`comm_model.InterNode`). A node with fewer, faster
NICs is described by its per-GPU share.

Sources (vendor pages and datasheets):

* `p3dn` — AWS EC2 p3dn.24xlarge (EC2 P3 instance page): 8 x V100 SXM2 32GB, NVLink 2, one
  100 Gb/s ENA/EFA network interface per instance = 12.5 Gb/s per GPU. Lancet's V100 testbed
  (MLSys'24, §7). Latency 20 µs: Ethernet/EFA, higher than InfiniBand's.
* `p4de` — AWS EC2 p4de.24xlarge (EC2 P4 instance page): 8 x A100 SXM4 80GB, NVSwitch,
  4 x 100 Gb/s EFA = 400 Gb/s per node = 50 Gb/s per GPU. Lancet's A100 testbed. Latency 20 µs
  (EFA).
* `dgx-a100` — NVIDIA DGX A100 (DGX A100 datasheet): 8 x A100 SXM4 80GB, 8 x ConnectX-6 200 Gb/s
  HDR InfiniBand for the compute fabric = 200 Gb/s per GPU. Latency 15 µs (InfiniBand).
* `dgx-h100` — NVIDIA DGX H100 (DGX H100 datasheet): 8 x H100 SXM5, 8 x ConnectX-7 400 Gb/s NDR
  InfiniBand (in 4 OSFP ports) = 400 Gb/s per GPU. Latency 15 µs.
* `dgx-b200` — NVIDIA DGX B200 (DGX B200 datasheet): 8 x B200, 8 x ConnectX-7 400 Gb/s
  (4 OSFP ports) = 400 Gb/s per GPU. Latency 15 µs.
* `gb200-nvl72` — NVIDIA GB200 NVL72 (GB200 NVL72 product page): 72 Blackwell GPUs in one NVLink
  5 domain (so `gpus_per_node` = 72: an all-to-all of up to 72 ranks never leaves NVLink),
  scale-out through one 400 Gb/s ConnectX-7 class NIC per GPU. Latency 15 µs.

The default of a device without a cluster (`devices.py`) is unchanged: a device alone keeps its
own `gpus_per_node` / `internode_gbps_per_gpu` / `internode_latency_us` (the DGX-class system for
A100, H100, H200, B200; the p3dn for the V100; the NVL72 for the GB200).
"""

from __future__ import annotations

from dataclasses import dataclass

from lancet_mlir.cost.devices import IB_LATENCY_US
from lancet_mlir.support.errors import UserError

EFA_LATENCY_US = 20.0  # AWS EFA / Ethernet inter-node latency per collective (devices.py doc)


@dataclass(frozen=True)
class Cluster:
    """One named system: the GPU of every rank, the size of one NVLink domain and the
    inter-node network (Gb/s per GPU, latency per collective)."""

    name: str
    description: str
    device: str
    gpus_per_node: int
    network_gbps_per_gpu: float
    latency_us: float


CLUSTERS: dict[str, Cluster] = {
    c.name: c
    for c in (
        Cluster(
            "p3dn",
            "AWS p3dn.24xlarge: 8 x V100 32GB, 100 Gb/s per node",
            "v100",
            8,
            100 / 8,
            EFA_LATENCY_US,
        ),
        Cluster(
            "p4de",
            "AWS p4de.24xlarge: 8 x A100 80GB, 4 x 100 Gb/s EFA per node",
            "a100",
            8,
            400 / 8,
            EFA_LATENCY_US,
        ),
        Cluster(
            "dgx-a100",
            "NVIDIA DGX A100: 8 x A100 80GB, 8 x 200 Gb/s HDR InfiniBand",
            "a100",
            8,
            200.0,
            IB_LATENCY_US,
        ),
        Cluster(
            "dgx-h100",
            "NVIDIA DGX H100: 8 x H100, 8 x 400 Gb/s NDR InfiniBand",
            "h100",
            8,
            400.0,
            IB_LATENCY_US,
        ),
        Cluster(
            "dgx-b200",
            "NVIDIA DGX B200: 8 x B200, 8 x 400 Gb/s ConnectX-7",
            "b200",
            8,
            400.0,
            IB_LATENCY_US,
        ),
        Cluster(
            "gb200-nvl72",
            "NVIDIA GB200 NVL72: 72 GPUs in one NVLink domain, 400 Gb/s per GPU scale-out",
            "gb200",
            72,
            400.0,
            IB_LATENCY_US,
        ),
    )
}


def cluster_names() -> list[str]:
    """Preset names, in table order."""
    return list(CLUSTERS)


def get_cluster(name: str) -> Cluster:
    """The preset called `name` (case-insensitive), else UserError listing the choices."""
    cluster = CLUSTERS.get(name.strip().lower())
    if cluster is not None:
        return cluster
    raise UserError(f"unknown cluster {name!r} (choices: {', '.join(cluster_names())})")
