"""Cost sources: each answers "the time of this op in µs, or None"; the cost model asks its
chain of sources in order and takes the first answer.

The default chain (`CostModel.build`), first that answers:

| name | answers |
|---|---|
| `attribute` | the op's own `lancet.time_us` (never scaled by `lancet.fill`) |
| `in-place` | 0 for an in-place `comp.concat` (its parts were written into its buffer), a `comp.add` (a partial sum its part's GEMM accumulated) or a `comp.split` into contiguous row blocks (views): no kernel runs; `dialects/destination.py` |
| `profile` | a profile entry for the op's key (x its fill), else for its origin's key (x share or bytes, below) |
| (custom) | `CostConfig.sources`: caller sources, e.g. trace-measured durations |
| `table` | a collective whose kind a comm table holds (at fill x its payload bytes) |
| `alpha-beta` | any other collective (the device's alpha-beta model) |
| `roofline` | a compute op with known FLOPs / bytes (x fill, before the launch floor) |

An op none answers costs 0 (`zero`) and is named in `CostModel.warn_unknown`'s warning.

**Adding a source** (e.g. durations read from a trace or a PyTorch profile): write a class with
a `name` (its label in reports' `time_sources` and trace events' `time_source`), `measured`
(True when its times are measurements of a run, False for estimates) and
`time_us(op, world_size) -> float | None`; return None for ops it knows nothing about, and
apply the op's `lancet.fill` (`graph.fill.op_fill`) if its times are of full-size ops. Pass it
in `CostConfig(sources=(MySource(...),))`: custom sources are asked after the profile and
before the tables and the roofline (a profile and an explicit attribute still win). A source
must be hashable (a frozen dataclass is), since configs key the model cache. For full control
of the order, `CostModel.build(cfg, chain=...)` takes the whole chain.

**Derived ops.** A pass that creates an op from another (a part of a partitioned op, a chunk)
records the original op's key in `lancet.origin` and the share of its work the new op does in
`lancet.share` (absent: 1). A measured source then costs the derived op by its own key if it
has it, else by its origin's key times share x fill, so a partitioned program is costed by the
same measurements as the program it came from: without this, parts whose shapes the profile
lacks fell back to the roofline of another device and partitioning looked like it removed work.
The splits, concatenations, reshapes and partial sums a partitioning pass adds around a
region only move data: they record the op they came from in `lancet.origin` and the bytes
that op's measured time moves in `lancet.origin_bytes`, and a measured source without their
own key costs them at the origin's time per byte (origin time x own bytes / origin bytes x
fill; docs/design.md, "Derived ops"). Ops with no origin are costed by their own key or the
next source; `time_source.source_summary` reports blocks whose compute mixes measured and
estimated sources.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Protocol, runtime_checkable

from xdsl.dialects.builtin import FloatAttr, IntegerAttr, StringAttr
from xdsl.ir import Operation

from lancet_mlir import attrs
from lancet_mlir.cost.comm_model import CommModel
from lancet_mlir.cost.devices import Device
from lancet_mlir.cost.keys import op_key
from lancet_mlir.cost.profile_db import ProfileDB
from lancet_mlir.cost.roofline import numeric_attr, op_flops_bytes, op_roofline_us
from lancet_mlir.dialects.comm import CollectiveOp
from lancet_mlir.dialects.comp import AddOp, ConcatOp, SplitOp
from lancet_mlir.dialects.destination import accumulates_in_place, in_place_concat, view_split
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.graph.fill import op_fill
from lancet_mlir.support.errors import UserError

ZERO_COST_OPS: frozenset[str] = frozenset(
    {
        "arith.constant",
        "builtin.unrealized_conversion_cast",
        "func.return",
        "mhlo.constant",
        "stablehlo.constant",
        "stablehlo.get_tuple_element",
        "stablehlo.optimization_barrier",
        "stablehlo.return",
        "stablehlo.tuple",
        "tensor.empty",
    }
)
"""Ops that cost nothing by nature (constants, tuples, terminators): no warning for them."""


@runtime_checkable
class CostSource(Protocol):
    """One source of op times in the cost model's chain (module doc)."""

    @property
    def name(self) -> str:
        """Label in reports (`time_sources`) and trace events (`time_source`)."""
        ...

    @property
    def measured(self) -> bool:
        """True for measurements of a run (profile, trace), False for estimates."""
        ...

    def time_us(self, op: Operation, world_size: int | None) -> float | None:
        """The op's time in µs, or None when this source knows nothing about it."""
        ...


