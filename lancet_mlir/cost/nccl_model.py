"""NCCL's own cost model of a collective within one NVLink domain, for GPUs without a
measured comm table (V100, A100).

NCCL picks an algorithm and a protocol per call from a latency + bandwidth model of its own
(`src/graph/tuning.cc` in NVIDIA/nccl, `ncclTopoTuneModel` / `ncclTopoGetAlgoTime`):

    time = latency(algorithm, protocol) + nBytes / algbw(algorithm, protocol)

and runs the cheapest. We use its ring algorithm within one node over NVLink, with its three
protocols, and take the cheapest as NCCL does:

* latency = baseLat[protocol] + nsteps x hwLat[NVLink][protocol], with NCCL's constants (µs,
  the values of current NCCL releases): baseLat LL 6.6, LL128 14.0, Simple 8.4; NVLink hwLat
  LL 0.6, LL128 1.9, Simple 3.4. nsteps is NCCL's: 2(G-1) for an all-reduce, G-1 for an
  all-gather or reduce-scatter. An all-to-all is not a ring: NCCL runs it as one group of G-1
  concurrent point-to-point send/recv pairs, each a single hop, so it pays one step
  (nsteps = 1) whatever G;
* bus bandwidth: Simple runs at the link's usable bus bandwidth B (`busbw_gb_per_s`); LL moves
  8 bytes of data per 16-byte line (data + flag) and NCCL models it at B/4 for an all-reduce and
  B/3 otherwise, capped at the per-GPU-generation LL maximum (`ll_max_gb_per_s`: 39 GB/s on
  Volta, 87.7 on Ampere, NCCL's `llMaxBws` for one node; Hopper, 141 there, keeps its table); LL128 at 0.92 B (NCCL's
  120/128 line efficiency);
* time = latency + payload x bus_factor(kind, G) / bus bandwidth, i.e. NCCL's nBytes / algbw
  with algbw = busbw x G / nsteps (the ring's bus-bandwidth conversion, the same factor
  nccl-tests reports busbw with).

The minimum over protocols is a bandwidth ramp: small messages take LL (low latency, a quarter
of the bandwidth), medium ones LL128, large ones Simple, so the effective bus bandwidth
(payload x bus_factor / time) rises with the message size towards B. On 8 V100s (B = 120
GB/s) an all-reduce costs 15.0 µs at 448 B (LL), 54.9 µs at 0.9 MB and 66.0 µs at 1.6 MB
(LL128: effective busbw 29-42 GB/s), where a single alpha-beta line (20 µs + bytes / 120 GB/s)
said 20, 33 and 43 µs; an all-to-all of 24 KiB costs 7.8 µs (LL, one step), where alpha-beta
said 20.2.

What is left out: NCCL's tree algorithm (on one node a chain, with size-dependent correction
factors of its own) and its channel count (NCCL lowers it for small messages; the per-channel
LL128 cap of 20 GB/s binds only below 6 channels on V100 / 12 on A100, fewer than NCCL opens
on an NVLink node at these sizes).
"""

from __future__ import annotations

from dataclasses import dataclass

from lancet_mlir.cost.comm_model import bus_factor, canonical_kind
from lancet_mlir.dialects.vocab import CollectiveKind

PROTOCOLS = ("LL", "LL128", "Simple")
BASE_LAT_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
"""NCCL's baseLat of the ring algorithm per protocol (tuning.cc)."""
NVLINK_HW_LAT_US = {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}
"""NCCL's hwLat of one ring step over NVLink per protocol (tuning.cc)."""
LL128_EFFICIENCY = 0.92  # NCCL: busBw * 0.92 (120/128) for LL128 rings
LL_MAX_VOLTA_GB_PER_S = 39.0  # NCCL llMaxBws, Volta, one node
LL_MAX_AMPERE_GB_PER_S = 87.7  # NCCL llMaxBws, Ampere, one node (Hopper: 141; it has a table)


def ring_steps(kind: str, group_size: int) -> int:
    """NCCL's number of latency steps of one collective on `group_size` ranks (module doc)."""
    canon = canonical_kind(kind)
    if canon == CollectiveKind.ALLREDUCE:
        return 2 * (group_size - 1)
    if canon in (CollectiveKind.ALLGATHER, CollectiveKind.REDUCE_SCATTER):
        return group_size - 1
    return 1  # all-to-all: one round of concurrent point-to-point sends


@dataclass(frozen=True)
class NcclRing:
    """NCCL's latency/bandwidth model of a collective within one NVLink domain (module doc).

    `busbw_gb_per_s` is the Simple protocol's bus bandwidth, `ll_max_gb_per_s` the LL cap of
    the GPU generation, `default_group` the group size assumed when none is known."""

    busbw_gb_per_s: float
    ll_max_gb_per_s: float
    default_group: int = 8
    name = "NCCL ring model"

    def protocol_bw_gb_per_s(self, kind: str, protocol: str) -> float:
        """The bus bandwidth NCCL assumes for `protocol` (GB/s)."""
        if protocol == "LL":
            share = 0.25 if canonical_kind(kind) == CollectiveKind.ALLREDUCE else 1 / 3
            return min(self.ll_max_gb_per_s, self.busbw_gb_per_s * share)
        if protocol == "LL128":
            return self.busbw_gb_per_s * LL128_EFFICIENCY
        return self.busbw_gb_per_s

    def protocol_time_us(
        self, protocol: str, kind: str, nbytes: float, group_size: int | None
    ) -> float:
        """Time of one collective with `protocol`: latency + bus bytes / bandwidth."""
        g = self.default_group if group_size is None else group_size
        if g <= 1:
            return 0.0
        latency = BASE_LAT_US[protocol] + ring_steps(kind, g) * NVLINK_HW_LAT_US[protocol]
        bus_bytes = nbytes * bus_factor(kind, g)
        return latency + bus_bytes / (self.protocol_bw_gb_per_s(kind, protocol) * 1e3)

    def protocol(self, kind: str, nbytes: float, group_size: int | None) -> str:
        """The protocol NCCL's model picks (the cheapest; ties go to the earlier one)."""
        return min(PROTOCOLS, key=lambda p: self.protocol_time_us(p, kind, nbytes, group_size))

    def time_us(self, kind: str, nbytes: float, group_size: int | None) -> float:
        """Predicted time of one collective of `nbytes` payload bytes (0 for one rank)."""
        p = self.protocol(kind, nbytes, group_size)
        return self.protocol_time_us(p, kind, nbytes, group_size)

    def describe(self) -> str:
        """One phrase for notes."""
        return (
            f"NCCL's ring model (LL/LL128/Simple, busbw {self.busbw_gb_per_s:g} GB/s, "
            f"LL at most {self.ll_max_gb_per_s:g} GB/s)"
        )
