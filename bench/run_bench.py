"""The paper benchmark: every baseline and every optimizing pipeline on every configuration.

    python bench/run_bench.py                 # full run (make bench), writes bench/results/
    python bench/run_bench.py --quick         # small configs, a CI smoke test
    python bench/run_bench.py --configs 'gpt2_moe_nl12*_g16_h100' --out /tmp/bench

Configurations: Lancet's GPT-2 MoE presets (`lancet_mlir.models.gpt2_moe.PRESETS`) at 8, 16
and 32 ranks, each under the H100 and the A100 cost model, plus the JAX/XLA StableHLO
fixtures (test/data/stablehlo) imported with `import-stablehlo`, whose input order is XLA's
own schedule. Every pipeline of `PIPELINES` runs in-process (`PassPipeline.parse_spec`) on
a fresh clone of the configuration's module, whose `lancet.device` (and, with `--cluster`,
`lancet.cluster`) attributes configure the passes and the simulator alike; the result is simulated with the fixed-order simulator
(`simulate_graph` on the block holding the step). To benchmark a new optimizer, add one line to `PIPELINES`.

Outputs (written atomically into --out): `bench_results.json` (everything),
`lancet_opt_timing.json` (parse / passes / print time of lancet-opt on the largest
generated configuration), `README.md` (tables) and PNG plots (iteration time and speedup
per schedule, a Gantt chart of one MoE layer before/after).
"""

from __future__ import annotations

import argparse
import fnmatch
import io
import json
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.parser import Parser
from xdsl.passes import PassPipeline
from xdsl.printer import Printer

from lancet_mlir.attrs import CLUSTER, DEVICE
from lancet_mlir.cost.clusters import cluster_names, get_cluster
from lancet_mlir.cost.cost_model import CostModel
from lancet_mlir.cost.settings import module_cost_settings
from lancet_mlir.dialects.comm import CollectiveOp
from lancet_mlir.graph.dataflow import DataflowGraph, op_display_name
from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.importers.stablehlo import graph_block, import_stablehlo
from lancet_mlir.models.gpt2_moe import PRESETS, GPT2MoEConfig, build_gpt2_moe
from lancet_mlir.passes import get_all_passes
from lancet_mlir.runtime.loader import make_context
from lancet_mlir.sim.blocks import BlockResult, simulate_graph
from lancet_mlir.sim.options import SimOptions
from lancet_mlir.support.files import write_atomic
from lancet_mlir.support.progress import ProgressBar
from lancet_mlir.tools.errors import UserError, one_line

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_plots  # noqa: E402 - the plotting helpers next to this script

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "bench" / "results"
STABLEHLO_DIR = REPO / "test" / "data" / "stablehlo"


@dataclass(frozen=True)
class Pipeline:
    """One schedule to compare: a display name, an xDSL pipeline spec, baseline or ours."""

    name: str
    spec: str
    baseline: bool


# The one list of schedules. Baselines first; `program-order` is the reference (speedup 1.0).
PIPELINES: list[Pipeline] = [
    Pipeline("program order", "program-order", baseline=True),
    Pipeline("DDP buckets", "ddp-bucket-schedule", baseline=True),
    Pipeline("Tutel degree 2", "tutel-pipeline{degree=2}", baseline=True),
    Pipeline("Tutel degree 4", "tutel-pipeline{degree=4}", baseline=True),
    Pipeline("Tutel degree 8", "tutel-pipeline{degree=8}", baseline=True),
    Pipeline("FIFO", "data-parallel-schedule", baseline=False),
    Pipeline("lancet-schedule", "lancet-schedule", baseline=False),
    Pipeline(
        "bucket fusion + lancet-schedule", "comm-bucket-fusion,lancet-schedule", baseline=False
    ),
]
REFERENCE_SPEC = "program-order"

