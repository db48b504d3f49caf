"""The cost model every pass uses: the time (µs) of each op.

The time of an op is the answer of the first source of the model's chain that answers
(`sources.py`: the `CostSource` protocol, the built-in sources and how to add one):
1. `attribute`: an explicit `lancet.time_us` attribute on the op; then `in-place`: 0 for a
   `comp.concat` whose parts were written into its buffer (`dialects/destination.py`);
2. `profile`: a profile entry for the op's exact key (`op_key`), also for collectives: a
   measured time of exactly this collective beats a table fitted over many sizes (Lancet
   instead overwrote profiled collective times with its cost model, lancet-algorithms.md §1.4;
   we keep the exact measurement because the key pins operand shapes and dtype, and the table
   does not); for an op a pass derived from another (`lancet.origin`), the origin's entry times
   its share when the op's own key has none;
3. the caller's sources (`CostConfig.sources`, e.g. trace-measured durations), in order;
4. collectives, `table` / `alpha-beta`: the comm model (fitted tables per kind and group
   size, alpha-beta fallback, and for groups larger than the device's `gpus_per_node` the
   larger of the intra-node table and an inter-node network model, `comm_model.InterNode`),
   on the payload bytes (nccl-tests convention); `comm.all_to_allv` is costed as all_to_all;
5. compute, `roofline`: the roofline estimate on the device (`roofline.op_roofline_us`), which
   never goes below the device's `min_kernel_us` launch floor except for free ops (measured or
   explicit times are used as given: they are never floored);
6. else 0, and the op is listed in the one summary warning `warn_unknown()` prints.

`lancet.fill = f` (graph/fill.py) on an op that only processes f of its padded rows scales
steps 2-5: a compute op's profiled time by f, its roofline estimate by f before the launch
floor (a small kernel still pays its launch); a collective is costed by the comm model at
f x its payload bytes (the table is looked up at the scaled size, not the time scaled), and
skips a profile entry, which measured the padded exchange. Step 1 is never scaled.

Configuration: a `CostConfig` (device, cluster preset, network overrides, files, extra
sources), built by the costing passes from their options and the module's `lancet.*`
attributes (`passes/costing.py`, `cost/settings.py`); there is no process-wide "active" model.

Comm tables: the device's shipped table, where `--comm-table` files override it per
(kind, group size); several user files pool their samples. Several profiles are merged
(count-weighted). Models are cached per CostConfig and the size and modification time of its
files, so a profile rewritten in the same process is read again.

With profiles, the model records which distinct compute op keys it looked up and did not find
(collectives are not counted: profiles normally hold compute ops only, comm tables cover the
rest); `notes` then says how many of the compute keys the profiles covered, so a profile
measured on another model (other shapes or dtype: no key matches) does not go unnoticed.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

from xdsl.ir import Operation

from lancet_mlir import attrs
from lancet_mlir.cost.clusters import get_cluster
from lancet_mlir.cost.comm_loaders import load_comm_table
from lancet_mlir.cost.comm_model import CommModel, CommTable, InterNode
from lancet_mlir.cost.devices import Device, canonical_device_name, get_device
from lancet_mlir.cost.fileio import data_path
from lancet_mlir.cost.profile_db import ProfileDB
from lancet_mlir.cost.sources import (
    ZERO_COST_OPS,
    AlphaBetaSource,
    AttributeSource,
    CostSource,
    InPlaceSource,
    ProfileSource,
    RooflineSource,
    TableSource,
    check_source,
    explicit_time_us,
)
from lancet_mlir.dialects.comm import CollectiveOp, module_world_size
from lancet_mlir.dialects.comp import AddOp, ConcatOp
from lancet_mlir.graph.dataflow import DataflowGraph, op_display_name
from lancet_mlir.support.errors import UserError
from lancet_mlir.support.numbering import AttrNumbers

__all__ = [
    "NOT_COSTED_ATTRS",
    "ZERO_COST_OPS",
    "CostConfig",
    "CostKeys",
    "CostModel",
    "TimeMemo",
    "cost_signature",
    "explicit_time_us",
]


DEFAULT_DEVICE = "h100"
"""The device costed when neither a device nor a cluster is given."""


@dataclass(frozen=True)
class Hardware:
    """What a CostConfig's device and cluster settings resolve to."""

    device: Device
    cluster: str | None
    internode: InterNode


