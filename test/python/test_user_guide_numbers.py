"""The worked example of docs/user-guide.md says what the tools give: its table of four
schedules and the speed-ups in the prose are recomputed at the documented size (the docs
command test runs the same blocks at a smaller size, which could not notice the numbers
drifting: an outside review found the table 1-4 % off after cost-model changes)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from helpers import BIN, REPO

GUIDE = REPO / "docs" / "user-guide.md"

MODEL = ["gpt2-moe", "--layers", "2", "--hidden", "256", "--heads", "4", "--seq", "128",
         "--batch", "8", "--world-size", "8", "--experts-per-rank", "2", "--vocab", "1024"]  # fmt: skip
"""The guide's `lancet-model` command (checked against the guide's text below)."""

ROWS = {
    "program order": ["-p", "program-order"],
    "FIFO (`--data-parallel-schedule`)": ["--data-parallel-schedule"],
    "`lancet-schedule`": ["-p", "lancet-schedule"],
    "`comm-bucket-fusion,lancet-schedule`": ["-p", "comm-bucket-fusion,lancet-schedule"],
}
"""Each table row's label and the schedule options of its `lancet-opt` command."""

COLUMNS = ("makespan_us", "compute_us", "comm_us", "exposed_comm_us", "lower_bound_us")


def _table(text: str) -> dict[str, list[str]]:
    """The cells of the guide's report table, by row label."""
    head = "| schedule | `makespan_us` |"
    start = text.index(head)
    rows: dict[str, list[str]] = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def test_the_worked_example_table_is_what_the_reports_say(tmp_path: Path) -> None:
    text = GUIDE.read_text()
    assert " ".join(MODEL[1:9]) in " ".join(text.split())  # the sizes the guide generates
    model = tmp_path / "model.mlir"
    subprocess.run([str(BIN / "lancet-model"), *MODEL, "-o", str(model)], check=True)
    table = _table(text)
    assert sorted(table) == sorted(ROWS)
    reports = {}
    for label, options in ROWS.items():
        report = tmp_path / f"{len(reports)}.json"
        subprocess.run([str(BIN / "lancet-opt"), str(model), *options, "--report", str(report),
                        "-o", str(tmp_path / "out.mlir")], check=True)  # fmt: skip
        reports[label] = json.loads(report.read_text())
    for label, cells in table.items():
        got = reports[label]
        want = [f"{got[c]:.1f}" for c in COLUMNS] + [str(got["num_collectives"])]
        assert cells == want, label
    # the prose: FIFO's and the two lancet-schedule rows' speed-ups over program order
    base = reports["program order"]["makespan_us"]

    def speedup(label: str) -> str:
        return f"{base / reports[label]['makespan_us']:.2f}"

    assert f"(FIFO {speedup('FIFO (`--data-parallel-schedule`)')}×)" in text
    tuned = reports["`lancet-schedule`"]["makespan_us"]
    assert f"takes {tuned:.1f} µs, {speedup('`lancet-schedule`')}× faster" in text
    fused = reports["`comm-bucket-fusion,lancet-schedule`"]["makespan_us"]
    assert re.search(
        rf"exposed: {fused:.1f} µs, {speedup('`comm-bucket-fusion,lancet-schedule`')}×", text
    )
