"""Communication cost models: measured (bytes -> µs) tables per collective kind and group size,
and an alpha-beta fallback.

Fitting a table (`PiecewiseLinear.fit`):
1. samples are sorted by size; samples of the same size are averaged (weight = their number);
2. the times are made monotone non-decreasing in size by weighted isotonic regression (pool
   adjacent violators): the least-squares monotone fit. Real small-message data is noisy and
   non-monotone (XLA's H100 all-to-all takes 96.9 µs at 1 KiB and 23.7 µs at 64 KiB); a
   running max would let one slow outlier inflate every larger size, isotonic regression
   averages the noisy plateau instead, and bigger messages never cost less;
3. evaluation is piecewise-linear between samples, extrapolates linearly with the first
   segment's slope below the table and the last rising segment's slope above it, and is
   clamped at >= 0 (this fixes Lancet's interpolator, lancet-algorithms.md §4.5: wrong
   segment, out-of-range reads, one sample). A `CommModel` given the GPU's link bandwidth
   also never lets time above a table grow slower than that bandwidth allows (a table of
   small messages only is flat, all latency).
A table with a single size costs `t0` at or below that size (a latency floor: smaller messages
are not assumed faster than the one measured) and `t0 * bytes / bytes0` above it (bandwidth
bound: time proportional to size).

Group sizes (`CommModel.time_us`): a table for the exact group size is used; between two
measured group sizes the two tables' times are interpolated linearly in the group size; outside
the measured range the nearest group size is used; with no group size known and a single
measured one, that one is used, with several the largest. Each such decision is recorded once
in `CommModel.notes`. A group of one rank moves nothing and costs 0.

Groups spanning several nodes (a model built with an `InterNode`, group size G above its
`gpus_per_node` n): a table measured at exactly G still wins, and so does interpolation between
two measured group sizes that both exceed n (both multi-node measurements); otherwise the time
is max(intra-node estimate, inter-node estimate). The intra-node estimate is the table at the
largest measured group size <= n (the fallback model at group size n when the kind has none:
alpha-beta, or NCCL's ring model on tableless devices, `cost/nccl_model.py`): the
NVLink part of a multi-node collective is at least as slow as a node-wide collective of the
same payload. The inter-node estimate is `InterNode.time_us`, an alpha-beta model of the
network (see there). Tables measured within one node never reach this path, so group sizes
<= n behave exactly as above.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lancet_mlir.dialects.collectives import kind_aliases, table_kinds
from lancet_mlir.dialects.vocab import CollectiveKind
from lancet_mlir.support.errors import UserError

KINDS: tuple[CollectiveKind, ...] = table_kinds()
"""Collective kinds with their own tables (`comm.all_to_allv` is costed as `all_to_all`):
the collective registry's table kinds."""

_KIND_ALIASES: dict[str, CollectiveKind] = kind_aliases()
"""Every spelling of every kind -> its table kind (from the collective registry)."""


def canonical_kind(name: str) -> CollectiveKind | None:
    """The table kind for a collective name or alias (`all-reduce`, `alltoall`, ...), or None."""
    return _KIND_ALIASES.get(name.strip().lower())


