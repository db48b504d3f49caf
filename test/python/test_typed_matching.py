"""Library code matches ops by class and named accessors, never by op-name strings
(issue 17, deliverables 1 and 3): outside `dialects/` and the front-ends, no comparison with a `comp.`/`comm.`
op name, a kernel name or a collective kind spelled as a string (kinds are `CollectiveKind`
members), no op-name string literals, no `kernel_name(op) == ...` tests, and no role spelled
as a bare string (roles are `Role` members). Building an op by its kernel name (`build_op("concat", ...)`)
and registering an implementation (`@implements("gelu")`) name a registry entry and are fine.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import lancet_mlir
from lancet_mlir.dialects.comm import Comm
from lancet_mlir.dialects.comp import Comp
from lancet_mlir.dialects.kernels import KERNELS
from lancet_mlir.dialects.vocab import Role

PACKAGE = Path(lancet_mlir.__file__).parent
EXEMPT = ("dialects", "importers", "exporters")
"""Top-level packages allowed to spell these names: the dialects define them; the front-ends
read foreign names (aten ops, HLO kinds, nccl kernels) that can coincide with ours."""


def _patterns() -> list[re.Pattern[str]]:
    op_names = {op.name for op in (*Comp.operations, *Comm.operations)}
    words = op_names | set(KERNELS) | {name.split(".", 1)[1] for name in op_names}
    alternatives = "|".join(sorted((re.escape(w) for w in words), key=len, reverse=True))
    literal = rf"[\"'](?:{alternatives})[\"']"
    return [
        re.compile(rf"(==|!=)\s*{literal}"),
        re.compile(rf"{literal}\s*(==|!=)"),
        re.compile(rf"\bin\s*[\(\[\{{]\s*{literal}"),  # x in ("moe_gate", ...)
        re.compile(r"\.name\s*(==|!=)\s*[\"'][a-z_]+\.[a-z_.]+[\"']"),  # op.name == "x.y"
        re.compile(r"kernel_name\([^)]*\)\s*(==|!=|in\b|not in\b)"),
        re.compile(r"[\"'](comp|comm)\.[a-z_]+[\"']"),  # a bare op-name literal
    ]


def offending_lines(root: Path = PACKAGE) -> list[str]:
    """`path:line: text` of every line of library code that matches an op by a string."""
    patterns = _patterns()
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in EXEMPT:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(p.search(line) for p in patterns):
                found.append(f"{rel}:{n}: {line.strip()}")
    return found


def test_no_op_name_string_matching_outside_dialects() -> None:
    assert offending_lines() == []


ROLE_LITERALS = {f'"{r}"' for r in Role} | {f"'{r}'" for r in Role}
HEURISTIC_DW = {"passes/lancet_schedule.py", "optimize/search.py", "optimize/pipeline.py"}
"""Files where "dw" names lancet-schedule's dW heuristic (an option value), not a role."""


def bare_role_strings(root: Path = PACKAGE) -> list[str]:
    """`path:line: token` of every string token that is exactly a role (`"dx"`) in library
    code outside `dialects/`: roles are `Role` members (docstrings are longer tokens)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in EXEMPT:
            continue
        source = path.read_text(encoding="utf-8")
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type != tokenize.STRING or tok.string not in ROLE_LITERALS:
                continue
            if rel.as_posix() in HEURISTIC_DW and tok.string.strip("'\"") == "dw":
                continue
            found.append(f"{rel}:{tok.start[0]}: {tok.string}")
    return found


def test_roles_are_role_members_outside_dialects() -> None:
    assert bare_role_strings() == []


def test_the_check_catches_each_form(tmp_path: Path) -> None:
    """Each pattern fires on the form it is for, and leaves building and registering alone."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "bad.py").write_text(
        'a = kernel_name(op) == "moe_gate"\n'
        'b = _only_reader(graph, v, "moe_dispatch", 1) if k == "moe_dispatch" else None\n'
        'c = op.name == "builtin.unregistered"\n'
        'd = name in ("comp.matmul", "stablehlo.dot")\n'
        'e = kind != "allreduce"\n'
        'f = "moe_combine" == kernel\n'
    )
    (pkg / "good.py").write_text(
        'x = build_op("concat", parts, {"axis": 0})\n'
        '@implements("gelu")\n'
        "y = isinstance(op, MoeGateOp)\n"
        'z = f.name != "name"\n'
    )
    found = offending_lines(pkg)
    assert [line.split(":")[:2] for line in found] == [["bad.py", str(n)] for n in range(1, 7)]
    (pkg / "roles.py").write_text('"""A docstring about "dw"."""\nr = op_role(op) == "dw"\n')
    assert bare_role_strings(pkg) == ['roles.py:2: "dw"']
