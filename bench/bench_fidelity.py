"""Fidelity of the trace replay and of our cost model on real profiler traces (issue 19).

    python bench/bench_fidelity.py                      # the traces in test/data/traces
    python bench/bench_fidelity.py --hta ~/HolisticTraceAnalysis   # + HTA's test traces
    python bench/bench_fidelity.py --chakra chakra.0.et --out /tmp/f   # another Chakra trace

One row per trace (or per coupled set of ranks): measured and predicted step period, the
per-op start error, both again with one launch lag per stream (`--lags stream`), NCCL
overlap, the GPU-only lower bound, flags, and with `--costs model` the predicted step and the
per-class median ratio (ours / measured). Then a synthetic 10k-kernel trace
(`_synthetic_trace`: no host syncs) is imported and replayed by `lancet-trace` in a
subprocess (the time includes start-up).
Writes `fidelity.json` and `fidelity.md` into `--out` (default bench/results) and the table
into docs/benchmarks.md between the `fidelity:begin` / `fidelity:end` markers.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lancet_mlir.importers.traces import load_steps
from lancet_mlir.importers.traces.fidelity import comm_time_fn, model_durations
from lancet_mlir.importers.traces.report import replay_steps

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "test" / "data" / "traces"
HTA_TRACES = {
    "hta ns_resolution (V100, 1 rank, 5 steps)": "tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta trace_filter sampled rank 0 (A100, 128 ranks)": "tests/data/trace_filter/sampled_rank-0.json.gz",
    "hta negative_queue_length rank 0 (A100, 16 ranks, CUDA graphs)": "tests/data/negative_queue_length_values_check/rank0.json.gz",
    "hta cuda_event_sync (A100, 1 rank)": "tests/data/critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "hta trace_diff control rank 3 (A100, 8 ranks)": "tests/data/trace_diff/control/control.json.gz",
}
MARK_BEGIN, MARK_END = "<!-- fidelity:begin -->", "<!-- fidelity:end -->"


def _row(name: str, paths: list[str], command: str, display: list[str] | None = None) -> dict:
    start = time.perf_counter()
    steps = load_steps(paths)
    rep = replay_steps(steps, comm_time=comm_time_fn(steps, None)[0])
    wall = time.perf_counter() - start
    ranks = rep.get("ranks", [rep])
    row: dict = {
        "trace": name,
        "command": command,
        "ranks": len(ranks),
        "seconds": round(wall, 2),
        "gpu_ops": sum(r["gpu_ops"] for r in ranks),
        "device": steps[0].device,
    }
    if ranks[0]["measured_period_us"] is None:
        row.update(
            {"predicted_period_us": ranks[0]["predicted_period_us"], "flags": ranks[0]["flags"]}
        )
        return row
    worst = max(ranks, key=lambda r: abs(r["period_error"]))
    row.update(
        {
            "measured_period_us": worst["measured_period_us"],
            "predicted_period_us": worst["predicted_period_us"],
            "period_error_max": max(abs(r["period_error"]) for r in ranks),
            "start_error_p50_pct_max": max(r["start_error_p50_pct"] for r in ranks),
            "start_error_p50_us_max": max(r["start_error_p50_us"] for r in ranks),
            "overlap_points_max": max(
                (
                    abs(r["comm_overlap_measured"] - r["comm_overlap_predicted"]) * 100
                    for r in ranks
                    if r["comm_overlap_measured"] is not None
                ),
                default=None,
            ),
            "gpu_only_error_min": min(
                (r["gpu_only_period_us"] - r["measured_period_us"]) / r["measured_period_us"]
                for r in ranks
            ),
            "flags": sorted({f.split(":")[0] for r in ranks for f in r["flags"]}),
            "period_basis": worst["period_basis"],
        }
    )
    # the same replay with one launch lag per stream (`--lags stream`): the default keeps
    # each idle-stream op's own measured lag, which reproduces its start by construction
    srep = replay_steps(steps, comm_time=comm_time_fn(steps, None)[0], lags="stream")
    sranks = srep.get("ranks", [srep])
    row["stream_lags"] = {
        "period_error_max": max(abs(r["period_error"]) for r in sranks),
        "start_error_p50_pct_max": max(r["start_error_p50_pct"] for r in sranks),
        "start_error_p50_us_max": max(r["start_error_p50_us"] for r in sranks),
    }
    coll = rep.get("collectives")
    if coll:
        row["collective_end_error_p50_us"] = coll["end_error_p50_us"]
        row["straggler_rank"] = coll["straggler_rank"]
        row["waiting_share"] = coll["waiting_share"]
        row["nccl_table_vs_wire_median"] = coll["table_vs_wire_median"]
    try:
        durations, fid = model_durations(steps, None)
    except Exception as exc:  # noqa: BLE001 - a GPU without a preset: no model row
        row["model"] = {"error": str(exc)}
        return row
    model = replay_steps(steps, comm_time=comm_time_fn(steps, None)[0], durations=durations)
    mranks = model.get("ranks", [model])
    row["model"] = {
        "device": fid["device"],
        "period_error_max": max(abs(r["period_error"]) for r in mranks),
        "classes": fid["classes"],
        "unmodeled": fid["unmodeled"],
    }
    return row


def _synthetic_trace(path: Path, kernels: int) -> None:
    """A host-paced Kineto trace of `kernels` kernels on two streams, two ProfilerSteps: every
    fourth kernel goes to stream 20, and after every fourth launch a `cudaStreamWaitEvent`
    call with no correlation (the importer finds no event wait in it). No host sync: the
    timing covers import, launch matching and the replay, not host-sync detection."""
    ev = []
    t = 0.0
    per_step = kernels // 2
    corr = 0
    for step in range(2):
        t0 = t
        for k in range(per_step):
            corr += 1
            stream = 7 if k % 4 else 20
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": 3.0,
                    "args": {"correlation": corr},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": f"k{k % 17}",
                    "pid": 0,
                    "tid": stream,
                    "ts": t + 5.0,
                    "dur": 2.0 + (k % 5),
                    "args": {"stream": stream, "correlation": corr},
                }
            )
            t += 9.0
            if k % 4 == 3:
                ev.append(
                    {
                        "ph": "X",
                        "cat": "cuda_runtime",
                        "name": "cudaStreamWaitEvent",
                        "pid": 1,
                        "tid": 1,
                        "ts": t,
                        "dur": 1.0,
                        "args": {"correlation": -1},
                    }
                )
                t += 2.0
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 1,
                "tid": 1,
                "ts": t0,
                "dur": t - t0,
                "args": {},
            }
        )
        t += 20.0
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))


def _timing(kernels: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic.json"
        _synthetic_trace(path, kernels)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(
            [str(Path(sys.executable).parent / "lancet-trace"), "replay", str(path)],
            check=True,
            capture_output=True,
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return {"kernels": kernels, "seconds": round(wall, 2), "cpu_seconds": round(cpu, 2)}


def _pct(x: float | None, digits: int = 2) -> str:
    return "" if x is None else f"{100 * x:.{digits}f} %"


def _ratio(cls: dict | None) -> str:
    """A class's median estimate / measured and its count: `2.00x (n=128)`."""
    return "" if not cls else f"{cls['median_ratio']:.2f}x (n={cls['count']})"


