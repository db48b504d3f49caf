"""PyTorch in and out: import a traced training step, optimize it, get a faster FX graph back.

```python
import lancet_mlir.torch as lt
mod = lt.import_graph(gm, world_size=8)              # FX GraphModule of ATen ops -> ModuleOp
opt = lt.optimize(gm, world_size=8, cluster="p3dn")  # .graph_module (a new GraphModule), .report
torch.compile(step, backend=lt.backend(cluster="p3dn"))
```

`gm` is one training step as ATen ops: `lt.capture(step, args, world_size=W)` (`make_fx` under
a fake process group) or the graph `torch.compile(backend=aot_autograd(...))` passes a backend.
`optimize` imports it (`lancet_mlir.importers.torch`), runs a `lancet-opt` pipeline on it
(default `lancet-schedule`, costed for `cluster` / `device` / `profile`), partitions its
expert-parallel MoE layers when `partition` says so (`lancet_mlir.exporters.torch.moe`) and
rebuilds the graph in the optimized order (`lancet_mlir.exporters.torch`). This module is
the only one that imports torch at its top: `import lancet_mlir` never does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch.fx import GraphModule
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import PassPipeline

from lancet_mlir import attrs
from lancet_mlir.exporters.torch import export_graph, make_backend
from lancet_mlir.importers.torch import ImportedGraph, capture, import_fx
from lancet_mlir.passes import get_all_passes
from lancet_mlir.sim.blocks import simulate_module
from lancet_mlir.support.errors import UserError

__all__ = ["Optimized", "backend", "capture", "import_graph", "optimize"]

GroupRanks = Mapping[str, Sequence[Sequence[int]]]


def import_graph(
    gm: GraphModule, *, world_size: int, group_ranks: GroupRanks | None = None
) -> ModuleOp:
    """The MLIR module of an FX training step (`lancet_mlir.importers.torch`)."""
    return import_fx(gm, world_size=world_size, group_ranks=group_ranks).module


@dataclass
class Optimized:
    """What `optimize` returns."""

    graph_module: GraphModule
    """The optimized step: same inputs and outputs as the input graph."""
    report: dict[str, Any]
    """The simulated makespan before and after, as `lancet-opt --report` names them."""
    module: ModuleOp
    """The optimized IR."""
    imported: ImportedGraph = field(repr=False)
    """The import (roles, notes)."""


def _context() -> Context:
    from lancet_mlir.dialects import get_all_dialects

    ctx = Context()
    for name, factory in get_all_dialects().items():
        ctx.register_dialect(name, factory)
    return ctx


def _configure(module: ModuleOp, cluster: str | None, device: str | None, profile: str | None):
    for name, value in ((attrs.CLUSTER, cluster), (attrs.DEVICE, device), (attrs.PROFILE, profile)):
        if value is not None:
            module.attributes[name] = StringAttr(str(value))


def simulate(module: ModuleOp) -> dict[str, float]:
    """Totals of the simulated schedule of `module` in its current order (module attributes
    cost it)."""
    from lancet_mlir.passes.simulate import SimulatePass

    costing = SimulatePass()
    results = [
        r
        for r in simulate_module(module, costing.cost_model(module), costing.sim_options(module))
        if r.top_level
    ]
    keys = ("makespan_us", "compute_us", "comm_us", "exposed_comm_us", "overlap_us")
    return {k: float(sum(getattr(r.summary, k) for r in results)) for k in keys}


def optimize(
    gm: GraphModule,
    *,
    world_size: int,
    pipeline: str = "lancet-schedule",
    cluster: str | None = None,
    device: str | None = None,
    profile: str | None = None,
    group_ranks: GroupRanks | None = None,
    partition: str | int | None = None,
) -> Optimized:
    """Import `gm`, optimize it with `pipeline`, and rebuild it as a new GraphModule.

    `partition` splits the expert-parallel MoE layers (each all-to-all pair and the expert
    computation between them, forward and backward, along the capacity axis:
    `lancet_mlir.exporters.torch.moe`) before scheduling: None or "none" leaves them whole,
    an int n >= 2 forces n parts, "auto" schedules the whole graph and each part count of
    2, 4, 8 and keeps the one the simulation rates fastest (the whole graph on ties).
    Raises UserError (one line) for bad input.
    """
    start = time.perf_counter()
    imported = import_fx(gm, world_size=world_size, group_ranks=group_ranks)
    _configure(imported.module, cluster, device, profile)
    before = simulate(imported.module)
    try:
        passes = PassPipeline.parse_spec(get_all_passes(), pipeline)
    except ValueError as exc:
        raise UserError(f"pipeline '{pipeline}': {exc}") from None
    candidates: list[tuple[int, GraphModule, ImportedGraph]] = []
    if partition in (None, "none"):
        candidates.append((1, gm, imported))
    else:
        from lancet_mlir.exporters.torch.moe import partition_moe

        if partition == "auto":
            candidates.append((1, gm, imported))
        for n, new_gm in partition_moe(gm, partition, world_size=world_size):
            trial = import_fx(new_gm, world_size=world_size, group_ranks=group_ranks)
            _configure(trial.module, cluster, device, profile)
            candidates.append((n, new_gm, trial))
    best: tuple[float, int, GraphModule, ImportedGraph, dict[str, float]] | None = None
    for n, source, trial in candidates:
        passes.apply(_context(), trial.module)
        after = simulate(trial.module)
        if best is None or after["makespan_us"] < best[0]:
            best = (after["makespan_us"], n, source, trial, after)
    assert best is not None
    _, parts, source, imported, after = best
    module = imported.module
    new = export_graph(source, module)
    report: dict[str, Any] = {
        **after,
        "input_makespan_us": before["makespan_us"],
        "input_exposed_comm_us": before["exposed_comm_us"],
        "speedup": before["makespan_us"] / after["makespan_us"] if after["makespan_us"] else 1.0,
        "pipeline": pipeline,
        "partition": partition,
        "moe_parts": parts,
        "cluster": cluster,
        "device": device,
        "world_size": world_size,
        "num_nodes": len(gm.graph.nodes),
        "notes": list(imported.notes),
        "optimize_seconds": time.perf_counter() - start,
    }
    return Optimized(new, report, module, imported)


def backend(
    *,
    world_size: int | None = None,
    pipeline: str = "lancet-schedule",
    cluster: str | None = None,
    device: str | None = None,
    profile: str | None = None,
    group_ranks: GroupRanks | None = None,
    partition: str | int | None = None,
    reports: list[dict[str, Any]] | None = None,
) -> Callable[..., Any]:
    """A `torch.compile` backend running `optimize` on each graph `aot_autograd` traces
    (`world_size` defaults to the initialised process group's); each report is appended
    to `reports` when given."""

    def run(gm: GraphModule) -> GraphModule:
        import torch.distributed as dist

        world = world_size if world_size is not None else dist.get_world_size()
        done = optimize(
            gm,
            world_size=world,
            pipeline=pipeline,
            cluster=cluster,
            device=device,
            profile=profile,
            group_ranks=group_ranks,
            partition=partition,
        )
        if reports is not None:
            reports.append(done.report)
        return done.graph_module

    return make_backend(run)