def explicit_time_us(op: Operation) -> float | None:
    """The op's `lancet.time_us` attribute, validated, or None."""
    return numeric_attr(op, attrs.TIME_US)


def op_origin(op: Operation) -> tuple[str, float] | None:
    """(origin key, share) of an op a pass derived from another (`lancet.origin`,
    `lancet.share`, default 1), or None; UserError naming the op for a malformed value."""
    attr = op.attributes.get(attrs.ORIGIN)
    if attr is None:
        return None
    if not isinstance(attr, StringAttr):
        raise UserError(
            f"{op_display_name(op)}: {attrs.ORIGIN} must be an op key string, got {attr}", op=op
        )
    share = op.attributes.get(attrs.SHARE)
    if share is None:
        return attr.data, 1.0
    if isinstance(share, IntegerAttr | FloatAttr) and not isinstance(share.value.data, bool):
        value = float(share.value.data)
        if math.isfinite(value) and 0 < value <= 1:
            return attr.data, value
    raise UserError(
        f"{op_display_name(op)}: {attrs.SHARE} must be a number in (0, 1], got {share}", op=op
    )


def op_origin_bytes(op: Operation) -> float | None:
    """`lancet.origin_bytes` of a data-moving op a pass derived from another (module doc),
    or None; UserError naming the op for a malformed value."""
    attr = op.attributes.get(attrs.ORIGIN_BYTES)
    if attr is None:
        return None
    if isinstance(attr, IntegerAttr | FloatAttr) and not isinstance(attr.value.data, bool):
        value = float(attr.value.data)
        if math.isfinite(value) and value > 0:
            return value
    raise UserError(
        f"{op_display_name(op)}: {attrs.ORIGIN_BYTES} must be a number > 0, got {attr}", op=op
    )


def derived_scale(op: Operation, origin: tuple[str, float]) -> float | None:
    """What the origin's measured time is multiplied by for `op` (before its fill): its
    share, or for a data-moving op (`lancet.origin_bytes`) its own bytes over the origin's;
    None when the op's bytes are unknown."""
    origin_bytes = op_origin_bytes(op)
    if origin_bytes is None:
        return origin[1]
    counted = op_flops_bytes(op)
    return None if counted is None else counted[1] / origin_bytes


class AttributeSource:
    """`lancet.time_us` on the op, as given."""

    name = "attribute"
    measured = False

    def time_us(self, op: Operation, world_size: int | None) -> float | None:
        """The explicit time, unscaled."""
        return explicit_time_us(op)


class InPlaceSource:
    """An in-place `comp.concat` (`dialects.destination.in_place_concat`) costs 0 under every
    later source: its parts' writers wrote their rows into its buffer, nothing is copied and
    no kernel runs (a profile entry of its key would have measured a copy). So does a partial
    sum accumulated in place (`destination.accumulates_in_place`): the part's GEMM added its
    product into the running sum (beta = 1). And so does a split into contiguous row blocks
    (`destination.view_split`): its results are views of its input."""

    name = "in-place"
    measured = False

    def time_us(self, op: Operation, world_size: int | None) -> float | None:
        """0 for an in-place concat, an in-place accumulation or a view split, else None."""
        if isinstance(op, SplitOp):
            return 0.0 if view_split(op) else None
        if isinstance(op, ConcatOp):
            return 0.0 if in_place_concat(op) else None
        if isinstance(op, AddOp):
            return 0.0 if accumulates_in_place(op) else None
        return None


