"""Optimize a PyTorch expert-parallel MoE training step for the p3dn cluster and show the
simulated step time before and after.

    python examples/torch/moe_step.py                 # 4 layers, d=768, seq 512, batch 16, 16 ranks
    python examples/torch/moe_step.py --layers 1 --world 4 --d 64 --seq 32 --batch 2

The step (torch_models.py: attention + a capacity-gated MoE FFN, expert parallel, DP gradient
all-reduce, SGD) is captured with make_fx as rank 0 of a fake process group, imported,
optimized by lancet-mlir (schedule, and the MoE layers partitioned when `--parts` is not
`none`) and rebuilt as an FX graph; the table compares the simulated times (µs) of the input
order and of the optimized graph on p3dn.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch_models as tm  # noqa: E402

import lancet_mlir.torch as lt  # noqa: E402


def bench_config(args: argparse.Namespace) -> tm.MoeConfig:
    """The MoE config of the command line."""
    return tm.MoeConfig(
        world=args.world,
        layers=args.layers,
        d=args.d,
        hidden=4 * args.d,
        heads=args.heads,
        seq=args.seq,
        batch=args.batch,
        experts_per_rank=args.experts_per_rank,
    )


def rows(cfg: tm.MoeConfig, cluster: str, parts: str, pipeline: str) -> list[tuple[str, dict]]:
    """(label, report) of each optimized variant of the step."""
    step = tm.moe_step(cfg)
    args = [*tm.moe_params(cfg), *tm.moe_data(cfg)]
    start = time.perf_counter()
    gm = lt.capture(step, args, world_size=cfg.world)
    capture_s = time.perf_counter() - start
    out = []
    base = lt.optimize(gm, world_size=cfg.world, cluster=cluster, pipeline="program-order")
    out.append(("input order", {**base.report, "capture_seconds": capture_s}))
    sched = lt.optimize(gm, world_size=cfg.world, cluster=cluster, pipeline=pipeline)
    out.append(("lancet-schedule", sched.report))
    if parts != "none":
        part = lt.optimize(
            gm,
            world_size=cfg.world,
            cluster=cluster,
            pipeline=pipeline,
            partition=int(parts) if parts.isdigit() else parts,
        )
        out.append(
            (f"lancet-schedule + MoE parts ({parts}: {part.report['moe_parts']})", part.report)
        )
    return out


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
    parser.add_argument("--parts", default="auto", help="MoE parts: auto, none or a count")
    parser.add_argument("--pipeline", default="lancet-schedule{partition=none max-seconds=2}")
    args = parser.parse_args()
    cfg = bench_config(args)
    table = rows(cfg, args.cluster, args.parts, args.pipeline)
    base = table[0][1]["makespan_us"]
    print(
        f"{cfg.layers}-layer capacity MoE, d={cfg.d}, seq {cfg.seq}, batch {cfg.batch}, "
        f"{cfg.world} ranks on {args.cluster} (simulated)"
    )
    print(f"pipeline: {args.pipeline}")
    print(f"| {'schedule':<48} | {'step (us)':>10} | {'exposed comm (us)':>17} | {'speed-up':>8} |")
    print(f"|{'-' * 50}|{'-' * 12}|{'-' * 19}|{'-' * 10}|")
    for label, rep in table:
        print(
            f"| {label:<48} | {rep['makespan_us']:>10.1f} | {rep['exposed_comm_us']:>17.1f} "
            f"| {base / rep['makespan_us']:>7.3f}x |"
        )


if __name__ == "__main__":
    main()
