"""The cost model every pass uses: the time (µs) of each op.

Priority, first that applies:
1. an explicit `lancet.time_us` attribute on the op;
2. a profile entry for the op's exact key (`op_key`), also for collectives: a measured time of
   exactly this collective beats a table fitted over many sizes (Lancet instead overwrote
   profiled collective times with its cost model, lancet-algorithms.md §1.4; we keep the exact
   measurement because the key pins operand shapes and dtype, and the table does not);
3. collectives: the comm model (fitted tables per kind and group size, alpha-beta fallback,
   and for groups larger than the device's `gpus_per_node` the larger of the intra-node table
   and an inter-node network model, `comm_model.InterNode`), on the payload bytes (nccl-tests
   convention); `comm.all_to_allv` is costed as all_to_all;
   compute: the roofline estimate on the device (`roofline.op_roofline_us`), which never goes
   below the device's `min_kernel_us` launch floor except for free ops (steps 1 and 2 are
   used as given: a measured or explicit time is never floored);
4. 0, and the op is listed in the one summary warning `warn_unknown()` prints.

Comm tables: the device's shipped table, where `--comm-table` files override it per
(kind, group size); several user files pool their samples. Several profiles are merged
(count-weighted). Models are cached per CostConfig.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.ir import Operation

from lancet_mlir.dialects.comm import CollectiveOp, module_world_size
from lancet_mlir.graph.dataflow import DataflowGraph, op_display_name
from lancet_mlir.profile.comm_loaders import load_comm_table
from lancet_mlir.profile.comm_model import CommModel, CommTable
from lancet_mlir.profile.devices import Device, get_device
from lancet_mlir.profile.fileio import data_path
from lancet_mlir.profile.keys import op_key
from lancet_mlir.profile.profile_db import ProfileDB
from lancet_mlir.profile.roofline import numeric_attr, op_roofline_us
from lancet_mlir.support.errors import UserError

TIME_ATTR = "lancet.time_us"

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


@dataclass(frozen=True)
class CostConfig:
    """What the cost model is built from: profile files (.json / .profile), comm-table files,
    the device name and an optional world size overriding the modules' `lancet.world_size`."""

    profiles: tuple[str, ...] = ()
    comm_tables: tuple[str, ...] = ()
    device: str = "h100"
    world_size: int | None = None


def explicit_time_us(op: Operation) -> float | None:
    """The op's `lancet.time_us` attribute, validated, or None."""
    return numeric_attr(op, TIME_ATTR)


def _comm_model(cfg: CostConfig, device: Device, notes: list[str]) -> CommModel:
    """The device's default table overridden by the user's tables per (kind, group size)."""
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
    return CommModel.from_table(table, device.alpha_beta, " + ".join(labels), device.internode())


class CostModel:
    """Op times in µs from a CostConfig (see the module doc for the priority)."""

    def __init__(self, config: CostConfig, device: Device, profile: ProfileDB, comm: CommModel):
        self.config = config
        self.device = device
        self.profile = profile
        self.comm = comm
        self._notes: list[str] = []
        self._unknown: dict[str, int] = {}

    # ---- construction ------------------------------------------------------------------------
    @classmethod
    def build(cls, cfg: CostConfig) -> CostModel:
        """Load every file of `cfg` now (bad files raise UserError naming the file)."""
        device = get_device(cfg.device)
        if cfg.world_size is not None and cfg.world_size < 1:
            raise UserError(f"world size must be >= 1, got {cfg.world_size}")
        notes: list[str] = []
        profile = ProfileDB()
        for path in cfg.profiles:
            loaded = ProfileDB.load(path)
            measured = loaded.metadata.get("device")
            if measured and str(measured).lower() != device.name:
                notes.append(
                    f"{path}: measured on {measured}, costing for {device.name}: "
                    "profiled times are used as they are"
                )
            profile.merge(loaded)
        model = cls(cfg, device, profile, _comm_model(cfg, device, notes))
        model._notes.extend(notes)
        return model

    @classmethod
    def from_config(cls, cfg: CostConfig) -> CostModel:
        """The (cached) model of `cfg`."""
        model = _MODELS.get(cfg)
        if model is None:
            model = cls.build(cfg)
            _MODELS[cfg] = model
        return model

    # ---- queries -----------------------------------------------------------------------------
    @property
    def notes(self) -> list[str]:
        """Decisions worth reporting (substituted group sizes, fallbacks, device mismatch)."""
        return [*self._notes, *self.comm.notes]

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
        explicit = explicit_time_us(op)
        if explicit is not None:
            return explicit
        if self.profile.entries:
            measured = self.profile.mean_us(op_key(op))
            if measured is not None:
                return measured
        if isinstance(op, CollectiveOp):
            return self.comm.time_us(op.KIND, op.payload_bytes(), op.group_size(world_size))
        estimate = op_roofline_us(op, self.device)
        if estimate is not None:
            return estimate
        name = op_display_name(op)
        if name not in ZERO_COST_OPS:
            self._unknown[name] = self._unknown.get(name, 0) + 1
        return 0.0

    def unknown_ops(self) -> list[str]:
        """Names of ops costed 0 for lack of any information, sorted."""
        return sorted(self._unknown)

    def warn_unknown(self, tool: str = "lancet") -> list[str]:
        """Print one summary warning on stderr naming the ops costed 0 (once per batch) and
        return their names."""
        names = self.unknown_ops()
        if names:
            sys.stderr.write(
                f"{tool}: warning: no time for {len(names)} op kind(s) (no {TIME_ATTR}, "
                f"profile entry or FLOP/byte count), costed 0 us: {', '.join(names)}\n"
            )
        self._unknown.clear()
        return names


_MODELS: dict[CostConfig, CostModel] = {}
_ACTIVE: CostConfig | None = None


def set_active_cost_config(cfg: CostConfig | None) -> None:
    """Make `cfg` the process-wide cost configuration (None: back to the default H100)."""
    global _ACTIVE
    _ACTIVE = cfg


def active_cost_config() -> CostConfig:
    """The process-wide cost configuration (default: H100, no files)."""
    return _ACTIVE if _ACTIVE is not None else CostConfig()


def active_cost_model() -> CostModel:
    """The cost model of the active configuration (what passes use)."""
    return CostModel.from_config(active_cost_config())


def cost_config_from_args(
    profiles: Sequence[str] = (),
    comm_tables: Sequence[str] = (),
    device: str | None = None,
    world_size: int | None = None,
) -> CostConfig:
    """A CostConfig from command-line style values (None device: h100)."""
    return CostConfig(tuple(profiles), tuple(comm_tables), device or "h100", world_size)
