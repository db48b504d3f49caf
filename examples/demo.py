"""`make demo`: the main job of lancet-mlir on a bundled example, end to end.

1. generate a small GPT-2 MoE training step (2 layers, one of them MoE, 8 ranks) with lancet-model;
2. schedule it with lancet-opt (program order, FIFO `--data-parallel-schedule`, and the
   whole optimizer `lancet-schedule`) under the H100 cost model, writing reports, a
   Chrome/Perfetto trace and a Gantt picture of the FIFO schedule;
3. check with lancet-run that the optimized module computes the same values (8 simulated ranks);
4. print a before/after table.

Every step is a plain command-line call, echoed so you can rerun it by hand.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

OUT = Path("build/demo")
BIN = Path(sys.executable).parent
console = Console()

MODEL_ARGS = [
    "gpt2-moe",
    "--layers",
    "2",
    "--hidden",
    "256",
    "--heads",
    "4",
    "--seq",
    "128",
    "--batch",
    "8",
    "--world-size",
    "8",
    "--experts-per-rank",
    "2",
    "--vocab",
    "1024",
]
SCHEDULES = {
    "program order": ["-p", "program-order"],
    "FIFO (--data-parallel-schedule)": ["--data-parallel-schedule"],
    "lancet-schedule": ["-p", "lancet-schedule"],
}


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Echo and run one of the project's commands; stop the demo on failure."""
    shown = " ".join(shlex.quote(a) for a in argv)
    console.print(f"[bold cyan]$[/] {shown}")
    res = subprocess.run(
        [str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, check=False
    )
    if res.returncode != 0:
        console.print(res.stderr.strip(), style="red")
        raise SystemExit(res.returncode)
    return res


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    model = OUT / "model.mlir"
    run(["lancet-model", *MODEL_ARGS, "-o", str(model)])
    reports: dict[str, dict] = {}
    for i, (label, flags) in enumerate(SCHEDULES.items()):
        out, report = OUT / f"schedule{i}.mlir", OUT / f"report{i}.json"
        extra = []
        if "FIFO" in label:
            extra = [
                "--timeline",
                str(OUT / "fifo_trace.json"),
                "--gantt",
                str(OUT / "fifo_timeline.png"),
            ]
        run(
            [
                "lancet-opt",
                str(model),
                *flags,
                "--device",
                "h100",
                "-o",
                str(out),
                "--report",
                str(report),
                *extra,
            ]
        )
        reports[label] = json.loads(report.read_text())
    check = run(
        ["lancet-run", "--compare", str(model), str(OUT / "schedule2.mlir"), "--ranks", "8"]
    )
    console.print(check.stdout.splitlines()[0])  # the verdict line; the table follows it

    base = reports["program order"]["makespan_us"]
    table = Table(title="One training iteration, H100 cost model, 8 ranks (simulated)")
    for col in ("schedule", "iteration µs", "speedup", "exposed comm µs", "lower bound µs"):
        table.add_column(col, justify="right" if col != "schedule" else "left")
    for label, rep in reports.items():
        table.add_row(
            label,
            f"{rep['makespan_us']:.1f}",
            f"{base / rep['makespan_us']:.3f}x",
            f"{rep['exposed_comm_us']:.1f}",
            f"{rep.get('lower_bound_us', float('nan')):.1f}",
        )
    console.print(table)
    console.print(
        f"Optimized IR: {OUT}/schedule2.mlir   FIFO trace (open in ui.perfetto.dev): "
        f"{OUT}/fifo_trace.json   picture: {OUT}/fifo_timeline.png"
    )


if __name__ == "__main__":
    main()