class ProfileSource:
    """Profile entries by op key (module doc: own key x fill, else origin key x share x fill).

    A collective with a fill < 1 is skipped (its entry measured the padded exchange). Records
    which distinct compute op keys it was asked for and found or not (coverage notes)."""

    name = "profile"
    measured = True

    def __init__(self, profile: ProfileDB):
        self.profile = profile
        # distinct compute op keys looked up: found / not found (insertion ordered, so the
        # example key in the note is the first one met)
        self.found: dict[str, None] = {}
        self.missing: dict[str, None] = {}

    def time_us(self, op: Operation, world_size: int | None) -> float | None:
        """The measured time of the op's key, or of its origin's, scaled; None if neither."""
        fill = op_fill(op)
        is_comm = isinstance(op, CollectiveOp)
        if fill < 1 and is_comm:
            return None
        key = op_key(op)
        measured = self.profile.mean_us(key)
        scale = fill
        if measured is None:
            origin = op_origin(op)
            if origin is not None:
                scaled = derived_scale(op, origin)
                if scaled is not None:
                    measured = self.profile.mean_us(origin[0])
                    scale = fill * scaled
        if not is_comm and op_display_name(op) not in ZERO_COST_OPS:
            (self.missing if measured is None else self.found).setdefault(key, None)
        return None if measured is None else measured * scale


class TableSource:
    """A collective whose kind the comm model has a fitted table for."""

    name = "table"
    measured = False

    def __init__(self, comm: CommModel):
        self.comm = comm
        self.used = False  # a collective was costed (by this source or AlphaBetaSource)

    def time_us(self, op: Operation, world_size: int | None) -> float | None:
        """Table time at fill x payload bytes, or None for compute or an untabled kind."""
        if not isinstance(op, CollectiveOp) or not self.comm.group_sizes(op.KIND):
            return None
        return self.collective_us(op, world_size)

    def collective_us(self, op: CollectiveOp, world_size: int | None) -> float:
        """The comm model's time of `op` (tables, alpha-beta fallback, inter-node)."""
        self.used = True
        # no groups and no world size: an all-gather's or reduce-scatter's shapes say it
        group = op.group_size(world_size) or op.shape_group_size()
        return self.comm.time_us(op.KIND, op.payload_bytes() * op_fill(op), group)


class AlphaBetaSource:
    """Any collective: the comm model of `table` (alpha-beta for kinds without a table)."""

    name = "alpha-beta"
    measured = False

    def __init__(self, table: TableSource):
        self.table = table

    def time_us(self, op: Operation, world_size: int | None) -> float | None:
        """The comm model's time, or None for compute."""
        if not isinstance(op, CollectiveOp):
            return None
        return self.table.collective_us(op, world_size)


class RooflineSource:
    """The device's roofline estimate of a compute op (x fill before the launch floor)."""

    name = "roofline"
    measured = False

    def __init__(self, device: Device):
        self.device = device

    def time_us(self, op: Operation, world_size: int | None) -> float | None:
        """The estimate, or None when the op's FLOPs and bytes are unknown."""
        if isinstance(op, CollectiveOp):
            return None
        return op_roofline_us(op, self.device, op_fill(op))


def check_source(source: object) -> CostSource:
    """`source` if it is a usable CostSource (hashable, with name and time_us), else
    UserError naming what is wrong."""
    if not isinstance(source, CostSource) or not isinstance(getattr(source, "name", None), str):
        raise UserError(
            f"cost source {source!r}: needs a str `name`, a bool `measured` and "
            "time_us(op, world_size)"
        )
    if not isinstance(source, Hashable):
        raise UserError(f"cost source {source.name}: must be hashable (configs key a cache)")
    return source