def markdown(rows: list[dict], timing: dict) -> str:
    """The Fidelity table (docs/benchmarks.md)."""
    head = (
        "| trace | GPU ops | measured (µs) | predicted (µs) | period error | start p50 "
        "| `--lags stream`: period error | `--lags stream`: start p50 | NCCL overlap "
        "| GPU-only | flags | `--costs model` step error | GEMM ratio | NCCL ratio "
        "| memcpy ratio | memset ratio |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        if "measured_period_us" not in r:
            lines.append(
                f"| {r['trace']} | {r['gpu_ops']} | (none) | {r['predicted_period_us']:.0f} | | | | | | | "
                f"{', '.join(f.split(':')[0] for f in r['flags'])} | | | | | |"
            )
            continue
        m = r.get("model", {})
        cls = m.get("classes", {})
        gemm = cls.get("gemm", {}).get("median_ratio")
        nccl = r.get("nccl_table_vs_wire_median") or cls.get("nccl_vs_measured", {}).get(
            "median_ratio"
        )
        ov = r["overlap_points_max"]
        sl = r["stream_lags"]
        lines.append(
            f"| {r['trace']} | {r['gpu_ops']} | {r['measured_period_us']:.0f} | {r['predicted_period_us']:.0f} "
            f"| {_pct(r['period_error_max'])} | {r['start_error_p50_us_max']:.1f} µs "
            f"({r['start_error_p50_pct_max']:.2f} %) | {_pct(sl['period_error_max'])} "
            f"| {sl['start_error_p50_us_max']:.1f} µs ({sl['start_error_p50_pct_max']:.2f} %) "
            f"| {'' if ov is None else f'{ov:.1f} pt'} "
            f"| {_pct(r['gpu_only_error_min'], 0)} | {', '.join(r['flags'])} "
            f"| {_pct(m.get('period_error_max'), 1)} | {'' if gemm is None else f'{gemm:.2f}x'} "
            f"| {'' if nccl is None else f'{nccl:.2f}x'} "
            f"| {_ratio(cls.get('memcpy'))} | {_ratio(cls.get('memset'))} |"
        )
    cmds = "\n".join(f"* {r['trace']}: `{r['command']}`" for r in rows)
    return (
        head
        + "\n".join(lines)
        + "\n\nCommands (add `--costs model` for the model columns):\n\n"
        + cmds
        + f"\n\nImport + replay of a synthetic {timing['kernels']}-kernel trace "
        "(two streams, a `cudaStreamWaitEvent` call after every fourth launch, no host sync; "
        f"`lancet-trace replay`, process start-up included): {timing['seconds']} s wall, "
        f"{timing['cpu_seconds']} s CPU (the wall time depends on what else the 2 cores run).\n"
    )


def main(argv: list[str] | None = None) -> None:
    """Run the fidelity rows, write the outputs."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--hta", default=None, help="a HolisticTraceAnalysis checkout (for its test traces)"
    )
    p.add_argument(
        "--chakra",
        default=str(DATA / "chakra_feeder.0.et.gz"),
        help="a Chakra .et file (default: the feeder test trace in test/data/traces)",
    )
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--kernels", type=int, default=10000)
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = p.parse_args(argv)
    dlrm = sorted(str(x) for x in (DATA / "dlrm").glob("worker*.pt.trace.json.gz"))
    rel = [str(Path(x).relative_to(ROOT)) for x in dlrm]
    rows = [
        _row("param DLRM, 8 V100 ranks coupled", dlrm, "lancet-trace replay " + " ".join(rel)),
        _row("param DLRM rank 0 alone", dlrm[:1], f"lancet-trace replay {rel[0]}"),
    ]
    if args.hta:
        for name, sub in HTA_TRACES.items():
            path = Path(args.hta) / sub
            if path.exists():
                rows.append(_row(name, [str(path)], f"lancet-trace replay <HTA>/{sub}"))
    if args.chakra:
        chakra = Path(args.chakra)
        shown = str(chakra.relative_to(ROOT)) if chakra.is_relative_to(ROOT) else chakra.name
        rows.append(
            _row("Chakra feeder test trace (.et)", [args.chakra], f"lancet-trace replay {shown}")
        )
    timing = _timing(args.kernels)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fidelity.json").write_text(
        json.dumps({"rows": rows, "timing": timing}, indent=1, sort_keys=True) + "\n"
    )
    md = markdown(rows, timing)
    (out / "fidelity.md").write_text(md)
    if not args.no_docs:
        doc = ROOT / "docs" / "benchmarks.md"
        text = doc.read_text()
        if MARK_BEGIN in text and MARK_END in text:
            a, rest = text.split(MARK_BEGIN, 1)
            _, b = rest.split(MARK_END, 1)
            doc.write_text(a + MARK_BEGIN + "\n" + md + MARK_END + b)
    sys.stdout.write(md)


if __name__ == "__main__":
    main()
