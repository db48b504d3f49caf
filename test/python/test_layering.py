"""The layer rule of docs/design.md: a module imports only from its own layer or those above."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "lancet_mlir"
LAYERS = [
    "support", "dialects", "graph", "runtime", "cost", "measure", "sim", "optimize", "partition",
    "importers", "exporters", "passes", "models", "tools",
]  # fmt: skip
IMPORT = re.compile(r"^\s*(?:from|import) lancet_mlir\.(\w+)")


TOP_MODULES = {"attrs": "support", "torch": "tools"}  # single-module packages and their layer


def test_no_module_imports_a_lower_layer() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    rank.update({name: rank[layer] for name, layer in TOP_MODULES.items()})
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        layer = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if layer not in rank:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            match = IMPORT.match(line)
            if match and rank.get(match.group(1), -1) > rank[layer]:
                violations.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert violations == []
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name in rank} == set(LAYERS)
    assert all((PACKAGE / f"{name}.py").is_file() for name in TOP_MODULES)
