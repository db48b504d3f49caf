"""The corpus of bad inputs (test/data/bad/cases.txt): each case exits 1 with exactly one
error line, the expected one, and writes nothing to stdout (issue #11 items 4-6, 8)."""

from __future__ import annotations

import importlib
import shlex
from pathlib import Path

import pytest

BAD = Path(__file__).resolve().parents[1] / "data" / "bad"
MODULES = {
    "lancet-opt": "lancet_mlir.tools.lancet_opt",
    "lancet-run": "lancet_mlir.tools.lancet_run",
    "lancet-model": "lancet_mlir.tools.lancet_model",
    "lancet-profile": "lancet_mlir.tools.lancet_profile",
    "lancet-trace": "lancet_mlir.tools.lancet_trace",
    "lancet-torch": "lancet_mlir.tools.lancet_torch",
}


def _cases() -> list[tuple[str, str, str]]:
    rows = []
    for line in (BAD / "cases.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, command, expected = (part.strip() for part in line.split(" | "))
        rows.append((name, command.replace("{bad}", str(BAD)), expected.replace("{bad}", str(BAD))))
    return rows


CASES = _cases()


@pytest.mark.parametrize(("command", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_named_error_line(
    command: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tool, *argv = shlex.split(command)
    main = importlib.import_module(MODULES[tool]).main
    before = sorted(p.name for p in BAD.iterdir())
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    assert info.value.code == 1
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    if expected.endswith("..."):
        assert lines[0].startswith(expected[:-3])
    else:
        assert lines[0] == expected
    assert sorted(p.name for p in BAD.iterdir()) == before  # nothing written next to the inputs


def test_corpus_files_are_all_used() -> None:
    used = " ".join(c[1] for c in CASES)
    unused = [p.name for p in BAD.iterdir() if p.name != "cases.txt" and p.name not in used]
    assert unused == []