@dataclass(frozen=True)
class CostConfig:
    """What the cost model is built from: profile files (.json / .profile), comm-table files,
    the device, the cluster preset (device + network), network overrides, and an optional
    world size overriding the modules' `lancet.world_size`.

    `device` None: the cluster's device, else h100. `gpus_per_node` / `network_gbps` None: the
    cluster's values, else the device's defaults (devices.py). An explicit `device` with a
    cluster keeps the cluster's network and replaces its GPU.
    """

    profiles: tuple[str, ...] = ()
    comm_tables: tuple[str, ...] = ()
    device: str | None = None
    world_size: int | None = None
    cluster: str | None = None
    gpus_per_node: int | None = None
    network_gbps: float | None = None
    sources: tuple[CostSource, ...] = ()
    """The caller's cost sources, asked in order after the profile and before the comm tables
    and the roofline (sources.py: how to write one)."""

    def hardware(self) -> Hardware:
        """Resolve device and network (UserError for unknown names or bad numbers)."""
        preset = get_cluster(self.cluster) if self.cluster is not None else None
        device = get_device(self.device or (preset.device if preset else DEFAULT_DEVICE))
        if preset is not None:
            internode = InterNode(
                preset.gpus_per_node, preset.network_gbps_per_gpu, preset.latency_us
            )
        else:
            internode = device.internode()
        if self.gpus_per_node is not None:
            if isinstance(self.gpus_per_node, bool) or self.gpus_per_node < 1:
                raise UserError(f"gpus per node must be an integer >= 1, got {self.gpus_per_node}")
            internode = replace(internode, gpus_per_node=int(self.gpus_per_node))
        if self.network_gbps is not None:
            gbps = self.network_gbps
            if isinstance(gbps, bool) or not (math.isfinite(gbps) and gbps > 0):
                raise UserError(f"network Gb/s per GPU must be a finite number > 0, got {gbps}")
            internode = replace(internode, gbps_per_gpu=float(gbps))
        return Hardware(device, preset.name if preset else None, internode)

    def describe(self) -> dict:
        """What a report says about this configuration (resolved device and network)."""
        hw = self.hardware()
        return {
            "device": hw.device.name,
            "cluster": hw.cluster,
            "gpus_per_node": hw.internode.gpus_per_node,
            "network_gbps_per_gpu": hw.internode.gbps_per_gpu,
            "internode_latency_us": hw.internode.latency_us,
            "profiles": list(self.profiles),
            "comm_tables": list(self.comm_tables),
            "world_size": self.world_size,
        }


def _comm_model(
    cfg: CostConfig, hw: Hardware, notes: list[str]
) -> tuple[CommModel, list[tuple[str, int]]]:
    """The device's default table overridden by the user's tables per (kind, group size), and
    the (kind, group size) pairs the user's tables hold."""
    device = hw.device
    table = CommTable()
    labels: list[str] = []
    if device.comm_table is not None:
        table = load_comm_table(str(data_path(device.comm_table)), device.xla_gpu)
        labels.append(device.comm_table)
        if not device.comm_table.endswith(f"_{device.name}.csv"):
            notes.append(
                f"{device.name}: no comm table of its own; using {device.comm_table} "
                "(same interconnect generation)"
            )
    user = CommTable()
    for path in cfg.comm_tables:
        user.extend(load_comm_table(path, device.xla_gpu))
        labels.append(os.path.basename(path))
    for key, rows in user.samples.items():
        table.samples[key] = list(rows)
    model = CommModel.from_table(
        table,
        device.alpha_beta,
        " + ".join(labels),
        hw.internode,
        device.nvlink_bytes_per_s,
    )
    return model, user.keys()