WORLD_SIZES = (8, 16, 32)
DEVICES = ("h100", "a100")
QUICK_DEVICES = ("h100",)
QUICK_MODEL = GPT2MoEConfig(
    layers=2, hidden=64, heads=4, seq=32, batch=2, world_size=4, experts_per_rank=2, vocab=256
)
STABLEHLO_FILES = {
    "shardy": "moe_step.stablehlo.generic.mlir",
    "gspmd": "moe_step.gspmd.stablehlo.generic.mlir",
    "xla_cpu": "moe_step.cpu.scheduled.generic.mlir",
}
TIMED_PIPELINES = ("", "data-parallel-schedule", "comm-bucket-fusion,lancet-schedule")
GANTT_ANCHORS = ("comp.moe_combine_dx", "comp.moe_dispatch_dx")
ANCHOR_ATTR = "bench.anchor"


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark input: a generated model or a StableHLO file, under one device."""

    name: str
    source: str  # "gpt2_moe" or "stablehlo"
    device: str
    family: str  # the model without world size and device (a preset, a StableHLO file)
    model: GPT2MoEConfig | None = None
    file: str | None = None
    cluster: str | None = None  # a cluster preset (its device is `device`)

    def cost_attributes(self) -> dict[str, StringAttr]:
        """The module attributes that make the passes and the simulator cost this config."""
        out = {DEVICE: StringAttr(self.device)}
        if self.cluster is not None:
            out[CLUSTER] = StringAttr(self.cluster)
        return out


# ---- configurations ---------------------------------------------------------------------------
def all_configs(
    quick: bool, dtype: str | None = None, cluster: str | None = None
) -> list[BenchConfig]:
    """The configurations of a full (or --quick) run, in report order. `dtype` replaces the
    models' dtype (f32 in the presets) and is appended to their names; `cluster` replaces the
    devices by that one cluster preset (its device, GPUs per node and network; named after
    the cluster)."""
    devices = QUICK_DEVICES if quick else DEVICES
    if cluster is not None:
        return [
            replace(
                c,
                name=c.name.removesuffix(f"_{c.device}") + f"_{preset.name}",
                device=preset.device,
                cluster=preset.name,
            )
            for preset in (get_cluster(cluster),)
            for c in all_configs(quick, dtype)
            if c.device == devices[0]
        ]
    configs: list[BenchConfig] = []
    models = (
        [("tiny_moe", QUICK_MODEL)]
        if quick
        else [
            (preset, replace(cfg, world_size=ws))
            for preset, cfg in PRESETS.items()
            for ws in WORLD_SIZES
        ]
    )
    if dtype is not None:
        models = [(f"{family}_{dtype}", replace(m, dtype=dtype)) for family, m in models]
    for device in devices:
        configs += [
            BenchConfig(f"{family}_g{m.world_size}_{device}", "gpt2_moe", device, family, model=m)
            for family, m in models
        ]
    for device in devices:
        configs += [
            BenchConfig(
                f"stablehlo_{short}_{device}", "stablehlo", device, f"stablehlo_{short}", file=fname
            )
            for short, fname in STABLEHLO_FILES.items()
        ]
    return configs


def select(configs: Sequence[BenchConfig], patterns: Sequence[str] | None) -> list[BenchConfig]:
    """Configurations whose name matches one of the glob patterns (or contains it)."""
    if not patterns:
        return list(configs)
    return [c for c in configs if any(fnmatch.fnmatch(c.name, p) or p in c.name for p in patterns)]


# ---- one configuration -------------------------------------------------------------------------
def build_module(cfg: BenchConfig) -> tuple[ModuleOp, dict]:
    """The configuration's input module and facts about building it."""
    start = time.perf_counter()
    if cfg.source == "gpt2_moe":
        assert cfg.model is not None
        module = build_gpt2_moe(cfg.model)
        info = {"model": asdict(cfg.model), "generate_s": time.perf_counter() - start}
        _tag_anchors(module)
        return module, info
    assert cfg.file is not None
    path = STABLEHLO_DIR / cfg.file
    module = Parser(make_context(), path.read_text(), str(path)).parse_module()
    module.verify()
    parsed = time.perf_counter()
    summary = import_stablehlo(module)
    module.verify()
    info = {
        "file": str(path.relative_to(REPO)),
        "parse_s": parsed - start,
        "import_s": time.perf_counter() - parsed,
        "imported_collectives": summary.collectives,
        "world_size": summary.world_size,
    }
    return module, info


