"""Cost settings as layers: what a module's `lancet.*` attributes say, what a pass's options
say, and how the two combine into one `CostConfig`.

A layer gives some of: device, cluster, profile files, comm-table files, GPUs per node,
network Gb/s per GPU (None: not given). `over` puts one layer on top of another: the top
layer's values win one by one, except that a cluster given in the top layer replaces the lower
layer's whole hardware description (its device, GPUs per node and network), so
`lancet-schedule{cluster=p3dn}` on a module that says `lancet.device = "h100"` costs V100s on
the p3dn's network, while `lancet-schedule{device=h100}` on a `lancet.cluster = "p3dn"` module
costs H100s on the p3dn's network. File lists replace, not extend, the lower layer's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

from xdsl.dialects.builtin import ArrayAttr, FloatAttr, IntegerAttr, StringAttr
from xdsl.ir import Attribute, Operation

from lancet_mlir import attrs
from lancet_mlir.cost.clusters import get_cluster
from lancet_mlir.cost.cost_model import CostConfig
from lancet_mlir.cost.devices import get_device
from lancet_mlir.support.errors import UserError, about_op


@dataclass(frozen=True)
class CostSettings:
    """One layer of cost settings (None: this layer does not say)."""

    device: str | None = None
    cluster: str | None = None
    profiles: tuple[str, ...] | None = None
    comm_tables: tuple[str, ...] | None = None
    gpus_per_node: int | None = None
    network_gbps: float | None = None

    def over(self, base: CostSettings) -> CostSettings:
        """This layer on top of `base` (module doc: a cluster here replaces base's hardware)."""
        hardware_base = CostSettings() if self.cluster is not None else base
        return CostSettings(
            device=_first(self.device, hardware_base.device),
            cluster=_first(self.cluster, base.cluster),
            profiles=_first(self.profiles, base.profiles),
            comm_tables=_first(self.comm_tables, base.comm_tables),
            gpus_per_node=_first(self.gpus_per_node, hardware_base.gpus_per_node),
            network_gbps=_first(self.network_gbps, hardware_base.network_gbps),
        )

    def config(self, world_size: int | None = None) -> CostConfig:
        """The CostConfig of these settings (unset files: none)."""
        return CostConfig(
            profiles=self.profiles or (),
            comm_tables=self.comm_tables or (),
            device=self.device,
            world_size=world_size,
            cluster=self.cluster,
            gpus_per_node=self.gpus_per_node,
            network_gbps=self.network_gbps,
        )


_T = TypeVar("_T")


def _first(value: _T | None, fallback: _T | None) -> _T | None:
    return value if value is not None else fallback


def module_cost_settings(module: Operation) -> CostSettings:
    """The settings of `module`'s `lancet.*` attributes, validated: a bad value raises one
    UserError naming the attribute (`lancet.device: unknown device 'nope' (choices: ...)`).
    Also checks `lancet.world_size`, which the cost model reads where it costs collectives.
    The error is about `module` (tools place it at the module's line)."""
    with about_op(module):
        return _module_cost_settings(module)


def _module_cost_settings(module: Operation) -> CostSettings:
    get = module.attributes.get
    world = get(attrs.WORLD_SIZE)
    if world is not None:
        _integer(attrs.WORLD_SIZE, world)
    device = _string(attrs.DEVICE, get(attrs.DEVICE))
    cluster = _string(attrs.CLUSTER, get(attrs.CLUSTER))
    gpus = get(attrs.GPUS_PER_NODE)
    network = get(attrs.NETWORK_GBPS)
    settings = CostSettings(
        device=device,
        cluster=cluster,
        profiles=_paths(attrs.PROFILE, get(attrs.PROFILE)),
        comm_tables=_paths(attrs.COMM_TABLE, get(attrs.COMM_TABLE)),
        gpus_per_node=_integer(attrs.GPUS_PER_NODE, gpus) if gpus is not None else None,
        network_gbps=_positive(attrs.NETWORK_GBPS, network) if network is not None else None,
    )
    check_names(settings, {"device": attrs.DEVICE, "cluster": attrs.CLUSTER})
    return settings


def check_names(settings: CostSettings, labels: dict[str, str]) -> None:
    """UserError `<label>: unknown device ...` unless the device and cluster names exist."""
    try:
        if settings.device is not None:
            get_device(settings.device)
    except UserError as exc:
        raise UserError(f"{labels['device']}: {exc}") from None
    try:
        if settings.cluster is not None:
            get_cluster(settings.cluster)
    except UserError as exc:
        raise UserError(f"{labels['cluster']}: {exc}") from None


def _string(name: str, attr: Attribute | None) -> str | None:
    if attr is None:
        return None
    if isinstance(attr, StringAttr):
        return attr.data
    raise UserError(f"{name}: expected a string, got {attr}")


def _paths(name: str, attr: Attribute | None) -> tuple[str, ...] | None:
    """A string or an array of strings (several files)."""
    if attr is None:
        return None
    if isinstance(attr, StringAttr):
        return (attr.data,)
    if isinstance(attr, ArrayAttr) and all(isinstance(a, StringAttr) for a in attr.data):
        return tuple(a.data for a in attr.data)  # type: ignore[attr-defined]
    raise UserError(f"{name}: expected a file name or an array of file names, got {attr}")


def _integer(name: str, attr: Attribute) -> int:
    if isinstance(attr, IntegerAttr) and attr.value.data >= 1:
        return attr.value.data
    raise UserError(f"{name}: expected an integer >= 1, got {attr}")


def _positive(name: str, attr: Attribute) -> float:
    if isinstance(attr, IntegerAttr | FloatAttr):
        value = float(attr.value.data)
        if math.isfinite(value) and value > 0:
            return value
    raise UserError(f"{name}: expected a finite number > 0, got {attr}")