class CostModel:
    """Op times in µs from a CostConfig (see the module doc for the priority)."""

    def __init__(
        self,
        config: CostConfig,
        device: Device,
        profile: ProfileDB,
        comm: CommModel,
        user_comm_keys: Sequence[tuple[str, int]] = (),
        chain: Sequence[CostSource] | None = None,
    ):
        self.config = config
        self.device = device
        self.profile = profile
        self.comm = comm
        self.user_comm_keys = list(user_comm_keys)  # (kind, group size) of --comm-table files
        self._profile_source = ProfileSource(profile)
        self._table_source = TableSource(comm)
        self.chain: tuple[CostSource, ...] = tuple(
            check_source(s) for s in (self.default_chain() if chain is None else chain)
        )
        """The sources asked in order (sources.py); the first answer is the op's time."""
        self._notes: list[str] = []
        self._unknown: dict[str, int] = {}

    def default_chain(self) -> list[CostSource]:
        """attribute > in-place (an in-place concat: 0) > profile (when the config has
        profiles) > the config's sources >
        table > alpha-beta > roofline."""
        chain: list[CostSource] = [AttributeSource(), InPlaceSource()]
        if self.config.profiles:
            chain.append(self._profile_source)
        chain.extend(self.config.sources)
        chain += [
            self._table_source,
            AlphaBetaSource(self._table_source),
            RooflineSource(self.device),
        ]
        return chain

    # ---- construction ------------------------------------------------------------------------
    @classmethod
    def build(cls, cfg: CostConfig, chain: Sequence[CostSource] | None = None) -> CostModel:
        """Load every file of `cfg` now (bad files raise UserError naming the file). `chain`
        replaces the default chain (`default_chain`) as a whole."""
        hw = cfg.hardware()
        device = hw.device
        if cfg.world_size is not None and cfg.world_size < 1:
            raise UserError(f"world size must be >= 1, got {cfg.world_size}")
        notes: list[str] = []
        profile = ProfileDB()
        for path in cfg.profiles:
            loaded = ProfileDB.load(path)
            measured = loaded.metadata.get("device")
            if measured and canonical_device_name(str(measured)) != device.name:
                notes.append(
                    f"{path}: measured on {measured}, costing for {device.name}: "
                    "profiled times are used as they are"
                )
            profile.merge(loaded)
        comm, user_keys = _comm_model(cfg, hw, notes)
        model = cls(cfg, device, profile, comm, user_keys, chain)
        model._notes.extend(notes)
        return model

    @classmethod
    def from_config(cls, cfg: CostConfig) -> CostModel:
        """The (cached) model of `cfg`; rebuilt when one of its files changed on disk."""
        stamps = _file_stamps(cfg)
        cached = _MODELS.get(cfg)
        if cached is not None and cached[0] == stamps:
            return cached[1]
        model = cls.build(cfg)
        _MODELS[cfg] = (stamps, model)
        return model

    # ---- queries -----------------------------------------------------------------------------
    @property
    def notes(self) -> list[str]:
        """Decisions worth reporting (substituted group sizes, fallbacks, device mismatch,
        compute op keys the profiles did not cover)."""
        return [*self._notes, *self._coverage_notes(), *self.comm.notes]

    def _coverage_notes(self) -> list[str]:
        """What the user's files did not cover: compute keys missing from the profiles, and
        comm-table (kind, group size) pairs no costed collective used."""
        notes = []
        missing = len(self._profile_source.missing)
        if missing:
            total = missing + len(self._profile_source.found)
            first = next(iter(self._profile_source.missing))
            notes.append(
                f"{', '.join(self.config.profiles)}: no entry for {missing} of the {total} "
                f"distinct compute op key(s) costed (estimated instead), e.g. {first}"
            )
        unused = [k for k in self.user_comm_keys if k not in self.comm.used]
        if unused and self._table_source.used:
            used = ", ".join(_pair(k) for k in self.comm.used) or "none (alpha-beta)"
            notes.append(
                f"{', '.join(self.config.comm_tables)}: {', '.join(_pair(k) for k in unused)} "
                f"not used by any costed collective (tables used: {used})"
            )
        return notes

    def op_time_us(self, op: Operation, world_size: int | None = None) -> float:
        """Time of one op in µs (priority in the module doc)."""
        ws = self.config.world_size if world_size is None else world_size
        return self._time(op, ws)

    def graph_times(self, graph: DataflowGraph, world_size: int | None = None) -> list[float]:
        """One time per node of `graph`, in node order (linear in the graph size)."""
        ws = self.config.world_size if world_size is None else world_size
        if ws is None and graph.ops:
            ws = module_world_size(graph.ops[0])  # one walk up, shared by every node
        return [self._time(op, ws) for op in graph.ops]

    def _time(self, op: Operation, world_size: int | None) -> float:
        t = self._answer(op, world_size)
        return self._no_answer(op) if t is None else t

    def _answer(self, op: Operation, world_size: int | None) -> float | None:
        """The first answer of the chain, None when no source answers."""
        for source in self.chain:
            t = source.time_us(op, world_size)
            if t is not None:
                return t
        return None

    def _no_answer(self, op: Operation) -> float:
        """0, and `op` counted for `warn_unknown` (unless it costs nothing by nature)."""
        name = op_display_name(op)
        if name not in ZERO_COST_OPS:
            self._unknown[name] = self._unknown.get(name, 0) + 1
        return 0.0

    def signature_pure(self) -> bool:
        """True when every source of the chain answers from what `cost_signature` holds
        (the built-in sources; a caller's source may read anything, e.g. an op's location),
        so `TimeMemo` may share one answer among ops of equal signatures."""
        return all(type(s) in _SIGNATURE_SOURCES for s in self.chain)

    def time_and_source(self, op: Operation, world_size: int | None = None) -> tuple[float, str]:
        """The op's time and the name of the source that gave it (`zero`: none did; such an
        op is not counted for `warn_unknown`)."""
        ws = self.config.world_size if world_size is None else world_size
        for source in self.chain:
            t = source.time_us(op, ws)
            if t is not None:
                return t, source.name
        return 0.0, "zero"

    def source_of(self, name: str) -> CostSource | None:
        """The chain's source called `name`, if any."""
        return next((s for s in self.chain if s.name == name), None)

    def unknown_ops(self) -> list[str]:
        """Names of ops costed 0 for lack of any information, sorted."""
        return sorted(self._unknown)

    def warn_unknown(self, tool: str = "lancet") -> list[str]:
        """Print one summary warning on stderr naming the ops costed 0 (once per batch) and
        return their names."""
        names = self.unknown_ops()
        if names:
            sys.stderr.write(
                f"{tool}: warning: no time for {len(names)} op kind(s) (no {attrs.TIME_US}, "
                f"profile entry or FLOP/byte count), costed 0 us: {', '.join(names)}\n"
            )
        self._unknown.clear()
        return names