def _tag_anchors(module: ModuleOp) -> None:
    """Mark the ops bounding the backward pass of the last MoE layer (for the Gantt chart)."""
    first_name, last_name = GANTT_ANCHORS
    begin = None
    for op in module.walk():
        name = op_display_name(op)
        if begin is None and name == first_name:
            begin = op
            op.attributes[ANCHOR_ATTR] = StringAttr("begin")
        elif begin is not None and name == last_name:
            op.attributes[ANCHOR_ATTR] = StringAttr("end")
            return


def simulate_main_block(module: ModuleOp, cost_model: CostModel) -> BlockResult:
    """Fixed-order simulation of the block holding the training step (`graph_block`: the
    most collectives, then the most ops); nested blocks (fusion bodies, reduction regions)
    are part of their op and are not simulated on their own."""
    block = graph_block(module)
    graph = DataflowGraph.from_block(block)
    durations, timeline, summary = simulate_graph(
        graph, cost_model.graph_times(graph), SimOptions()
    )
    parent = block.parent_op()
    label = op_display_name(parent) if parent is not None else "<block>"
    return BlockResult(label, None, True, graph, durations, timeline, summary)


def run_pipeline(
    base: ModuleOp, pipe: Pipeline, cost_model: CostModel, ctx: Context
) -> tuple[dict, BlockResult | None]:
    """Apply `pipe` to a clone of `base`, simulate it; (metrics, main block result)."""
    passes = get_all_passes()
    module = base.clone()
    start = time.perf_counter()
    try:
        PassPipeline.parse_spec(passes, pipe.spec).apply(ctx, module)
        optimizer_s = time.perf_counter() - start
        module.verify()
        check_dominance(module)
        result = simulate_main_block(module, cost_model)
    except Exception as exc:  # noqa: BLE001 - one failing pipeline must not stop the run
        return {"name": pipe.name, "spec": pipe.spec, "baseline": pipe.baseline,
                "status": "error", "error": one_line(exc)}, None  # fmt: skip
    s = result.summary
    lower = s.lower_bound_us
    metrics = {
        "name": pipe.name,
        "spec": pipe.spec,
        "baseline": pipe.baseline,
        "status": "ok",
        "makespan_us": s.makespan_us,
        "compute_us": s.compute_us,
        "comm_us": s.comm_us,
        "exposed_comm_us": s.exposed_comm_us,
        "overlap_us": s.overlap_us,
        "lower_bound_us": lower,
        "gap_to_lower_bound": s.makespan_us / lower - 1.0 if lower > 0 else None,
        "optimizer_s": optimizer_s,
        "num_ops": s.num_ops,
        "num_collectives": s.num_collectives,
    }
    return metrics, result


def add_speedups(entries: list[dict]) -> tuple[str | None, str | None]:
    """Fill speedup_vs_program_order / speedup_vs_best_baseline; (best baseline, best) names."""
    ok = [e for e in entries if e["status"] == "ok"]
    reference = next((e for e in ok if e["spec"] == REFERENCE_SPEC), None)
    baselines = [e for e in ok if e["baseline"]]
    best_base = min(baselines, key=lambda e: e["makespan_us"]) if baselines else None
    for e in ok:
        e["speedup_vs_program_order"] = (
            reference["makespan_us"] / e["makespan_us"] if reference is not None else None
        )
        e["speedup_vs_best_baseline"] = (
            best_base["makespan_us"] / e["makespan_us"] if best_base is not None else None
        )
    best = min(ok, key=lambda e: e["makespan_us"]) if ok else None
    return (best_base["name"] if best_base else None), (best["name"] if best else None)


def run_config(
    cfg: BenchConfig, pipelines: Sequence[Pipeline], keep_timelines: bool
) -> tuple[dict, dict]:
    """Benchmark every pipeline on one configuration; (JSON entry, kept timelines by name)."""
    module, info = build_module(cfg)
    module.attributes.update(cfg.cost_attributes())  # what the passes and the simulator cost
    cost_config = module_cost_settings(module).config()
    cost_model = CostModel.from_config(cost_config)
    ctx = make_context()
    entries: list[dict] = []
    kept: dict[str, BlockResult] = {}
    for pipe in pipelines:
        metrics, result = run_pipeline(module, pipe, cost_model, ctx)
        entries.append(metrics)
        if keep_timelines and result is not None:
            kept[pipe.name] = result
    best_baseline, best = add_speedups(entries)
    unknown = cost_model.warn_unknown("run_bench")
    ws = module.attributes.get("lancet.world_size")
    entry = {
        "config": cfg.name,
        "source": cfg.source,
        "family": cfg.family,
        "device": cfg.device,
        "cluster": cfg.cluster,
        "network": cost_config.describe(),
        "world_size": ws.value.data if ws is not None else None,
        "input_ops": sum(1 for op in module.walk()),
        "input_collectives": sum(1 for op in module.walk() if isinstance(op, CollectiveOp)),
        **info,
        "pipelines": entries,
        "best_baseline": best_baseline,
        "best": best,
        "ops_costed_zero": unknown,
    }
    return entry, kept


