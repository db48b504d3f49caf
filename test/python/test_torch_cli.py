"""`lancet-torch export`: the written MLIR runs through lancet-opt; bad input is one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from helpers import BIN, REPO


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / args[0]), *args[1:]], capture_output=True, text=True, cwd=REPO, timeout=300
    )


def test_export_then_lancet_opt(tmp_path: Path) -> None:
    step = tmp_path / "step.mlir"
    res = _run(
        "lancet-torch",
        "export",
        "examples/torch/export_step.py:make_step",
        "--world-size",
        "2",
        "-o",
        str(step),
    )
    assert res.returncode == 0, res.stderr
    text = step.read_text()
    assert text.count('"comm.all_to_all"') + text.count("comm.all_to_all ") == 4
    report = tmp_path / "report.json"
    res = _run(
        "lancet-opt",
        "-p",
        "lancet-schedule{partition=none max-seconds=0.1}",
        "--cluster",
        "p3dn",
        str(step),
        "--report",
        str(report),
        "-o",
        str(tmp_path / "o.mlir"),
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads(report.read_text())
    assert summary["makespan_us"] > 0
    assert 4 < summary["num_collectives"] <= 11  # the 7 all-reduces may be fused into buckets


def test_bad_target_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "never.mlir"
    for target, message in [
        ("no_such.py:make", "no_such.py: no such file"),
        ("examples/torch/export_step.py:nope", "has no function 'nope'"),
        ("examples/torch/export_step.py", "expected SCRIPT.py:FUNC"),
    ]:
        res = _run("lancet-torch", "export", target, "--world-size", "2", "-o", str(out))
        assert res.returncode == 1
        assert res.stderr.count("\n") == 1, res.stderr
        assert message in res.stderr
        assert not out.exists()


def test_output_never_replaces_the_script(tmp_path: Path) -> None:
    script = tmp_path / "mystep.py"
    source = (REPO / "examples/torch/export_step.py").read_text()
    script.write_text(source)
    models = (REPO / "examples/torch/torch_models.py").read_text()
    (tmp_path / "torch_models.py").write_text(models)  # the script's import
    link = tmp_path / "link.py"
    link.symlink_to(script)
    for output in (script, link):  # the script itself, or a link to it
        res = _run("lancet-torch", "export", f"{script}:make_step", "--world-size", "2",
                   "-o", str(output))  # fmt: skip
        assert res.returncode == 1
        assert res.stderr == (f"lancet-torch: error: -o {output}: is also an input of this run; "
                              "refusing to replace it\n")  # fmt: skip
        assert script.read_text() == source
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.py", "mystep.py", "torch_models.py"]


def test_raising_make_step_is_named(tmp_path: Path) -> None:
    script = tmp_path / "mystep.py"
    script.write_text("def make_step():\n    raise RuntimeError('boom')\n")
    out = tmp_path / "out.mlir"
    res = _run("lancet-torch", "export", f"{script}:make_step", "--world-size", "2", "-o", str(out))
    assert res.returncode == 1
    assert res.stderr == f"lancet-torch: error: {script}:make_step raised RuntimeError: boom\n"
    assert not out.exists()


def test_a_script_that_exits_is_named(tmp_path: Path) -> None:
    # it exited with the script's code and no error line
    for body, message in (
        (
            "import sys\ndef make_step():\n    sys.exit(3)\n",
            "{script}:make_step called sys.exit(3)",
        ),
        ("import sys\nsys.exit(0)\n", "{script} called sys.exit(0) while loading"),
    ):
        script = tmp_path / "mystep.py"
        script.write_text(body)
        out = tmp_path / "out.mlir"
        res = _run("lancet-torch", "export", f"{script}:make_step", "--world-size", "2",
                   "-o", str(out))  # fmt: skip
        assert res.returncode == 1
        assert res.stderr == f"lancet-torch: error: {message.format(script=script)}\n"
        assert not out.exists()


def test_a_step_that_raises_while_captured_names_the_exception(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("import torch\ndef make_step():\n    def step(x):\n"
                      "        raise KeyError('inside step')\n    return step, [torch.randn(2)]\n"
                      "def bad_args():\n    return (lambda x: x), 5\n")  # fmt: skip
    res = _run("lancet-torch", "export", f"{script}:make_step", "--world-size", "2")
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == (f"lancet-torch: error: capturing {script}:make_step's step: it raised "
                          "KeyError: 'inside step'\n")  # fmt: skip
    res = _run("lancet-torch", "export", f"{script}:bad_args", "--world-size", "2")
    assert res.stderr == (f"lancet-torch: error: {script}:bad_args: must return (step_fn, "
                          "example_args), a tuple or list of the step's arguments\n")  # fmt: skip
    res = _run("lancet-torch", "export", f"{tmp_path}:make_step", "--world-size", "2")
    assert res.stderr == f"lancet-torch: error: {tmp_path}: is a folder, not a Python file\n"