_SIGNATURE_SOURCES = (
    AttributeSource,
    InPlaceSource,
    ProfileSource,
    TableSource,
    AlphaBetaSource,
    RooflineSource,
)
"""The built-in sources: each answers from the op's name, class, operand and result types,
properties, attributes and the world size (`InPlaceSource` also from the structure around
a concat or add marked in place: `TimeMemo` asks the model for those every time)."""

NOT_COSTED_ATTRS = frozenset((attrs.PART, attrs.ROLE, attrs.START_US, attrs.END_US, attrs.STREAM))
"""Annotations that do not change an op's time (the part index, the role, a simulation's
timings); `lancet.time_us` does and is kept."""


def cost_signature(op: Operation) -> tuple:
    """What an op's time under the built-in sources depends on: name, types, properties
    and attributes (except `NOT_COSTED_ATTRS`)."""
    kept = tuple(sorted((k, v) for k, v in op.attributes.items() if k not in NOT_COSTED_ATTRS))
    return (
        op.name,
        tuple(v.type for v in op.operands),
        tuple(r.type for r in op.results),
        tuple(sorted(op.properties.items())),
        kept,
    )


class CostKeys:
    """`cost_signature` as a tuple of small integers, cheap to hash and compare: each
    attribute (a type, property or attribute value) numbered by `support.numbering`
    (`AttrNumbers`: once by value, found again by identity; the partitioners' copies and
    clones share their type objects). Two ops get equal keys exactly when their
    `cost_signature`s are equal. One per pass run (its numbers are not bounded)."""

    def __init__(self) -> None:
        self.numbers = AttrNumbers()

    def key(self, op: Operation) -> tuple:
        """`cost_signature(op)` with every attribute replaced by its number."""
        number = self.numbers.number
        given, props = op.attributes, op.properties
        kept = [(k, number(v)) for k, v in given.items() if k not in NOT_COSTED_ATTRS]
        return (
            op.name,
            tuple([number(v.type) for v in op.operands]),
            tuple([number(r.type) for r in op.results]),
            tuple(sorted([(k, number(v)) for k, v in props.items()])) if props else (),
            tuple(sorted(kept)) if kept else (),
        )


