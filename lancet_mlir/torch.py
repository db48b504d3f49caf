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
(default `lancet-schedule`, its own IR partitioning off, costed for `cluster` / `device` /
`profile`), partitions its
expert-parallel MoE layers when `partition` says so (`lancet_mlir.exporters.torch.moe`) and
rebuilds the graph in the optimized order (`lancet_mlir.exporters.torch`). This module is
the only one that imports torch at its top: `import lancet_mlir` never does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from torch.fx import GraphModule
from xdsl.context import Context
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, ModuleOp, StringAttr, f64, i64
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import ArgSpecParseError, PassFailedException

from lancet_mlir import attrs
from lancet_mlir.exporters.torch import export_graph, make_backend
from lancet_mlir.importers.torch import ImportedGraph, capture, import_fx
from lancet_mlir.passes import get_all_passes
from lancet_mlir.sim.blocks import simulate_module
from lancet_mlir.support.errors import UserError, one_line

__all__ = ["DEFAULT_PIPELINE", "Optimized", "backend", "capture", "import_graph", "optimize"]

GroupRanks = Mapping[str, Sequence[Sequence[int]]]
MoeParts = int | list[int]
"""The report's `moe_parts`: the forced count, 1 (whole) or the plan's per-pair counts."""


DEFAULT_PIPELINE = "lancet-schedule"
"""`optimize`'s pipeline (issue 18's spelling). Every `lancet-schedule` of a pipeline runs
with its own IR partitioning off (`partition=none`, `_fx_partitioning`): the MoE layers are
partitioned on the FX graph (`optimize`'s `partition=`), since parts made in the IR have no
FX nodes to map back to."""


def _fx_partitioning(passes: PassPipeline) -> tuple[PassPipeline, list[str]]:
    """`passes` with every `lancet-schedule` set to `partition=none`, and a note for each
    one that asked for IR partitioning."""
    from lancet_mlir.passes.lancet_schedule import LancetSchedulePass

    notes: list[str] = []
    new: list = []
    for p in passes.passes:
        if isinstance(p, LancetSchedulePass) and p.partition != "none":
            notes.append(
                f"lancet-schedule's partition={p.partition} is done on the FX graph here "
                "(optimize's partition=), the pass runs with partition=none"
            )
            p = replace(p, partition="none")
        new.append(p)
    return PassPipeline(tuple(new), passes.callback), notes


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


@dataclass(frozen=True)
class _Costs:
    """The cost options of `optimize`, as the module attributes they set."""

    cluster: str | None = None
    device: str | None = None
    profile: str | None = None
    gpus_per_node: int | None = None
    network_gbps: float | None = None

    def configure(self, module: ModuleOp) -> None:
        """Set the module's `lancet.*` cost attributes."""
        for name, value in (
            (attrs.CLUSTER, self.cluster),
            (attrs.DEVICE, self.device),
            (attrs.PROFILE, self.profile),
        ):
            if value is not None:
                module.attributes[name] = StringAttr(str(value))
        if self.gpus_per_node is not None:
            module.attributes[attrs.GPUS_PER_NODE] = IntegerAttr(int(self.gpus_per_node), i64)
        if self.network_gbps is not None:
            module.attributes[attrs.NETWORK_GBPS] = FloatAttr(float(self.network_gbps), f64)


def _configure(module: ModuleOp, cluster: str | None, device: str | None, profile: str | None):
    """Set the cluster, device and profile attributes of `module` (the benchmark's use)."""
    _Costs(cluster, device, profile).configure(module)


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
    pipeline: str = DEFAULT_PIPELINE,
    cluster: str | None = None,
    device: str | None = None,
    profile: str | None = None,
    group_ranks: GroupRanks | None = None,
    partition: str | int | None = None,
    gpus_per_node: int | None = None,
    network_gbps: float | None = None,
) -> Optimized:
    """Import `gm`, optimize it with `pipeline`, and rebuild it as a new GraphModule.

    `partition` splits the expert-parallel MoE layers (each all-to-all pair and the expert
    computation between them, forward and backward, along the capacity axis:
    `lancet_mlir.exporters.torch.moe`) before scheduling: None or "none" leaves them whole,
    an int n >= 2 forces n parts on every pair, "auto" takes the partition library's plan
    (`lancet_mlir.exporters.torch.plan`: per pair whether to split, the axis and the DP's
    part count, which may differ per pair), realises it on the FX graph and keeps it when
    the scheduled simulation rates it faster than the whole graph scheduled (the whole
    graph on ties). The report's `moe_plan` lists the pairs split, each
    `{pair, role, axis, parts, region_ops, base_us, cost_us}` (empty when none is), and
    `moe_parts` is n (forced), 1 (whole) or the plan's per-pair counts ("auto").
    `gpus_per_node` and `network_gbps` override the cluster's, as lancet-opt's flags do.
    Raises UserError (one line) for bad input.
    """
    with _user_errors():
        return _optimize(
            gm,
            world_size,
            pipeline,
            _Costs(cluster, device, profile, gpus_per_node, network_gbps),
            group_ranks,
            partition,
        )