# ---- lancet-opt timing -------------------------------------------------------------------------
def time_lancet_opt(name: str, model: GPT2MoEConfig, workdir: Path) -> dict:
    """Parse / verify / pass / print times of one generated model, in-process and via the CLI."""
    start = time.perf_counter()
    module = build_gpt2_moe(model)
    generate_s = time.perf_counter() - start
    text, print_s = _print(module)
    ctx = make_context()
    start = time.perf_counter()
    parsed = Parser(ctx, text, name).parse_module()
    parse_s = time.perf_counter() - start
    start = time.perf_counter()
    parsed.verify()
    verify_s = time.perf_counter() - start
    in_process = []
    for spec in TIMED_PIPELINES[1:]:
        clone = parsed.clone()
        start = time.perf_counter()
        PassPipeline.parse_spec(get_all_passes(), spec).apply(ctx, clone)
        pass_s = time.perf_counter() - start
        _, print_after_s = _print(clone)
        in_process.append({"pipeline": spec, "passes_s": pass_s, "print_s": print_after_s})
    path = workdir / f"{name}.mlir"
    path.write_text(text)
    cli = [_time_cli(path, spec, workdir) for spec in TIMED_PIPELINES]
    return {
        "config": name,
        "model": asdict(model),
        "num_ops": sum(1 for _ in parsed.walk()),
        "text_bytes": len(text.encode()),
        "generate_s": generate_s,
        "print_s": print_s,
        "parse_s": parse_s,
        "verify_s": verify_s,
        "in_process": in_process,
        "cli": cli,
    }


def _print(module: ModuleOp) -> tuple[str, float]:
    buf = io.StringIO()
    start = time.perf_counter()
    Printer(stream=buf).print_op(module)
    return buf.getvalue(), time.perf_counter() - start


def _time_cli(path: Path, spec: str, workdir: Path) -> dict:
    """Wall time of `lancet-opt FILE [-p SPEC] -o OUT` (interpreter start-up included)."""
    tool = Path(sys.executable).parent / "lancet-opt"
    out = workdir / "out.mlir"
    argv = [str(tool), str(path), "-o", str(out)] + (["-p", spec] if spec else [])
    start = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    return {"pipeline": spec or "(parse + print only)", "wall_s": wall, "returncode": res.returncode,
            "stderr": res.stderr.strip()[-500:]}  # fmt: skip


def timing_model(configs: Sequence[BenchConfig]) -> tuple[str, GPT2MoEConfig] | None:
    """The model lancet-opt is timed on: the largest selected generated model (most layers,
    then batch); the 24-layer presets in a full run."""
    models = [c for c in configs if c.model is not None]
    if not models:
        return None
    cfg = max(models, key=lambda c: (c.model.layers, c.model.batch, -models.index(c)))
    return cfg.name, cfg.model


# ---- reports -------------------------------------------------------------------------------------
def _fmt_time(us: float, unit: str) -> str:
    return f"{us / 1000:.3f}" if unit == "ms" else f"{us:.2f}"


def _fmt(x: float | None, pattern: str = "{:.3f}") -> str:
    return "n/a" if x is None else pattern.format(x)