class TimeMemo:
    """A cost model's op times memoised by `cost_signature` (as `CostKeys`) and world size,
    for one pass run: lancet-schedule's candidates are clones of one module, and the layers
    of a model and the parts of a partitioned op repeat the same shapes, so most ops are
    costed by an equal op already. Exact: with a chain of built-in sources (`signature_pure`) equal keys
    get equal answers, and the model's records (profile coverage, comm tables used, notes)
    already hold what a repeated key would add. Not memoised (asked every time): ops no
    source answers (the model counts them for `warn_unknown`), a concat or add marked in
    place (its answer depends on its operands' producers), a collective without a world
    size (its group may come from the enclosing module), and every op when the chain has
    a caller's source. Gives `graph_times` and `op_time_us` like the model."""

    def __init__(self, model: CostModel) -> None:
        self.model = model
        self._pure = model.signature_pure()
        self._times: dict[tuple, float] = {}
        self._keys = CostKeys()

    def op_time_us(self, op: Operation, world_size: int | None = None) -> float:
        """`CostModel.op_time_us`, memoised (class doc)."""
        ws = self.model.config.world_size if world_size is None else world_size
        return self._time(op, ws)

    def graph_times(self, graph: DataflowGraph, world_size: int | None = None) -> list[float]:
        """`CostModel.graph_times`, memoised (class doc)."""
        ws = self.model.config.world_size if world_size is None else world_size
        if ws is None and graph.ops:
            ws = module_world_size(graph.ops[0])  # as the model does: one walk up
        return [self._time(op, ws) for op in graph.ops]

    def _time(self, op: Operation, world_size: int | None) -> float:
        if not self._pure or _asks_structure(op, world_size):
            return self.model._time(op, world_size)
        key = (world_size, self._keys.key(op))
        known = self._times.get(key)
        if known is not None:
            return known
        t = self.model._answer(op, world_size)
        if t is None:
            return self.model._no_answer(op)
        self._times[key] = t
        return t


def _asks_structure(op: Operation, world_size: int | None) -> bool:
    """True when a built-in source's answer for `op` may depend on more than its signature."""
    if isinstance(op, CollectiveOp):
        return world_size is None and op.groups is None
    return isinstance(op, ConcatOp | AddOp) and op.in_place is not None


def _pair(key: tuple[str, int]) -> str:
    """`allreduce at G=8`: a (kind, group size) table key for notes."""
    return f"{key[0]} at G={key[1]}"


_Stamp = tuple[int, int] | None
_MODELS: dict[CostConfig, tuple[tuple[_Stamp, ...], CostModel]] = {}


def forget_unknown_ops() -> None:
    """Drop the ops every cached model costed 0 so far without warning (a run that failed
    before `warn_unknown`): a later run in the same process warns only about its own."""
    for _, model in _MODELS.values():
        model._unknown.clear()


def _file_stamps(cfg: CostConfig) -> tuple[_Stamp, ...]:
    """(size, mtime in ns) of every file of `cfg`, None for a file that cannot be read (its
    error is raised when the model is built)."""
    stamps: list[_Stamp] = []
    for path in (*cfg.profiles, *cfg.comm_tables):
        try:
            st = os.stat(path)
        except OSError:
            stamps.append(None)
            continue
        stamps.append((st.st_size, st.st_mtime_ns))
    return tuple(stamps)
