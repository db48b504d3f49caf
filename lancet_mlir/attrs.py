"""The names of lancet-mlir's `lancet.*` attributes, in one place.

Top layer (with `support/`): every other layer may import it. docs/passes.md lists what each
attribute means, who writes it and who reads it.
"""

from __future__ import annotations

# ---- module attributes that configure costing (docs/passes.md "Cost configuration") --------
WORLD_SIZE = "lancet.world_size"
"""i64 on a module: number of ranks of a collective without explicit groups."""
DEVICE = "lancet.device"
"""String: the GPU every rank has (`h100`, `v100`, ...; devices.py)."""
CLUSTER = "lancet.cluster"
"""String: a named cluster preset (`p3dn`, `dgx-h100`, ...; clusters.py)."""
PROFILE = "lancet.profile"
"""String or array of strings: measured op-timing files (ProfileDB JSON / Lancet .profile)."""
COMM_TABLE = "lancet.comm_table"
"""String or array of strings: measured collective-time tables (CSV, nccl-tests, XLA)."""
GPUS_PER_NODE = "lancet.gpus_per_node"
"""Integer: GPUs per NVLink domain, overriding the cluster's / device's."""
NETWORK_GBPS = "lancet.network_gbps"
"""Number: inter-node network Gb/s per GPU, overriding the cluster's / device's."""
COMM_STREAMS = "lancet.comm_streams"
"""Integer: communication streams of the simulator (default 1)."""
OVERLAP_SLOWDOWN = "lancet.overlap_slowdown"
"""Number >= 1: compute slowdown while a collective runs (default 1.0)."""

COST_CONFIG_ATTRS: tuple[str, ...] = (
    WORLD_SIZE, DEVICE, CLUSTER, PROFILE, COMM_TABLE, GPUS_PER_NODE, NETWORK_GBPS,
    COMM_STREAMS, OVERLAP_SLOWDOWN,
)
"""Every module attribute the costing passes read."""