# ---- one fitted curve --------------------------------------------------------------------------
def isotonic_fit(ys: Sequence[float], weights: Sequence[float]) -> list[float]:
    """Weighted least-squares non-decreasing fit of `ys` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [weighted mean, weight, number of points]
    for y, w in zip(ys, weights, strict=True):
        blocks.append([y, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            y2, w2, n2 = blocks.pop()
            y1, w1, n1 = blocks[-1]
            blocks[-1] = [(y1 * w1 + y2 * w2) / (w1 + w2), w1 + w2, n1 + n2]
    out: list[float] = []
    for mean, _, n in blocks:
        out.extend([mean] * int(n))
    return out


@dataclass(frozen=True)
class PiecewiseLinear:
    """A fitted (x -> y) curve: sorted distinct `xs`, their `ys` (see the module doc)."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    @classmethod
    def fit(cls, samples: Iterable[tuple[float, float]], monotone: bool = True) -> PiecewiseLinear:
        """Fit samples (x, y): average duplicate x, then (if `monotone`) isotonic regression."""
        sums: dict[float, list[float]] = {}
        for x, y in samples:
            acc = sums.setdefault(float(x), [0.0, 0.0])
            acc[0] += float(y)
            acc[1] += 1.0
        if not sums:
            raise ValueError("cannot fit a curve to no samples")
        xs = sorted(sums)
        ys = [sums[x][0] / sums[x][1] for x in xs]
        if monotone:
            ys = isotonic_fit(ys, [sums[x][1] for x in xs])
        return cls(tuple(xs), tuple(ys))

    def __call__(self, x: float) -> float:
        """Evaluate: interpolation inside, linear extrapolation outside, clamped at >= 0.

        Above the last sample the slope is that of the last *rising* segment: isotonic
        pooling often leaves a flat tail (a noisy last sample pooled with its neighbour), and
        a flat extrapolation would make every larger message or matmul cost the same."""
        xs, ys = self.xs, self.ys
        if len(xs) == 1:
            x0, y0 = xs[0], ys[0]
            return y0 if x <= x0 or x0 <= 0 else y0 * x / x0
        if x > xs[-1]:
            return ys[-1] + self.top_slope() * (x - xs[-1])
        i = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
        slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
        return max(0.0, ys[i] + slope * (x - xs[i]))

    def top_slope(self) -> float:
        """Slope of the last segment with a positive slope (0 for a flat or 1-point curve)."""
        xs, ys = self.xs, self.ys
        for i in range(len(xs) - 2, -1, -1):
            if ys[i + 1] > ys[i]:
                return (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
        return 0.0


# ---- alpha-beta --------------------------------------------------------------------------------
def bus_factor(kind: str, group_size: int | None) -> float:
    """nccl-tests' bus-bandwidth factor of a ring algorithm: bytes each rank sends per payload
    byte. allreduce 2(G-1)/G, allgather/reduce_scatter/all_to_all (G-1)/G; unknown G: the
    large-group limit (2 or 1)."""
    twice = canonical_kind(kind) == CollectiveKind.ALLREDUCE
    if group_size is None:
        return 2.0 if twice else 1.0
    base = (group_size - 1) / group_size
    return 2.0 * base if twice else base


@dataclass(frozen=True)
class AlphaBeta:
    """t = alpha_us + beta_us_per_byte * bytes * bus_factor(kind, G); 0 for a 1-rank group.

    `1 / beta` is the bus bandwidth nccl-tests reports (busbw), so measured busbw plugs in
    directly.
    """

    alpha_us: float
    beta_us_per_byte: float
    name = "alpha-beta"

    @classmethod
    def from_busbw(cls, alpha_us: float, busbw_gb_per_s: float) -> AlphaBeta:
        """From a latency in µs and a bus bandwidth in GB/s (1e9 bytes/s)."""
        return cls(alpha_us, 1e6 / (busbw_gb_per_s * 1e9))

    def time_us(self, kind: str, nbytes: float, group_size: int | None) -> float:
        """Predicted time of one collective of `nbytes` payload bytes."""
        if group_size is not None and group_size <= 1:
            return 0.0
        return self.alpha_us + self.beta_us_per_byte * nbytes * bus_factor(kind, group_size)

    def describe(self) -> str:
        """One phrase for notes: latency and bus bandwidth."""
        return f"alpha-beta (alpha {self.alpha_us:g} us, busbw {1e-3 / self.beta_us_per_byte:.0f} GB/s)"


class IntraNodeModel(Protocol):
    """A table-free model of a collective within one NVLink domain: `AlphaBeta`, or NCCL's
    own protocol-aware model (`cost/nccl_model.NcclRing`)."""

    @property
    def name(self) -> str:
        """A short name for notes."""
        ...

    def time_us(self, kind: str, nbytes: float, group_size: int | None) -> float:
        """Predicted time of one collective of `nbytes` payload bytes."""
        ...

    def describe(self) -> str:
        """One phrase for notes."""
        ...


# ---- the network between nodes ------------------------------------------------------------------
NETWORK_EFFICIENCY = 0.8
"""Fraction of the NICs' line rate a large multi-node collective reaches. NCCL over InfiniBand
reaches roughly 75-90 %: e.g. two A100 nodes with 8 x 100 Gb/s NICs each reported an all-reduce
busbw of ~600 of the 800 Gb/s line rate, which NCCL's maintainers called about as expected
(github.com/NVIDIA/nccl/issues/495). 0.8 sits in that range."""


@dataclass(frozen=True)
class InterNode:
    """Alpha-beta model of a collective whose group spans several nodes.

        t = latency_us + nic_bytes / (gbps_per_gpu * 1e9 / 8 * efficiency)

    Each node holds `gpus_per_node` GPUs with one NIC of `gbps_per_gpu` Gb/s per GPU (DGX
    layout; a node with fewer, faster NICs is described by its per-GPU share). `nic_bytes` is
    what the busiest NIC sends for a payload of S bytes over G ranks. Groups are assumed packed
    onto as few nodes as possible; the node with the fewest group members, m of them (m =
    `gpus_per_node` when G is a multiple of it), is the bottleneck:

    * ring allreduce: every hop of a ring carries 2(G-1)/G x S. NCCL lays each ring out node
      by node, so one hop per ring leaves each node, and it runs several rings over different
      NICs: a node's NICs together send 2(G-1)/G x S, each 2(G-1)/G x S / m. That is why
      nccl-tests' multi-node busbw approaches a node's aggregate NIC bandwidth, not one NIC's;
    * allgather / reduce_scatter (rings): (G-1)/G x S / m;
    * all_to_all: each GPU sends S/G to every rank, (G-m) of which are off its node, through
      its own NIC: (G-m)/G x S.

    The latency is a constant per collective (no log G or per-ring-step growth): multi-node
    collectives that are small enough for latency to matter are dominated by the intra-node
    table in `CommModel`'s max() anyway.
    """

    gpus_per_node: int
    gbps_per_gpu: float
    latency_us: float
    efficiency: float = NETWORK_EFFICIENCY

    def nodes(self, group_size: int) -> int:
        """Nodes a packed group of `group_size` ranks occupies."""
        return -(-group_size // self.gpus_per_node)

    def nic_bytes(self, kind: str, nbytes: float, group_size: int) -> float:
        """Bytes the busiest NIC sends for one collective (0 within one node)."""
        if group_size <= self.gpus_per_node:
            return 0.0
        smallest = group_size - self.gpus_per_node * (self.nodes(group_size) - 1)
        if canonical_kind(kind) == CollectiveKind.ALL_TO_ALL:
            return nbytes * (group_size - smallest) / group_size
        return nbytes * bus_factor(kind, group_size) / smallest

    def time_us(self, kind: str, nbytes: float, group_size: int) -> float:
        """Network time of one collective; 0 for a group within one node."""
        if group_size <= self.gpus_per_node:
            return 0.0
        bytes_per_us = self.gbps_per_gpu * 1e9 / 8 * self.efficiency / 1e6
        return self.latency_us + self.nic_bytes(kind, nbytes, group_size) / bytes_per_us

    def describe(self) -> str:
        """One phrase for notes: bandwidth, efficiency, latency."""
        return (
            f"{self.gbps_per_gpu:g} Gb/s per GPU x {self.efficiency:g} efficiency, "
            f"latency {self.latency_us:g} us"
        )


# ---- raw tables --------------------------------------------------------------------------------
@dataclass
class CommTable:
    """Measured samples `(bytes, time_us)` keyed by (kind, group size), before fitting."""

    samples: dict[tuple[str, int], list[tuple[int, float]]] = field(default_factory=dict)

    def add(self, kind: str, group_size: int, nbytes: int, time_us: float) -> None:
        """Add one sample (kind may be an alias; validated)."""
        canon = canonical_kind(kind)
        if canon is None:
            raise UserError(f"unknown collective kind {kind!r} (known: {', '.join(KINDS)})")
        if group_size < 1:
            raise UserError(f"group size must be >= 1, got {group_size}")
        if nbytes < 0:
            raise UserError(f"message size must be >= 0 bytes, got {nbytes}")
        if not math.isfinite(time_us) or time_us < 0:
            raise UserError(f"time must be finite and >= 0 µs, got {time_us}")
        self.samples.setdefault((canon, group_size), []).append((int(nbytes), float(time_us)))

    def extend(self, other: CommTable) -> CommTable:
        """Pool `other`'s samples into this table (in place) and return self."""
        for key, rows in other.samples.items():
            self.samples.setdefault(key, []).extend(rows)
        return self

    def keys(self) -> list[tuple[str, int]]:
        """The (kind, group size) pairs present, sorted."""
        return sorted(self.samples)

    def rows(self) -> list[tuple[str, int, int, float]]:
        """All samples as (kind, group size, bytes, time), sorted by kind, group and size
        (samples of equal size keep their input order)."""
        out = []
        for kind, g in self.keys():
            for nbytes, t in sorted(self.samples[(kind, g)], key=lambda s: s[0]):
                out.append((kind, g, nbytes, t))
        return out

    def fit(self) -> dict[tuple[str, int], PiecewiseLinear]:
        """One monotone piecewise-linear curve per (kind, group size)."""
        return {key: PiecewiseLinear.fit(self.samples[key]) for key in self.keys()}

    def __len__(self) -> int:
        return sum(len(v) for v in self.samples.values())


# ---- the model ---------------------------------------------------------------------------------
class CommModel:
    """Collective time from fitted tables, falling back to alpha-beta for uncovered kinds."""

    def __init__(
        self,
        curves: dict[tuple[str, int], PiecewiseLinear],
        alpha_beta: IntraNodeModel,
        label: str = "",
        internode: InterNode | None = None,
        link_bytes_per_s: float | None = None,
    ):
        self.curves = dict(curves)
        self.alpha_beta = alpha_beta
        self.label = label
        self.internode = internode  # None: every group is costed as if within one node
        # the GPU's link bandwidth (NVLink): above a table's largest size no collective moves
        # its bus bytes faster than this (None: no such floor)
        self.link_bytes_per_s = link_bytes_per_s
        self._sizes: dict[str, list[int]] = {}
        for kind, g in sorted(self.curves):
            self._sizes.setdefault(kind, []).append(g)
        self._notes: dict[str, None] = {}  # insertion-ordered set
        self.used: dict[tuple[str, int], None] = {}  # curves evaluated so far, first use first

    @classmethod
    def from_table(
        cls,
        table: CommTable,
        alpha_beta: IntraNodeModel,
        label: str = "",
        internode: InterNode | None = None,
        link_bytes_per_s: float | None = None,
    ) -> CommModel:
        """Fit `table` and build the model."""
        return cls(table.fit(), alpha_beta, label, internode, link_bytes_per_s)

    @property
    def notes(self) -> list[str]:
        """Decisions taken while costing (group-size substitutions, fallbacks), in order."""
        return list(self._notes)

    def note(self, text: str) -> None:
        """Record a note once."""
        self._notes.setdefault(text, None)

    def _curve(self, kind: str, group_size: int, nbytes: float) -> float:
        """Evaluate the curve of (kind, group size), remembering that it was used.

        Above the table's largest size the time grows at least at the link bandwidth: a
        table measured on small messages only (flat: latency) would otherwise cost any
        larger message like its largest one."""
        self.used.setdefault((kind, group_size), None)
        curve = self.curves[(kind, group_size)]
        t = curve(nbytes)
        top = curve.xs[-1]
        if self.link_bytes_per_s is None or nbytes <= top:
            return t
        per_byte = bus_factor(kind, group_size) / self.link_bytes_per_s * 1e6
        floor = curve(top) + (nbytes - top) * per_byte
        if floor <= t:
            return t
        self.note(
            f"{kind}: group size {group_size}: payloads above the table's largest size "
            f"({top:.0f} bytes) grow slower than the link bandwidth allows; extrapolated at "
            f"{self.link_bytes_per_s / 1e9:g} GB/s"
        )
        return floor

    def group_sizes(self, kind: str) -> list[int]:
        """Measured group sizes of `kind`, ascending."""
        canon = canonical_kind(kind) or kind
        return list(self._sizes.get(canon, []))

    def time_us(self, kind: str, nbytes: float, group_size: int | None) -> float:
        """Time of one collective of `kind` moving `nbytes` (nccl-tests payload convention)."""
        canon = canonical_kind(kind)
        if canon is None:
            raise UserError(f"unknown collective kind {kind!r}")
        if group_size is not None and group_size <= 1:
            return 0.0
        net = self.internode
        if (
            net is not None
            and group_size is not None
            and self._unmeasured_multinode(net, canon, group_size)
        ):
            return self._multinode_time(net, canon, nbytes, group_size)
        sizes = self._sizes.get(canon)
        if not sizes:
            self.note(
                f"{canon}: no measured table{' in ' + self.label if self.label else ''}; "
                f"used {self.alpha_beta.describe()}"
            )
            return self.alpha_beta.time_us(canon, nbytes, group_size)
        return self._table_time(canon, sizes, nbytes, group_size)

    def _table_time(
        self, kind: str, sizes: list[int], nbytes: float, group_size: int | None
    ) -> float:
        if group_size is None:
            g = sizes[-1]
            if len(sizes) > 1:
                self.note(
                    f"{kind}: group size unknown (no groups, lancet.world_size or --world-size); "
                    f"used the largest measured group size {g}"
                )
            return self._curve(kind, g, nbytes)
        if group_size in sizes:
            return self._curve(kind, group_size, nbytes)
        if group_size < sizes[0] or group_size > sizes[-1]:
            g = sizes[0] if group_size < sizes[0] else sizes[-1]
            self.note(
                f"{kind}: group size {group_size} not measured; used the nearest measured "
                f"group size {g}"
            )
            return self._curve(kind, g, nbytes)
        hi = bisect.bisect_right(sizes, group_size)
        g1, g2 = sizes[hi - 1], sizes[hi]
        self.note(
            f"{kind}: group size {group_size} not measured; interpolated between measured "
            f"group sizes {g1} and {g2}"
        )
        t1 = self._curve(kind, g1, nbytes)
        t2 = self._curve(kind, g2, nbytes)
        return t1 + (t2 - t1) * (group_size - g1) / (g2 - g1)

    # ---- groups spanning nodes -----------------------------------------------------------------
    def _unmeasured_multinode(self, net: InterNode, kind: str, group_size: int) -> bool:
        """True for a multi-node group that no measurement covers: not measured at exactly
        `group_size`, nor between two measured group sizes that both span nodes."""
        if group_size <= net.gpus_per_node:
            return False
        multinode = [g for g in self._sizes.get(kind, []) if g > net.gpus_per_node]
        if group_size in multinode:
            return False
        return not (multinode and multinode[0] < group_size < multinode[-1])

    def _multinode_time(self, net: InterNode, kind: str, nbytes: float, group_size: int) -> float:
        """max(intra-node estimate, inter-node estimate) (module doc), noted once."""
        per_node = net.gpus_per_node
        intra_sizes = [g for g in self._sizes.get(kind, []) if g <= per_node]
        if intra_sizes:
            intra = self._curve(kind, intra_sizes[-1], nbytes)
            source = f"measured table at group size {intra_sizes[-1]}"
        else:
            intra = self.alpha_beta.time_us(kind, nbytes, per_node)
            source = f"{self.alpha_beta.name} at group size {per_node}"
        self.note(
            f"{kind}: group size {group_size} spans {net.nodes(group_size)} nodes of "
            f"{per_node} GPUs; used the larger of the intra-node {source} and the inter-node "
            f"alpha-beta model ({net.describe()})"
        )
        return max(intra, net.time_us(kind, nbytes, group_size))
