"""The command and code blocks of README.md and docs/*.md run as written, in order (issue #12
item 1, issue 20 item 4).

Every ```sh and ```python block of a file runs, top to bottom, in one scratch folder per file
(with `.venv`, `test/`, `examples/` and `bench/` linked from the repository and empty
`build/`, `docs/img/`): sh blocks under `bash -e -o pipefail`, python blocks with the venv's
Python, so a command or program that fails fails the test. HTML comments right above a
block adjust it for the test, and say so to the reader:

* `<!-- docs-test: skip: REASON -->`: the block is not run (e.g. `make test` itself);
* `<!-- docs-test: replace 'OLD' 'NEW' -->`: run with OLD replaced by NEW (smaller sizes);
* `<!-- docs-test: before 'COMMAND' -->`: run the shell COMMAND first (e.g. copy the input
  file the text names from test/data/docs/);
* `<!-- docs-test: prints 'TEXT' -->`: the block's standard output must contain TEXT;
* `<!-- docs-test: full-size skip: REASON -->`: not run at the documented size (below);
* `<!-- docs-test: full-size limits 'SECONDS' 'MB' -->`: the documented-size run's limits.

`test_doc_commands_at_documented_size` (marked slow: `make test-full`, not `make test` nor CI)
runs every block as written, without the replacements, under `/usr/bin/time` and checks its
wall time and peak memory against its limits (default `FULL_SIZE_LIMITS`).

Blocks in other languages (```mlir, ```console, plain ``` synopses) are not run.
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
_BEFORE = re.compile(r"^<!-- docs-test: before '(.+)' -->$")
_PRINTS = re.compile(r"^<!-- docs-test: prints '(.+)' -->$")
_FULL_SKIP = re.compile(r"^<!-- docs-test: full-size skip: (.+) -->$")
_FULL_LIMITS = re.compile(r"^<!-- docs-test: full-size limits '([0-9.]+)' '([0-9.]+)' -->$")
FULL_SIZE_LIMITS = (900.0, 4096.0)
"""Default (wall seconds, peak MB) of one block run at its documented size."""
LANGUAGES = ("sh", "python")
DOC_FILES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
LINKED = ("test", "examples", "bench", "lancet_mlir")


@dataclass
class Block:
    """One ```sh or ```python block: its first line number, text, and the docs-test
    directives above it."""

    line: int
    text: str
    skip: str | None = None
    replace: list[tuple[str, str]] = field(default_factory=list)
    lang: str = "sh"
    before: list[str] = field(default_factory=list)
    prints: list[str] = field(default_factory=list)
    full_skip: str | None = None
    limits: tuple[float, float] = FULL_SIZE_LIMITS

    def runnable(self) -> str:
        """The text with the replacements applied."""
        text = self.text
        for old, new in self.replace:
            assert old in text, f"docs-test replace: {old!r} not in the block at line {self.line}"
            text = text.replace(old, new)
        return text


def doc_blocks(text: str) -> list[Block]:
    """The ```sh and ```python blocks of a markdown text with their directives."""
    blocks: list[Block] = []
    lines = text.splitlines()
    k = 0
    while k < len(lines):
        fence = lines[k].strip()
        if not (fence.startswith("```") and fence[3:] in LANGUAGES):
            k += 1
            continue
        block = Block(k + 1, "", lang=fence[3:])
        j = k - 1
        while j >= 0 and lines[j].startswith("<!-- docs-test:"):
            if m := _SKIP.match(lines[j]):
                block.skip = m.group(1)
            elif m := _REPLACE.match(lines[j]):
                block.replace.insert(0, (m.group(1), m.group(2)))
            elif m := _BEFORE.match(lines[j]):
                block.before.insert(0, m.group(1))
            elif m := _PRINTS.match(lines[j]):
                block.prints.insert(0, m.group(1))
            elif m := _FULL_SKIP.match(lines[j]):
                block.full_skip = m.group(1)
            elif m := _FULL_LIMITS.match(lines[j]):
                block.limits = (float(m.group(1)), float(m.group(2)))
            else:
                raise AssertionError(f"line {j + 1}: malformed docs-test directive: {lines[j]}")
            j -= 1
        end = lines.index("```", k + 1)
        block.text = "\n".join(lines[k + 1 : end]) + "\n"
        blocks.append(block)
        k = end + 1
    return blocks


def sh_blocks(text: str) -> list[Block]:
    """The ```sh blocks of a markdown text with their directives."""
    return [b for b in doc_blocks(text) if b.lang == "sh"]


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


def test_python_blocks_and_their_directives_are_parsed() -> None:
    text = ("<!-- docs-test: before 'cp a b' -->\n<!-- docs-test: prints '@step 17.0' -->\n"
            "```python\nprint(1)\n```\n```console\nnot run\n```\n")  # fmt: skip
    (block,) = doc_blocks(text)
    assert block.lang == "python"
    assert block.before == ["cp a b"]
    assert block.prints == ["@step 17.0"]


def _has_blocks(doc: str) -> bool:
    return any(b.skip is None for b in doc_blocks((REPO / doc).read_text()))


@pytest.mark.parametrize("doc", [d for d in DOC_FILES if _has_blocks(d)])
def test_doc_commands_run_as_written(doc: str, tmp_path: Path) -> None:
    work = _scratch(tmp_path)
    env = dict(os.environ, PYTHONHASHSEED="0", COLUMNS="120")
    for block in doc_blocks((REPO / doc).read_text()):
        if block.skip is not None:
            continue
        run_block(block, work, env, doc)


def run_block(
    block: Block, work: Path, env: dict[str, str], doc: str, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run one block in `work` (its `before` commands first); assert it succeeded and printed
    what its `prints` directives say."""
    for command in block.before:
        subprocess.run(["bash", "-e", "-c", command], cwd=work, env=env, check=True)
    if block.lang == "python":
        argv = [str(BIN / "python"), "-c", block.runnable()]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", block.runnable()]
    res = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True,
                         timeout=timeout, check=False)  # fmt: skip
    assert res.returncode == 0, (
        f"{doc}:{block.line}: block failed (exit {res.returncode})\n{block.runnable()}\n"
        f"stderr: {res.stderr[-2000:]}"
    )
    for text in block.prints:
        assert text in res.stdout, f"{doc}:{block.line}: expected {text!r} in\n{res.stdout[-2000:]}"
    return res


def test_the_docs_step_file_is_the_one_passes_md_shows() -> None:
    text = (REPO / "docs" / "passes.md").read_text()
    start = text.index("```mlir\n", text.index("**Example** (`step.mlir`")) + len("```mlir\n")
    shown = text[start : text.index("```", start)]
    assert (REPO / "test" / "data" / "docs" / "step.mlir").read_text() == shown


@pytest.mark.slow
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("doc", [d for d in DOC_FILES if _has_blocks(d)])
def test_doc_commands_at_documented_size(doc: str, tmp_path: Path) -> None:
    """Every block as written (no replacements), each under /usr/bin/time within its limits."""
    work = _scratch(tmp_path)
    env = dict(os.environ, PYTHONHASHSEED="0", COLUMNS="120")
    for block in doc_blocks((REPO / doc).read_text()):
        if block.skip is not None or block.full_skip is not None:
            continue
        for command in block.before:
            subprocess.run(["bash", "-e", "-c", command], cwd=work, env=env, check=True)
        script = work / f"block_{block.line}.{'py' if block.lang == 'python' else 'sh'}"
        script.write_text(block.text)
        runner = (
            [str(BIN / "python")] if block.lang == "python" else ["bash", "-e", "-o", "pipefail"]
        )
        timing = work / f"block_{block.line}.time"
        wall_limit, mb_limit = block.limits
        res = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", str(timing), *runner, str(script)],
                             cwd=work, env=env, capture_output=True, text=True,
                             timeout=wall_limit * 2 + 60, check=False)  # fmt: skip
        assert res.returncode == 0, f"{doc}:{block.line}: failed at full size\n{res.stderr[-2000:]}"
        wall, kb = timing.read_text().split()[-2:]
        assert float(wall) <= wall_limit, f"{doc}:{block.line}: {wall} s > {wall_limit} s"
        assert float(kb) / 1024 <= mb_limit, (
            f"{doc}:{block.line}: {float(kb) / 1024:.0f} MB > {mb_limit} MB"
        )
