"""Optimizer time: `lancet-opt -p lancet-schedule` against parse + print, per model size.

For each layer count, one GPT-2 MoE model (d=1024, 16 heads, seq 512, batch 8, 2 experts
per rank; 32 ranks, 64 from 48 layers on) is generated, then two whole processes run back
to back on it: `lancet-opt --cluster p3dn` (parse + print) and `lancet-opt --cluster p3dn
-p lancet-schedule{jobs=N}` for each N of `--jobs` (default 1). CPU seconds (user + system
of the child and of its forked worker) and peak memory (max RSS, the larger process) are read
from `os.wait4`, so the CPU ratio holds on a shared machine better than wall time does; wall
seconds are measured too (what `jobs=2` saves). Each run is repeated `--repeat` times and the
smallest of each figure is kept.

    python bench/bench_optimizer_time.py                      # 12, 24, 48 layers
    python bench/bench_optimizer_time.py --layers 12 24 48 96 --out /tmp/t
    python bench/bench_optimizer_time.py --layers 24 --baseline /tmp/old   # before/after
    python bench/bench_optimizer_time.py --layers 12 24 --jobs 1 2          # one worker forked

`--baseline DIR` (a source tree of another commit, e.g. `git archive OLD lancet_mlir | tar
-x -C DIR`) also runs both processes with that tree's `lancet_mlir` first on PYTHONPATH,
interleaved with the current ones, and adds a `before` row per layer count.

Writes `optimizer_time.json`, `optimizer_time.md` (the table of docs/benchmarks.md) and
`optimizer_time.png` (CPU seconds against layers, both runs) into `--out`
(default bench/results).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _child_run(argv: list[str], source: Path | None = None) -> tuple[float, float, float]:
    """(CPU seconds, peak RSS in MB, wall seconds) of one child process running `argv` (exit
    0 required); with `source`, its `lancet_mlir` is imported instead of the installed one."""
    env = None
    if source is not None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(source), *filter(None, [env.get("PYTHONPATH")])])
    began = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, rusage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"bench_optimizer_time: {' '.join(argv)} failed: {err.strip()}")
    return rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss / 1024.0, wall


def model_argv(layers: int) -> list[str]:
    """The `lancet-model` command line of the benchmark model with `layers` layers."""
    world = 32 if layers < 48 else 64
    return [str(BIN / "lancet-model"), "gpt2-moe", "--layers", str(layers), "--hidden", "1024",
            "--heads", "16", "--seq", "512", "--batch", "8", "--world-size", str(world)]  # fmt: skip


def measure(
    layers: int,
    repeat: int,
    workdir: Path,
    baseline: Path | None = None,
    jobs: list[int] | None = None,
) -> list[dict]:
    """One row per version (the baseline's first) and `jobs` value: ops, CPU and wall seconds
    and peak MB of both runs, and their ratios."""
    model = workdir / f"nl{layers}.mlir"
    model.write_text(
        subprocess.run(model_argv(layers), check=True, capture_output=True, text=True).stdout
    )
    ops = sum(1 for line in model.read_text().splitlines() if " = " in line or '"comm.' in line)
    opt = [str(BIN / "lancet-opt"), "--cluster", "p3dn", str(model), "-o", os.devnull]
    sources: list[tuple[str, Path | None]] = [("after", None)]
    if baseline is not None:
        sources.insert(0, ("before", baseline))
    runs = [(name, source, n) for name, source in sources for n in (jobs or [1])]
    inf = float("inf")
    best = {(name, n): {"cpu": [inf, inf], "mb": [0.0, 0.0], "wall": [inf, inf]}
            for name, _, n in runs}  # fmt: skip
    for _ in range(repeat):
        for name, source, n in runs:  # interleaved: all see the same machine load
            b = best[(name, n)]
            spec = "lancet-schedule" if n == 1 else f"lancet-schedule{{jobs={n}}}"
            for k, argv in enumerate((opt, [*opt, "-p", spec])):
                cpu, mb, wall = _child_run(argv, source)
                b["cpu"][k], b["mb"][k] = min(b["cpu"][k], cpu), max(b["mb"][k], mb)
                b["wall"][k] = min(b["wall"][k], wall)
    rows = []
    for name, _, n in runs:
        b = best[(name, n)]
        (base_cpu, sched_cpu), (base_mb, sched_mb) = b["cpu"], b["mb"]
        base_wall, sched_wall = b["wall"]
        row = {
            "layers": layers, "ops": ops, "jobs": n, "parse_print_s": round(base_cpu, 2),
            "lancet_schedule_s": round(sched_cpu, 2), "time_ratio": round(sched_cpu / base_cpu, 2),
            "parse_print_wall_s": round(base_wall, 2), "lancet_schedule_wall_s": round(sched_wall, 2),
            "wall_ratio": round(sched_wall / base_wall, 2),
            "parse_print_mb": round(base_mb, 1), "lancet_schedule_mb": round(sched_mb, 1),
            "memory_ratio": round(sched_mb / base_mb, 2),
        }  # fmt: skip
        if baseline is not None:
            row["version"] = name
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    """The markdown table of the rows."""
    lines = [
        "| layers | ops | jobs | parse + print s | lancet-schedule s | ratio | wall s: parse + print, lancet-schedule | wall ratio | parse + print MB | lancet-schedule MB | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        label = f"{r['layers']}, {r['version']}" if "version" in r else str(r["layers"])
        lines.append(
            f"| {label} | {r['ops']} | {r['jobs']} | {r['parse_print_s']} | {r['lancet_schedule_s']} | "
            f"{r['time_ratio']}x | {r['parse_print_wall_s']}, {r['lancet_schedule_wall_s']} | "
            f"{r['wall_ratio']}x | {r['parse_print_mb']} | {r['lancet_schedule_mb']} | {r['memory_ratio']}x |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    """CPU seconds of both runs against layers (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    one = [r for r in rows if r.get("jobs", 1) == 1]
    after = [r for r in one if r.get("version", "after") == "after"]
    before = [r for r in one if r.get("version") == "before"]
    layers = [r["layers"] for r in after]
    ax.plot(layers, [r["parse_print_s"] for r in after], "o-", label="parse + print")
    ax.plot(layers, [r["lancet_schedule_s"] for r in after], "s-", label="lancet-schedule")
    if before:
        ax.plot([r["layers"] for r in before], [r["lancet_schedule_s"] for r in before], "s--",
                label="lancet-schedule, before")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("layers")
    ax.set_ylabel("CPU s (whole process)")
    ax.legend()
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[12, 24, 48])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1],
                        help="lancet-schedule{jobs=N} values to run (each a row)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="source tree of the commit to compare with (a before row each)")  # fmt: skip
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.jobs):
        parser.error("--jobs: each value must be >= 1")
    if args.baseline is not None and not (args.baseline / "lancet_mlir").is_dir():
        parser.error(f"--baseline {args.baseline}: no lancet_mlir folder there")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            row
            for n in args.layers
            for row in measure(n, args.repeat, Path(tmp), args.baseline, args.jobs)
        ]
    (args.out / "optimizer_time.json").write_text(json.dumps(rows, indent=1) + "\n")
    (args.out / "optimizer_time.md").write_text(table(rows))
    plot(rows, args.out / "optimizer_time.png")
    sys.stdout.write(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
