"""Golden outputs: every pass on a fixed set of inputs, for checking that a refactoring
changes no output byte.

    python bench/golden.py write DIR      # IR + report of every (input, pipeline) into DIR
    python bench/golden.py compare A B    # list the files that differ (exit 1 if any)

Run `write` on the commit before a change and after it, then `compare`. The inputs are small
`lancet-model` graphs (two gates, two dtypes, two optimizers); the pipelines are each registered
pass alone with default options on two cost settings, plus the README's pipelines (the lit tests
check their own outputs). One `lancet-opt` process per case,
so the command-line path (options, module attributes, reports) is what gets compared.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

MODELS = {
    "switch2": ["--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--batch", "4",
                "--world-size", "4", "--vocab", "128"],
    "top2": ["--layers", "2", "--hidden", "32", "--heads", "2", "--seq", "16", "--batch", "2",
             "--world-size", "2", "--vocab", "64", "--gate", "top2"],
    "bf16w8": ["--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--batch", "8",
               "--world-size", "8", "--vocab", "128", "--dtype", "bf16", "--optimizer", "sgd"],
}  # fmt: skip

PASSES = [
    "data-parallel-schedule", "comm-bucket-fusion", "simulate", "lancet-schedule", "dw-schedule",
    "fuse-noncritical-comm", "program-order", "ddp-bucket-schedule", "tutel-pipeline",
    "moe-partition", "moe-partition{axis=token}", "delay-all-to-allv",
    "comm-bucket-fusion{bucket-bytes=26214400},lancet-schedule",
    "lancet-schedule{partition=auto}",
]  # fmt: skip
CLUSTERS = ["p3dn", "h100"]


def _cases(tmp: Path) -> list[tuple[str, Path, list[str]]]:
    cases = []
    for name, argv in MODELS.items():
        path = tmp / f"{name}.mlir"
        if not path.exists():
            subprocess.run(
                [str(BIN / "lancet-model"), "gpt2-moe", *argv, "-o", str(path)], check=True
            )
        for cluster in CLUSTERS:
            flag = ["--cluster", cluster] if cluster != "h100" else ["--device", "h100"]
            for i, pipeline in enumerate(PASSES):
                cases.append((f"{name}.{cluster}.{i:02d}", path, ["-p", pipeline, *flag]))
    return cases


def write(out: Path) -> int:
    """Run every case and write `<case>.mlir`, `<case>.json` and `<case>.err` into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    models = out / "_models"
    models.mkdir(exist_ok=True)
    cases = _cases(models)

    def run(case: tuple[str, Path, list[str]]) -> None:
        name, path, argv = case
        report = out / f"{name}.json"
        proc = subprocess.run(
            [str(BIN / "lancet-opt"), str(path), *argv, "--report", str(report)],
            capture_output=True,
            text=True,
            cwd=out,
        )
        (out / f"{name}.mlir").write_text(proc.stdout)
        (out / f"{name}.err").write_text(f"rc={proc.returncode}\n{proc.stderr}")

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(run, cases))
    print(f"{len(cases)} cases written to {out}")
    return 0


def _digest(path: Path) -> str:
    # the reports name their input by path: the folder itself must not make two runs differ
    text = path.read_text().replace(str(path.parent.resolve()), "<dir>")
    if path.suffix == ".json":  # provenance holds tool versions and file hashes: keep the numbers
        import json

        data = json.loads(text) if text.strip() else {}
        data.pop("provenance", None)
        text = json.dumps(data, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def compare(a: Path, b: Path) -> int:
    """Print the files of `a` whose contents differ in `b`; exit 1 if any."""
    names = sorted(p.name for p in a.iterdir() if p.is_file())
    differ = [n for n in names if not (b / n).exists() or _digest(a / n) != _digest(b / n)]
    for name in differ:
        print(f"differs: {name}")
    print(f"{len(names) - len(differ)} of {len(names)} files identical")
    return 1 if differ else 0


def main() -> int:
    """Command line: `write DIR` or `compare A B`."""
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        return write(Path(sys.argv[2]).resolve())
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        return compare(Path(sys.argv[2]), Path(sys.argv[3]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
