"""PyTorch front-end benchmark (simulated, p3dn, 16 ranks): a 4-layer capacity-MoE step at
GPT-2-small width (d=768, seq 512, batch 16 per rank) captured with make_fx, then

* the input order (make_fx's: every wait right after its collective);
* lancet-mlir `optimize` (lancet-schedule; MoE layers partitioned with partition=auto: the
  partition library's per-pair plan realised on the FX graph);
* Tutel degrees 2, 4 and 8 on the same torch graph: the expert span split into n parts,
  in Tutel's pipeline order (every dispatch part, then per part experts and combine), not
  rescheduled;
* PyTorch's own overlap scheduling of the same graph: inductor's FX
  `schedule_overlap_bucketing`, given our per-node estimates as `custom_runtime_estimation`
  (and as its analytical compute estimate: on CPU the roofline estimator imports triton),
  its output costed by the same model;

all costed by one model (the p3dn cluster preset). Also: the time of make_fx's capture and
of import + optimize. Writes bench/results/torch.json and torch.md.

    python bench/bench_torch.py                       # the target configuration
    python bench/bench_torch.py --layers 1 --d 64 --seq 32 --batch 2 --world 4   # quick
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples" / "torch"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch_models as tm  # noqa: E402

import lancet_mlir.torch as lt  # noqa: E402
from lancet_mlir.exporters.torch.moe import find_pairs, partition_graph  # noqa: E402
from lancet_mlir.importers.torch import FX_NODE, import_fx  # noqa: E402
from lancet_mlir.passes.simulate import SimulatePass  # noqa: E402


def simulated(gm: torch.fx.GraphModule, world: int, cluster: str) -> dict[str, float]:
    """The simulated step of `gm` in its own order."""
    imported = import_fx(gm, world_size=world)
    lt._configure(imported.module, cluster, None, None)
    return lt.simulate(imported.module)


def node_estimates(gm: torch.fx.GraphModule, world: int, cluster: str) -> dict[str, float]:
    """Our cost model's time (ms) of every FX node an op stands for."""
    imported = import_fx(gm, world_size=world)
    lt._configure(imported.module, cluster, None, None)
    cost = SimulatePass().cost_model(imported.module)
    out: dict[str, float] = {}
    for op in imported.body.ops:
        name = op.attributes.get(FX_NODE)
        if name is not None:
            out[name.data] = out.get(name.data, 0.0) + cost.op_time_us(op, world) / 1000.0  # type: ignore[attr-defined]
    return out


def inductor_order(gm: torch.fx.GraphModule, world: int, cluster: str) -> torch.fx.GraphModule:
    """inductor's `schedule_overlap_bucketing` of a copy of `gm`, costed with our estimates."""
    import copy

    from torch._inductor.fx_passes import overlap_scheduling as ovs

    estimates = node_estimates(gm, world, cluster)

    def estimate(node: torch.fx.Node, override_size: int | None = None) -> float | None:
        return estimates.get(node.name, 0.0)

    patched = ovs.estimate_roofline_runtime_ms
    ovs.estimate_roofline_runtime_ms = lambda node: estimates.get(node.name, 0.0)
    try:
        copied = copy.deepcopy(gm)
        return ovs.schedule_overlap_bucketing(
            copied,
            custom_runtime_estimation=estimate,
            compute_estimator="analytical",
            collective_estimator="analytical",
        )
    finally:
        ovs.estimate_roofline_runtime_ms = patched


def run(cfg: tm.MoeConfig, cluster: str, pipeline: str) -> dict[str, Any]:
    """Every number of the benchmark for one configuration."""
    step = tm.moe_step(cfg)
    args = [*tm.moe_params(cfg), *tm.moe_data(cfg)]
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=cfg.world)
    try:
        start = time.perf_counter()
        gm = lt.capture(step, args, world_size=cfg.world)
        capture_s = time.perf_counter() - start
        start = time.perf_counter()
        opt = lt.optimize(
            gm, world_size=cfg.world, cluster=cluster, pipeline=pipeline, partition="auto"
        )
        optimize_s = time.perf_counter() - start
        sched = lt.optimize(gm, world_size=cfg.world, cluster=cluster, pipeline=pipeline)
        base = simulated(gm, cfg.world, cluster)
        rows: dict[str, dict[str, float]] = {"input order": base}
        for n in (2, 4, 8):
            parted, pairs = partition_graph(gm, n, world_size=cfg.world)
            if pairs:
                rows[f"Tutel degree {n}"] = simulated(parted, cfg.world, cluster)
        try:
            rows["inductor schedule_overlap_bucketing"] = simulated(
                inductor_order(gm, cfg.world, cluster), cfg.world, cluster
            )
        except Exception as exc:  # noqa: BLE001 - report what failed, keep the other rows
            rows["inductor schedule_overlap_bucketing"] = {"error": repr(exc)[:200]}  # type: ignore[dict-item]
        rows["lancet-schedule (no partition)"] = {k: sched.report[k] for k in base}
        split = opt.report["moe_plan"]
        counts = sorted({(p["role"], p["parts"]) for p in split})
        how = ", ".join(f"{role} in {n}" for role, n in counts) or "none"
        label = (
            f"lancet optimize (partition=auto, library plan: {len(split)} of "
            f"{len(find_pairs(gm, cfg.world))} pairs split, {how})"
        )
        rows[label] = {k: opt.report[k] for k in base}
    finally:
        dist.destroy_process_group()
    return {
        "config": cfg.__dict__,
        "cluster": cluster,
        "pipeline": pipeline,
        "nodes": len(gm.graph.nodes),
        "capture_seconds": capture_s,
        "import_optimize_seconds": optimize_s,
        "rows": rows,
        "moe_plan": opt.report["moe_plan"],
    }


def table(result: dict[str, Any]) -> str:
    """The markdown table of a result."""
    rows = result["rows"]
    base = rows["input order"]["makespan_us"]
    lines = [
        "| schedule | step (us) | exposed comm (us) | vs input order |",
        "|---|---:|---:|---:|",
    ]
    for label, r in rows.items():
        if "error" in r:
            lines.append(f"| {label} | failed: {r['error']} | | |")
            continue
        lines.append(
            f"| {label} | {r['makespan_us']:.1f} | {r['exposed_comm_us']:.1f} | "
            f"{base / r['makespan_us']:.3f}x |"
        )
    lines.append("")
    lines.append(
        f"make_fx capture: {result['capture_seconds']:.1f} s; import + optimize "
        f"(partition=auto): {result['import_optimize_seconds']:.1f} s "
        f"({result['import_optimize_seconds'] / result['capture_seconds']:.2f}x); "
        f"{result['nodes']} FX nodes"
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--world", type=int, default=16)
    parser.add_argument("--experts-per-rank", type=int, default=1)
    parser.add_argument("--cluster", default="p3dn")
    parser.add_argument("--pipeline", default="lancet-schedule{partition=none max-seconds=2}")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "torch"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = tm.MoeConfig(
        world=args.world,
        layers=args.layers,
        d=args.d,
        hidden=4 * args.d,
        heads=args.heads,
        seq=args.seq,
        batch=args.batch,
        experts_per_rank=args.experts_per_rank,
    )
    result = run(cfg, args.cluster, args.pipeline)
    text = table(result)
    print(text)
    Path(args.out + ".json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    Path(args.out + ".md").write_text(text)


if __name__ == "__main__":
    main()