def config_table(run: dict) -> list[str]:
    """Markdown table of one configuration."""
    ok = [e for e in run["pipelines"] if e["status"] == "ok"]
    unit = "ms" if ok and max(e["makespan_us"] for e in ok) >= 1000 else "µs"
    lines = [
        f"| schedule | kind | iteration ({unit}) | vs program order | vs best baseline | "
        f"exposed comm ({unit}) | gap to lower bound | optimizer (s) | ops | collectives |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for e in run["pipelines"]:
        kind = "baseline" if e["baseline"] else "ours"
        if e["status"] != "ok":
            lines.append(f"| {e['name']} | {kind} | error: {e['error']} | | | | | | | |")
            continue
        gap = e["gap_to_lower_bound"]
        lines.append(
            f"| {e['name']} | {kind} | {_fmt_time(e['makespan_us'], unit)} | "
            f"{_fmt(e['speedup_vs_program_order'], '{:.4f}')} | "
            f"{_fmt(e['speedup_vs_best_baseline'], '{:.4f}')} | "
            f"{_fmt_time(e['exposed_comm_us'], unit)} | {_fmt(gap, '{:.2%}')} | "
            f"{e['optimizer_s']:.2f} | {e['num_ops']} | {e['num_collectives']} |"
        )
    return lines


def summary_table(runs: Sequence[dict]) -> list[str]:
    """One line per configuration: the best baseline and the best of our schedules."""
    lines = [
        "| configuration | world | device | best baseline | best ours | ours vs program order | "
        "ours vs best baseline | exposed comm: baseline -> ours |",
        "|---|---:|---|---|---|---:|---:|---|",
    ]
    for run in runs:
        ok = [e for e in run["pipelines"] if e["status"] == "ok"]
        base = next((e for e in ok if e["name"] == run["best_baseline"]), None)
        ours = [e for e in ok if not e["baseline"]]
        best = min(ours, key=lambda e: e["makespan_us"]) if ours else None
        if base is None or best is None:
            lines.append(
                f"| {run['config']} | {run['world_size']} | {run['device']} | n/a | n/a | | | |"
            )
            continue
        lines.append(
            f"| {run['config']} | {run['world_size']} | {run['device']} | {base['name']} | "
            f"{best['name']} | {best['speedup_vs_program_order']:.4f} | "
            f"{best['speedup_vs_best_baseline']:.4f} | "
            f"{base['exposed_comm_us'] / 1000:.3f} ms -> {best['exposed_comm_us'] / 1000:.3f} ms |"
        )
    return lines


def timing_table(timing: dict) -> list[str]:
    """Markdown lines for the lancet-opt timing."""
    lines = [
        f"`lancet-opt` on `{timing['config']}`: {timing['num_ops']} ops, "
        f"{timing['text_bytes'] / 1e6:.1f} MB of text.",
        "",
        "| phase (in-process) | seconds |",
        "|---|---:|",
        f"| generate (build_gpt2_moe) | {timing['generate_s']:.2f} |",
        f"| print | {timing['print_s']:.2f} |",
        f"| parse | {timing['parse_s']:.2f} |",
        f"| verify | {timing['verify_s']:.2f} |",
    ]
    for item in timing["in_process"]:
        lines.append(f"| passes `{item['pipeline']}` | {item['passes_s']:.2f} |")
        lines.append(f"| print after `{item['pipeline']}` | {item['print_s']:.2f} |")
    lines += ["", "| command line | wall (s) | exit |", "|---|---:|---:|"]
    for item in timing["cli"]:
        flag = f" -p '{item['pipeline']}'" if not item["pipeline"].startswith("(") else ""
        lines.append(
            f"| `lancet-opt model.mlir{flag} -o out.mlir` | {item['wall_s']:.2f} | {item['returncode']} |"
        )
    return lines


def write_readme(out: Path, payload: dict, plots: Sequence[str]) -> None:
    """bench/results/README.md: summary, per-configuration tables, timing, plots."""
    runs = payload["runs"]
    meta = payload["meta"]
    lines = [
        "# Benchmark results",
        "",
        f"Command: `{meta['command']}`. Simulated with the fixed-order timeline simulator "
        f"({meta['sim']['num_comm_streams']} comm stream, overlap slowdown "
        f"{meta['sim']['overlap_slowdown']}) under each configuration's cost model (roofline "
        "compute + measured/alpha-beta comm tables, `lancet_mlir.cost.cost_model`). "
        "Speedups are simulated iteration-time ratios, not measurements. Optimizer time is the "
        "wall time of the pipeline's passes in this process.",
        "",
        "Schedules (`PIPELINES` in bench/run_bench.py): "
        + "; ".join(
            f"{p['name']} = `{p['spec']}`{' (baseline)' if p['baseline'] else ''}"
            for p in meta["pipelines"]
        )
        + ". StableHLO inputs are imported with `import-stablehlo`; their program order is XLA's schedule.",
        "",
        "## Summary",
        "",
        *summary_table(runs),
        "",
    ]
    if payload.get("lancet_opt_timing"):
        lines += [
            "## lancet-opt on a whole generated graph",
            "",
            *timing_table(payload["lancet_opt_timing"]),
            "",
        ]
    if plots:
        lines += ["## Plots", "", *[f"![{p}]({p})" for p in plots], ""]
    lines += ["## Per configuration", ""]
    for run in runs:
        lines += [f"### {run['config']}", ""]
        lines.append(
            f"{run['source']}, {run['device']}, world size {run['world_size']}, "
            f"{run['input_ops']} ops, {run['input_collectives']} collectives in the input."
        )
        lines += ["", *config_table(run), ""]
    write_atomic(out / "README.md", "\n".join(lines))


# ---- driver ----------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small configurations (CI smoke test)")
    parser.add_argument("--configs", nargs="*", help="glob patterns / substrings of config names")
    parser.add_argument(
        "--cluster",
        default=None,
        help=f"cost every configuration on one cluster preset instead of the "
        f"default devices: {', '.join(cluster_names())}",
    )
    parser.add_argument(
        "--dtype",
        choices=("f32", "bf16", "f16"),
        help="dtype of the generated models (default: the presets' f32)",
    )
    parser.add_argument(
        "--out", default=str(DEFAULT_OUT), help="output folder (default bench/results)"
    )
    parser.add_argument("--no-timing", action="store_true", help="skip the lancet-opt timing")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--list", action="store_true", help="list the configurations and exit")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, log: Callable[[str], None] = print) -> int:
    """Run the benchmark; returns the exit code."""
    args = parse_args(argv)
    try:
        configs = select(all_configs(args.quick, args.dtype, args.cluster), args.configs)
    except UserError as exc:
        sys.stderr.write(f"run_bench: error: --cluster: {exc}\n")
        return 1
    if args.list:
        for cfg in configs:
            log(cfg.name)
        return 0
    if not configs:
        sys.stderr.write("run_bench: error: no configuration matches --configs\n")
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gantt_config = next((c.name for c in configs if c.source == "gpt2_moe"), None)
    runs: list[dict] = []
    kept: dict[str, BlockResult] = {}
    # a bar on a terminal; the per-configuration lines are the progress in a pipe or log
    with ProgressBar("bench", len(configs)) as bar:
        for done, cfg in enumerate(configs):
            bar.update(done, item=cfg.name)
            start = time.perf_counter()
            entry, timelines = run_config(cfg, PIPELINES, keep_timelines=cfg.name == gantt_config)
            runs.append(entry)
            kept.update(timelines)
            log(f"{cfg.name}: best {entry['best']} ({time.perf_counter() - start:.1f} s)")
        bar.update(len(configs))
    timing = None
    chosen = None if args.no_timing else timing_model(configs)
    if chosen is not None:
        name, model = chosen
        with tempfile.TemporaryDirectory() as tmp:
            timing = time_lancet_opt(name, model, Path(tmp))
        write_atomic(out / "lancet_opt_timing.json", json.dumps(timing, indent=1) + "\n")
        log(f"lancet-opt timing on {name}: parse {timing['parse_s']:.1f} s")
    sim = SimOptions()
    payload = {
        "meta": {
            "command": " ".join(
                ["python bench/run_bench.py", *(argv if argv is not None else sys.argv[1:])]
            ),
            "python": platform.python_version(),
            "sim": {
                "num_comm_streams": sim.num_comm_streams,
                "overlap_slowdown": sim.overlap_slowdown,
            },
            "pipelines": [asdict(p) for p in PIPELINES],
            "reference": REFERENCE_SPEC,
        },
        "runs": runs,
        "lancet_opt_timing": timing,
    }
    write_atomic(out / "bench_results.json", json.dumps(payload, indent=1) + "\n")
    plots: list[str] = []
    if not args.no_plots:
        plots = bench_plots.write_all(out, runs, kept, gantt_config, ANCHOR_ATTR)
    write_readme(out, payload, plots)
    log(f"wrote {out / 'bench_results.json'} and {out / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
