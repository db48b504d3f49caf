"""`CostOptions`: the options every costing pass takes, and how they meet the module.

A costing pass depends only on its options and the module it runs on, never on process-wide
state, so `lancet-opt`, plain `xdsl-opt` and any embedding pipeline give the same result:

    option (`lancet-schedule{cluster=p3dn}`)  >  module attribute (`lancet.cluster = "p3dn"`)
                                              >  built-in default (h100, 1 stream, no slowdown)

(`lancet_mlir.cost.settings` has the exact layering rule: a cluster given by the options
replaces the module's whole hardware description.) `lancet-opt --device/--cluster/...` only
set the module attributes, so its output re-runs identically with `xdsl-opt`.

Options (kebab-case in a pipeline; all optional):
  device=NAME          GPU of every rank (h100, v100, a100, h200, b200, gb200; aliases)
  cluster=NAME         cluster preset: p3dn, p4de, dgx-a100, dgx-h100, dgx-b200, gb200-nvl72
  profile=FILE[,FILE]  measured op timings (quote paths: profile="prof.json")
  comm-table=FILE[,..] measured collective tables (CSV, nccl-tests logs, XLA tables)
  gpus-per-node=N      GPUs per NVLink domain (overrides the cluster's / device's)
  network-gbps=F       inter-node network Gb/s per GPU (overrides the cluster's / device's)
  comm-streams=K       communication streams of the simulator (default 1)
  overlap-slowdown=F   compute runs F times slower while a collective runs (default 1.0)
  launch-overhead-us=F host time per op launch; ops start no earlier than launched (default 0)

Use: `@dataclass(frozen=True) class P(CostOptions, CheckedOptions, ModulePass)`, then
`self.cost_model(module)` / `self.sim_options(module)` in `apply`; a scheduling pass takes
its per-op durations from `self.module_simulation(module)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.arg_spec import ArgSpec
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.cost.settings import CostSettings, check_names, module_cost_settings
from lancet_mlir.passes.options import check_int, check_number
from lancet_mlir.sim.blocks import ModuleSimulation
from lancet_mlir.sim.options import SimOptions, module_sim_options, resolve_sim_options
from lancet_mlir.support.errors import UserError, pass_failure


@dataclass(frozen=True)
class CostOptions:
    """Mixin of a costing pass's options (module doc); every field None means "not given"."""

    name: ClassVar[str]

    device: str | None = None
    """GPU of every rank (`h100`, `v100`, ...; aliases); None: the module's `lancet.device`."""
    cluster: str | None = None
    """Cluster preset (`p3dn`, `p4de`, ...); None: the module's `lancet.cluster`."""
    profile: tuple[str, ...] | None = None
    """Measured op timings (JSON files); None: the module's `lancet.profile`."""
    comm_table: tuple[str, ...] | None = None
    """Measured collective tables (CSV, nccl-tests logs, XLA tables); None: the module's
    `lancet.comm_table`, else the device's table."""
    gpus_per_node: int | None = None
    """GPUs per NVLink domain (>= 1), overriding the cluster's / device's."""
    network_gbps: float | int | None = None
    """Inter-node network Gb/s per GPU (> 0), overriding the cluster's / device's."""
    comm_streams: int | None = None
    """Communication streams of the simulator (1 to 64; default 1)."""
    overlap_slowdown: float | int | None = None
    """Compute runs this many times slower while a collective runs (>= 1.0; default 1.0)."""
    launch_overhead_us: float | int | None = None
    """Host time per op launch in µs (>= 0): an op starts no earlier than launched (default 0)."""

    # ---- what the options alone say -----------------------------------------------------------
    def option_settings(self) -> CostSettings:
        """The options as a settings layer, checked (PassFailedException naming the option)."""
        if self.gpus_per_node is not None:
            check_int(self.name, "gpus-per-node", self.gpus_per_node, 1)
        if self.network_gbps is not None:
            check_number(self.name, "network-gbps", self.network_gbps, 0.0)
            if not self.network_gbps > 0:
                raise PassFailedException(
                    f"{self.name}: network-gbps must be > 0, got {self.network_gbps}"
                )
        settings = CostSettings(
            device=self.device,
            cluster=self.cluster,
            profiles=_files(self.profile),
            comm_tables=_files(self.comm_table),
            gpus_per_node=self.gpus_per_node,
            network_gbps=None if self.network_gbps is None else float(self.network_gbps),
        )
        with _as_pass_failure(self.name):
            check_names(settings, {"device": "option device", "cluster": "option cluster"})
        return settings

    # ---- resolved against a module ------------------------------------------------------------
    def cost_config(self, module: ModuleOp) -> CostConfig:
        """Options over the module's `lancet.*` attributes (module doc)."""
        options = self.option_settings()
        with _as_pass_failure(self.name):
            return options.over(module_cost_settings(module)).config()

    def cost_model(self, module: ModuleOp) -> CostModel:
        """The (cached) cost model of `cost_config(module)`; bad files fail naming the file."""
        config = self.cost_config(module)
        with _as_pass_failure(self.name):
            return CostModel.from_config(config)

    def sim_options(self, module: ModuleOp) -> SimOptions:
        """Stream count and slowdown: options over `lancet.comm_streams` /
        `lancet.overlap_slowdown` over the defaults."""
        if self.comm_streams is not None:
            check_int(self.name, "comm-streams", self.comm_streams, 1)
        if self.overlap_slowdown is not None:
            check_number(self.name, "overlap-slowdown", self.overlap_slowdown, 1.0)
        if self.launch_overhead_us is not None:
            check_number(self.name, "launch-overhead-us", self.launch_overhead_us, 0.0)
        with _as_pass_failure(self.name):
            base = module_sim_options(module)
            return resolve_sim_options(
                self.comm_streams, self.overlap_slowdown, base, self.launch_overhead_us
            )

    def module_simulation(self, module: ModuleOp) -> ModuleSimulation:
        """The blocks of `module` costed as the scheduling passes see them, with this pass's
        cost model and simulator options: every op the cost model's time, an op with
        regions (or a call) its bodies' simulated makespan (`sim.blocks.ModuleSimulation`;
        visit `innermost_first()`, `invalidate` a block once changed)."""
        return ModuleSimulation(module, self.cost_model(module), self.sim_options(module))

    def costing_spec(self) -> str:
        """The pass as written in a pipeline, options given included, kebab-case (reports)."""
        spec = self.spec()  # type: ignore[attr-defined] - from ModulePass
        return str(ArgSpec(spec.name, {k.replace("_", "-"): v for k, v in spec.parameters.items()}))


def _files(value: tuple[str, ...] | str | None) -> tuple[str, ...] | None:
    """A file option as a tuple (a plain string from Python is one file)."""
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(value)


@contextmanager
def _as_pass_failure(pass_name: str) -> Iterator[None]:
    """Turn UserError / ValueError into one PassFailedException prefixed with the pass name."""
    try:
        yield
    except (UserError, ValueError) as exc:
        raise pass_failure(pass_name, exc) from None
