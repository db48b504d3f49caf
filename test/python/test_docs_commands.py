"""The command blocks of README.md and docs/*.md run as written, in order (issue #12 item 1).

Every ```sh block of a file runs, top to bottom, in one scratch folder per file (with `.venv`,
`test/`, `examples/` and `bench/` linked from the repository and empty `build/`,
`docs/img/`), under `bash -e -o pipefail`, so a command that fails fails the test. HTML
comments right above a block adjust it for the test, and say so to the reader:

* `<!-- docs-test: skip: REASON -->`: the block is not run (e.g. `make test` itself);
* `<!-- docs-test: replace 'OLD' 'NEW' -->`: run with OLD replaced by NEW (smaller sizes).

Blocks in other languages (```mlir, ```python, plain ``` synopses) are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import BIN, REPO

_SKIP = re.compile(r"^<!-- docs-test: skip: (.+) -->$")
_REPLACE = re.compile(r"^<!-- docs-test: replace '(.+)' '(.*)' -->$")
DOC_FILES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
LINKED = ("test", "examples", "bench", "lancet_mlir")


@dataclass
class Block:
    """One ```sh block: its first line number, text, and the docs-test directives above it."""

    line: int
    text: str
    skip: str | None = None
    replace: list[tuple[str, str]] = field(default_factory=list)

    def runnable(self) -> str:
        """The text with the replacements applied."""
        text = self.text
        for old, new in self.replace:
            assert old in text, f"docs-test replace: {old!r} not in the block at line {self.line}"
            text = text.replace(old, new)
        return text


def sh_blocks(text: str) -> list[Block]:
    """The ```sh blocks of a markdown text with their directives."""
    blocks: list[Block] = []
    lines = text.splitlines()
    k = 0
    while k < len(lines):
        if lines[k].strip() != "```sh":
            k += 1
            continue
        block = Block(k + 1, "")
        j = k - 1
        while j >= 0 and lines[j].startswith("<!-- docs-test:"):
            if m := _SKIP.match(lines[j]):
                block.skip = m.group(1)
            elif m := _REPLACE.match(lines[j]):
                block.replace.insert(0, (m.group(1), m.group(2)))
            else:
                raise AssertionError(f"line {j + 1}: malformed docs-test directive: {lines[j]}")
            j -= 1
        end = lines.index("```", k + 1)
        block.text = "\n".join(lines[k + 1:end]) + "\n"
        blocks.append(block)
        k = end + 1
    return blocks


def test_directives_are_parsed() -> None:
    text = ("x\n<!-- docs-test: replace 'a 1' 'a 2' -->\n<!-- docs-test: replace 'b' 'c' -->\n"
            "```sh\necho a 1 b\n```\n<!-- docs-test: skip: too slow -->\n```sh\nmake test\n```\n"
            "```mlir\nnot run\n```\n")  # fmt: skip
    first, second = sh_blocks(text)
    assert first.runnable() == "echo a 2 c\n"
    assert first.skip is None
    assert second.skip == "too slow"
    assert second.line == 8


def _scratch(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / "build").mkdir(parents=True)
    (work / "docs" / "img").mkdir(parents=True)
    (work / ".venv").symlink_to(BIN.parent)
    for name in LINKED:
        (work / name).symlink_to(REPO / name)
    return work


@pytest.mark.parametrize("doc", [d for d in DOC_FILES if "```sh" in (REPO / d).read_text()])
def test_doc_commands_run_as_written(doc: str, tmp_path: Path) -> None:
    work = _scratch(tmp_path)
    env = dict(os.environ, PYTHONHASHSEED="0", COLUMNS="120")
    for block in sh_blocks((REPO / doc).read_text()):
        if block.skip is not None:
            continue
        res = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.runnable()],
                             cwd=work, env=env, capture_output=True, text=True,
                             timeout=600, check=False)  # fmt: skip
        assert res.returncode == 0, (
            f"{doc}:{block.line}: block failed (exit {res.returncode})\n{block.runnable()}\n"
            f"stderr: {res.stderr[-2000:]}"
        )