@contextmanager
def _user_errors() -> Iterator[None]:
    """A pass failure (a bad pipeline option, a bad cluster or device name that the costing
    checks) is a UserError of `optimize`, as its docstring promises (an outside review)."""
    try:
        yield
    except PassFailedException as exc:
        raise UserError(str(exc)) from None


def _optimize(
    gm: GraphModule,
    world_size: int,
    pipeline: str,
    costs: _Costs,
    group_ranks: GroupRanks | None,
    partition: str | int | None,
) -> Optimized:
    """`optimize`, its cost options gathered."""
    start = time.perf_counter()
    cluster, device = costs.cluster, costs.device
    imported = import_fx(gm, world_size=world_size, group_ranks=group_ranks)
    costs.configure(imported.module)
    before = simulate(imported.module)
    try:
        passes = PassPipeline.parse_spec(get_all_passes(), pipeline)
    except (ValueError, ArgSpecParseError) as exc:  # the latter is a BaseException
        raise UserError(f"pipeline '{pipeline}': {one_line(exc)}") from None
    passes, pipeline_notes = _fx_partitioning(passes)
    if pipeline == DEFAULT_PIPELINE:
        pipeline_notes = []
    candidates: list[tuple[MoeParts, list[dict[str, Any]], GraphModule, ImportedGraph]] = []
    if partition in (None, "none"):
        candidates.append((1, [], gm, imported))
    elif partition == "auto":
        candidates.append((1, [], gm, imported))
        try:
            planned = _planned(gm, imported, world_size, pipeline_notes)
        except UserError as exc:  # the FX graph cannot realise the plan: keep it whole
            planned = None
            pipeline_notes.append(f"partition=auto: the plan is not realised ({exc})")
        if planned is not None:
            new_gm, plan = planned
            trial = import_fx(new_gm, world_size=world_size, group_ranks=group_ranks)
            costs.configure(trial.module)
            candidates.append(([p["parts"] for p in plan], plan, new_gm, trial))
    else:
        from lancet_mlir.exporters.torch.moe import partition_moe

        for n, new_gm in partition_moe(gm, partition, world_size=world_size):
            trial = import_fx(new_gm, world_size=world_size, group_ranks=group_ranks)
            costs.configure(trial.module)
            candidates.append((n, [], new_gm, trial))
    best: tuple[float, MoeParts, list, GraphModule, ImportedGraph, dict[str, float]] | None = None
    for n, plan, source, trial in candidates:
        passes.apply(_context(), trial.module)
        if any(attrs.PART in o.attributes for o in trial.module.walk()):
            raise UserError(
                f"pipeline '{pipeline}' partitions the MoE layers in the IR, which the FX "
                "export cannot map back: give lancet-schedule partition=none (and no "
                "moe-partition) and partition the FX graph with optimize's partition="
            )
        after = simulate(trial.module)
        if best is None or after["makespan_us"] < best[0]:
            best = (after["makespan_us"], n, plan, source, trial, after)
    assert best is not None
    _, parts, moe_plan, source, imported, after = best
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
        "moe_plan": moe_plan,
        "cluster": cluster,
        "device": device,
        "world_size": world_size,
        "num_nodes": len(gm.graph.nodes),
        "notes": [*imported.notes, *pipeline_notes],
        "optimize_seconds": time.perf_counter() - start,
    }
    return Optimized(new, report, module, imported)


def _planned(
    gm: GraphModule, imported: ImportedGraph, world_size: int, notes: list[str]
) -> tuple[GraphModule, list[dict[str, Any]]] | None:
    """The FX graph realising the partition library's plan for `imported` (None: the plan
    splits nothing the FX graph can split), with the plan's report entries. A planned pair
    the FX rewriter finds no span for, or finds along another axis (e.g. an expert bias add
    it does not follow), stays whole, with a note in `notes`; the others are realised."""
    from lancet_mlir.exporters.torch.moe import find_pairs, partition_graph
    from lancet_mlir.exporters.torch.plan import plan_moe

    found = {p.first.name: p.descs[p.wait] for p in find_pairs(gm, world_size)}
    plan = []
    for entry, desc in plan_moe(imported.module, imported.body):
        if found.get(entry.first) == desc:
            plan.append((entry, desc))
            continue
        why = "no splittable span" if entry.first not in found else f"axis {found[entry.first]}"
        notes.append(
            f"partition=auto: the pair of FX node '{entry.first}' stays whole (the plan splits "
            f"it along {desc} in {entry.parts}, the FX rewriter finds {why})"
        )
    if not plan:
        return None
    new_gm, _ = partition_graph(
        gm,
        {p.first: p.parts for p, _ in plan},
        world_size=world_size,
        axes={p.first: desc for p, desc in plan},
    )
    return new_gm, [p.as_dict() for p, _ in plan]


def backend(
    *,
    world_size: int | None = None,
    pipeline: str = DEFAULT_PIPELINE,
    cluster: str | None = None,
    device: str | None = None,
    profile: str | None = None,
    group_ranks: GroupRanks | None = None,
    partition: str | int | None = None,
    reports: list[dict[str, Any]] | None = None,
    gpus_per_node: int | None = None,
    network_gbps: float | None = None,
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
            gpus_per_node=gpus_per_node,
            network_gbps=network_gbps,
        )
        if reports is not None:
            reports.append(done.report)
        return done.graph_module

    return make_backend(run)
