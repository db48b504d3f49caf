"""The headline benchmark: Lancet's scaling experiments on its own testbeds.

    python bench/bench_headline.py                      # all 8 configurations
    python bench/bench_headline.py --configs nl12 --out /tmp/h

Lancet's GPT-2 MoE configurations (`lancet_mlir.models.gpt2_moe.PRESETS`, f32, 2 experts per
rank): 12 layers d=768 batch 16 and 24 layers d=1024 batch 8 on AWS p3dn (V100), 12 layers
batch 48 and 24 layers batch 24 on p4de (A100), each at 16 and 32 ranks (2 and 4 nodes).
The testbeds are the `p3dn` and `p4de` cluster presets (`lancet_mlir.cost.clusters`:
device, 8 GPUs per node, inter-node network per GPU).

Per configuration: program order, FIFO (`data-parallel-schedule`), the best Tutel degree
(2, 4, 8), the ablation — dW only (`lancet-schedule{partition=none fusion=false}`),
partition only (`moe-partition`, capacity-axis regions), token only
(`moe-partition{axis=token}`: whole MoE layers and the forward around them in token parts), no
partition (`lancet-schedule{partition=none}`) — and the full pipeline (`lancet-schedule`,
partition=auto), the lower bound max(Σcompute, Σcomm), exposed
communication of each, and the optimizer's wall time. The floor of `partition=none`
(`lancet_mlir.sim.floor.exposed_comm_floor`): no order of the graph it scheduled exposes less
communication ("its graph"), and no order of the input with any all-reduces fused exposes less
("any fusion": the floor over the other collectives alone, since fusing all-reduces only adds
dependencies). Writes `headline.json` and `headline.md` into --out (default bench/results).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_bench import DEFAULT_OUT, BenchConfig, Pipeline, run_config  # noqa: E402

from lancet_mlir.cost.clusters import get_cluster  # noqa: E402
from lancet_mlir.models.gpt2_moe import PRESETS  # noqa: E402
from lancet_mlir.sim.blocks import BlockResult  # noqa: E402
from lancet_mlir.sim.floor import exposed_comm_floor  # noqa: E402
from lancet_mlir.support.files import write_atomic  # noqa: E402

HEADLINE = [
    ("gpt2_moe_nl12_m768_nh16_sl512_b16", "p3dn"),
    ("gpt2_moe_nl24_m1024_nh16_sl512_b8", "p3dn"),
    ("gpt2_moe_nl12_m768_nh16_sl512_b48", "p4de"),
    ("gpt2_moe_nl24_m1024_nh16_sl512_b24", "p4de"),
]
WORLD_SIZES = (16, 32)

PIPELINES = [
    Pipeline("program order", "program-order", baseline=True),
    Pipeline("FIFO", "data-parallel-schedule", baseline=True),
    Pipeline("Tutel 2", "tutel-pipeline{degree=2}", baseline=True),
    Pipeline("Tutel 4", "tutel-pipeline{degree=4}", baseline=True),
    Pipeline("Tutel 8", "tutel-pipeline{degree=8}", baseline=True),
    Pipeline("dW only", "lancet-schedule{partition=none fusion=false}", baseline=False),
    Pipeline("partition only", "moe-partition", baseline=False),
    Pipeline("token only", "moe-partition{axis=token}", baseline=False),
    Pipeline("no partition", "lancet-schedule{partition=none}", baseline=False),
    Pipeline("full", "lancet-schedule", baseline=False),
]


def configs() -> list[BenchConfig]:
    """The headline configurations in report order."""
    out = []
    for preset, testbed in HEADLINE:
        for ws in WORLD_SIZES:
            model = replace(PRESETS[preset], world_size=ws)
            device = get_cluster(testbed).device
            out.append(
                BenchConfig(
                    f"{preset}_g{ws}_{testbed}",
                    "gpt2_moe",
                    device,
                    preset,
                    model=model,
                    cluster=testbed,
                )
            )
    return out


def floors(kept: dict[str, BlockResult]) -> dict[str, float]:
    """The exposed-communication floors (µs) of `partition=none` (module docstring): of the
    graph it scheduled, of the input, and of the input without its all-reduces."""
    source = kept["program order"]
    graph, durations = source.graph, source.durations
    no_allreduce = [
        0.0 if kind == "allreduce" else d
        for kind, d in zip(graph.comm_kind, durations, strict=True)
    ]
    scheduled = kept["no partition"]
    input_floor = exposed_comm_floor(graph, durations)
    return {
        "no_partition_floor_us": exposed_comm_floor(scheduled.graph, scheduled.durations).floor_us,
        "input_floor_us": input_floor.floor_us,
        "input_unhideable_us": input_floor.unhideable_us,
        "any_fusion_floor_us": exposed_comm_floor(graph, no_allreduce).floor_us,
    }


def row(entry: dict) -> dict:
    """The table row of one configuration."""
    by = {p["name"]: p for p in entry["pipelines"] if p["status"] == "ok"}
    tutel = min(
        (by[n] for n in ("Tutel 2", "Tutel 4", "Tutel 8") if n in by),
        key=lambda p: p["makespan_us"],
    )
    base = by["program order"]
    lower = max(base["compute_us"], base["comm_us"])
    out = {"config": entry["config"], "lower_bound_ms": lower / 1000,
           "best_tutel": tutel["name"]}  # fmt: skip
    for key, p in (("program", base), ("fifo", by["FIFO"]), ("tutel", tutel),
                   ("dw_only", by["dW only"]), ("partition_only", by["partition only"]),
                   ("token_only", by["token only"]),
                   ("no_partition", by["no partition"]), ("full", by["full"])):  # fmt: skip
        out[f"{key}_ms"] = p["makespan_us"] / 1000
        out[f"{key}_exposed_ms"] = p["exposed_comm_us"] / 1000
        out[f"{key}_optimizer_s"] = p["optimizer_s"]
    out["full_exposed_vs_program"] = by["full"]["exposed_comm_us"] / base["exposed_comm_us"]
    for key, us in entry.get("floors", {}).items():
        out[key.replace("_us", "_ms")] = us / 1000
    out["full_speedup_vs_tutel"] = tutel["makespan_us"] / by["full"]["makespan_us"]
    return out


def markdown(rows: list[dict]) -> str:
    """The two tables of docs/benchmarks.md (makespans, exposed communication)."""
    lines = [
        "| config | program order | FIFO | best Tutel | dW only | partition only | token only | no partition | full | full vs Tutel | lower bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['program_ms']:.1f} | {r['fifo_ms']:.1f} | "
            f"{r['tutel_ms']:.1f} ({r['best_tutel']}) | {r['dw_only_ms']:.1f} | "
            f"{r['partition_only_ms']:.1f} | {r['token_only_ms']:.1f} | {r['no_partition_ms']:.1f} | {r['full_ms']:.1f} | "
            f"{r['full_speedup_vs_tutel']:.2f}x | {r['lower_bound_ms']:.1f} |"
        )
    lines += [
        "",
        "| config | exposed: program | FIFO | best Tutel | dW only | partition only | token only | no partition | full | full / program | optimizer s (no partition, full) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['program_exposed_ms']:.1f} | {r['fifo_exposed_ms']:.1f} | "
            f"{r['tutel_exposed_ms']:.1f} | {r['dw_only_exposed_ms']:.1f} | "
            f"{r['partition_only_exposed_ms']:.1f} | {r['token_only_exposed_ms']:.1f} | {r['no_partition_exposed_ms']:.1f} | {r['full_exposed_ms']:.1f} | "
            f"{100 * r['full_exposed_vs_program']:.0f}% | {r['no_partition_optimizer_s']:.1f}, {r['full_optimizer_s']:.1f} |"
        )
    lines += [
        "",
        "| config | exposed: program | no partition | floor: its graph | floor: any fusion | target 60 % |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "any_fusion_floor_ms" not in r:
            continue
        program = r["program_exposed_ms"]
        floor = r["any_fusion_floor_ms"]
        verdict = "met" if r["no_partition_exposed_ms"] <= 0.6 * program else (
            "infeasible" if floor > 0.6 * program else "missed")  # fmt: skip
        lines.append(
            f"| {r['config']} | {program:.1f} | {r['no_partition_exposed_ms']:.1f} "
            f"({_share(r['no_partition_exposed_ms'], program)}) | {r['no_partition_floor_ms']:.1f} "
            f"({_share(r['no_partition_floor_ms'], program)}) | {floor:.1f} ({_share(floor, program)}) | {verdict} |"
        )
    return "\n".join(lines) + "\n"


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "n/a"


def main() -> None:
    """Run the headline set and write its JSON and markdown."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configs", nargs="*", default=None, help="substrings of configuration names"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    selected = [c for c in configs() if not args.configs or any(p in c.name for p in args.configs)]
    entries, rows = [], []
    for cfg in selected:
        entry, kept = run_config(cfg, PIPELINES, keep_timelines=True)
        if "program order" in kept and "no partition" in kept:
            entry["floors"] = floors(kept)
        del kept
        entries.append(entry)
        rows.append(row(entry))
        print(json.dumps(rows[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(
        args.out / "headline.json", json.dumps({"configs": entries, "rows": rows}, indent=1)
    )
    write_atomic(args.out / "headline.md", markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
