"""Every pass option is documented twice, and both agree with the pass dataclass (issue 17,
deliverable 3): a docstring under each field, as in xDSL, and a row of the pass's option table
in docs/passes.md (every field has a row, every row names a field: no stale rows)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from lancet_mlir.passes import get_all_passes
from lancet_mlir.passes.costing import CostOptions

DOCS = Path(__file__).resolve().parents[2] / "docs" / "passes.md"
PASSES = get_all_passes()


def _option(field: str) -> str:
    """A dataclass field as the pipeline spells it (xDSL: `bucket_bytes` -> `bucket-bytes`)."""
    return field.replace("_", "-")


def pass_options(cls: type) -> list[str]:
    """The pipeline options of a pass class: its init fields except `name`."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    return [_option(f.name) for f in fields if f.init and f.name != "name"]


def documented_options(name: str, text: str | None = None) -> list[str]:
    """The options named in the first column of the option tables of `## name` in passes.md
    (a row may name several: "`device`, `cluster`, ...")."""
    text = DOCS.read_text(encoding="utf-8") if text is None else text
    match = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if match is None:
        return []
    options: list[str] = []
    in_table = False
    for line in match.group(1).splitlines():
        if line.startswith("| option |"):
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if in_table and not line.startswith("|---"):
            first = line.split("|")[1]
            options += re.findall(r"`([a-z][a-z0-9-]*)(?:=[^`]*)?`", first)  # `a-b`, `a="F"`
    return options


def undocumented_fields(cls: type) -> list[str]:
    """Fields declared in `cls` (and its CostOptions mixin) with no docstring under them."""
    missing = []
    for klass in [c for c in cls.__mro__ if c is cls or c is CostOptions]:
        body = ast.parse(inspect.getsource(klass)).body[0]
        assert isinstance(body, ast.ClassDef)
        stmts = body.body
        for i, stmt in enumerate(stmts):
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            if stmt.target.id == "name" or "ClassVar" in ast.unparse(stmt.annotation):
                continue
            nxt = stmts[i + 1] if i + 1 < len(stmts) else None
            is_doc = (
                isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            )
            if not is_doc:
                missing.append(f"{klass.__name__}.{stmt.target.id}")
    return missing


@pytest.mark.parametrize("name", sorted(PASSES))
def test_option_table_matches_the_fields(name: str) -> None:
    cls = PASSES[name]()
    fields = pass_options(cls)
    documented = documented_options(name)
    assert sorted(set(fields) - set(documented)) == [], f"{name}: options without a row"
    assert sorted(set(documented) - set(fields)) == [], f"{name}: stale rows"
    assert len(documented) == len(set(documented)), f"{name}: an option has two rows"


@pytest.mark.parametrize("name", sorted(PASSES))
def test_every_field_has_a_docstring(name: str) -> None:
    assert undocumented_fields(PASSES[name]()) == []


def test_the_table_reader() -> None:
    text = (
        "## p\n\nprose `not-an-option`\n\n| option | type | default | meaning |\n|---|---|---|---|\n"
        "| `a-b` | int | `1` | the `x` meaning |\n| `c`, `d` | | | shared |\n"
        '| `f="FILE"` | none | spelled as in a pipeline |\n\n## q\n'
        "| option | type |\n|---|---|\n| `e` | int |\n"
    )
    assert documented_options("p", text) == ["a-b", "c", "d", "f"]
    assert documented_options("q", text) == ["e"]
    assert documented_options("r", text) == []
