"""All-or-nothing outputs, `-` for stdin/stdout, outputs that would replace an input, and
`--time-passes` on stderr (issue #11 items 1, 6 and 8; issue #12 items 2 and 3).

The tools run in-process (their `main` with an argv list) where possible: quicker than a
subprocess and the same code path; run_cli ends every run with SystemExit.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from helpers import parse

from lancet_mlir.support.errors import UserError
from lancet_mlir.support.files import (
    STALE_AFTER_S,
    OutputSet,
    atomic_path,
    sweep_stale_temps,
    write_atomic,
)

GOOD = """func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %r = comm.allreduce %x : (tensor<8xf32>) -> tensor<8xf32>
  func.return %r : tensor<8xf32>
}
"""
BAD_CHUNK = '%y = "test.op"(%z) : (tensor<8xf32>) -> tensor<8xf32>\n'  # %z is never defined


def run_main(
    main: Callable[[Sequence[str]], None],
    argv: Sequence[str],
    capsys: pytest.CaptureFixture[str],
    stdin: bytes | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of a tool's main run in-process."""
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def opt_main(argv: Sequence[str]) -> None:
    from lancet_mlir.tools.lancet_opt import main

    main(argv)


# ---- OutputSet ---------------------------------------------------------------------------------


def test_outputs_of_a_failed_run_leave_every_old_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    b.write_text("old b")

    def run() -> None:
        with OutputSet():
            write_atomic(a, "new a")
            write_atomic(b, "new b")
            assert a.read_text() == "old a"  # staged, not yet renamed
            raise RuntimeError("a later step fails")

    with pytest.raises(RuntimeError):
        run()
    assert (a.read_text(), b.read_text()) == ("old a", "old b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]  # no temp left


def test_ctrl_c_discards_staged_outputs(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"

    def run() -> None:
        with OutputSet():
            write_atomic(a, "new")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run()
    assert list(tmp_path.iterdir()) == []


def test_commit_renames_the_primary_output_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renamed: list[str] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        renamed.append(os.path.basename(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    with OutputSet():
        write_atomic(tmp_path / "out.mlir", "module", primary=True)
        write_atomic(tmp_path / "report.json", "{}")
        write_atomic(tmp_path / "trace.json", "{}")
        write_atomic(tmp_path / "report.json", '{"again": 1}')  # rewritten: the last one wins
    assert renamed == ["trace.json", "report.json", "out.mlir"]
    assert (tmp_path / "report.json").read_text() == '{"again": 1}'


def test_write_errors_name_the_requested_path_not_the_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    with pytest.raises(UserError) as info, atomic_path(target) as tmp:
        raise PermissionError(13, "Permission denied", tmp)
    assert str(info.value) == f"{target}: Permission denied"
    assert list(tmp_path.iterdir()) == []


def test_an_output_may_not_be_an_input(tmp_path: Path) -> None:
    src = tmp_path / "m.mlir"
    src.write_text(GOOD)
    link = tmp_path / "link.mlir"
    link.symlink_to(src)
    with pytest.raises(UserError, match="is also an input of this run"), OutputSet([str(src)]):
        write_atomic(link, "x")
    assert src.read_text() == GOOD


# ---- lancet-opt ------------------------------------------------------------------------------


def test_split_input_file_failure_in_a_later_chunk_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "m.mlir"
    src.write_text(GOOD + "// -----\n" + BAD_CHUNK)
    outs = {name: tmp_path / name for name in ("o.mlir", "r.json", "t.json")}
    for path in outs.values():
        path.write_text("old\n")
    code, out, err = run_main(opt_main, [
        str(src), "--split-input-file", "-o", str(outs["o.mlir"]),
        "--report", str(outs["r.json"]), "--timeline", str(outs["t.json"]),
    ], capsys)  # fmt: skip
    assert code == 1
    assert "uses a result of 'test.op' (%z) before its definition" not in out
    assert "%z" in err
    assert err.count("\n") == 1
    assert {name: p.read_text() for name, p in outs.items()} == dict.fromkeys(outs, "old\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.mlir", *sorted(outs)]


def test_stdin_in_and_stdout_out_round_trip(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run_main(
        opt_main,
        ["-", "-o", "-", "-p", "lancet-schedule"],
        capsys,
        stdin=GOOD.encode(),
        monkeypatch=monkeypatch,
    )
    assert (code, err) == (0, "")
    module = parse(out)  # the printed IR parses back
    assert [op.name for op in module.walk()][-2:] == ["comm.allreduce", "func.return"]


def test_report_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "m.mlir"
    src.write_text(GOOD)
    code, out, err = run_main(
        opt_main,
        [str(src), "--world-size", "2", "--report", "-", "-o", str(tmp_path / "o.mlir")],
        capsys,
    )
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["num_collectives"] == 1
    assert report["input"] == str(src)
    assert parse((tmp_path / "o.mlir").read_text()) is not None


def test_two_outputs_on_stdout_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "m.mlir"
    src.write_text(GOOD)
    code, out, err = run_main(opt_main, [str(src), "--report", "-"], capsys)
    assert (code, out) == (1, "")
    assert err == ("lancet-opt: error: --report -: standard output already carries the IR "
                   "(-o, default stdout); only one output can go there (e.g. add -o FILE or "
                   "-o /dev/null)\n")  # fmt: skip


def test_output_equal_to_input_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "m.mlir"
    src.write_text(GOOD)
    for flag in ("-o", "--report", "--timeline"):
        code, out, err = run_main(opt_main, [str(src), flag, str(src)], capsys)
        assert code == 1
        assert err == (f"lancet-opt: error: {flag} {src}: is also an input of this run; "
                       "refusing to replace it\n")  # fmt: skip
    assert src.read_text() == GOOD


def _each_refused_as_an_input(
    src: Path, cases: Sequence[tuple[list[str], str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each case (argv, what) fails before any work: `what` would replace an input."""
    for argv, what in cases:
        code, out, err = run_main(opt_main, [str(src), *argv], capsys)
        assert (code, out) == (1, ""), argv
        assert (
            err
            == f"lancet-opt: error: {what}: is also an input of this run; refusing to replace it\n"
        )


def test_an_output_never_replaces_a_table_or_profile_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the check ran against the input module only: `--report ct.csv` replaced the table
    src, table, prof = tmp_path / "m.mlir", tmp_path / "ct.csv", tmp_path / "prof.json"
    src.write_text(GOOD)
    table.write_text("kind,bytes,us\n")
    prof.write_text("{}")
    cases = [
        (["--comm-table", str(table), "--report", str(table)], f"--report {table}"),
        (["--comm-table", str(table), "-o", str(table)], f"-o {table}"),
        (["--profile", str(prof), "--timeline", str(tmp_path / "." / "prof.json")],
         f"--timeline {tmp_path / '.' / 'prof.json'}"),
        (["-o", os.devnull, "-p", f'simulate{{comm-table="{table}" report="{table}"}}'],
         f"simulate{{report=}} (pass 1) {table}"),
        (["-p", f'simulate{{profile="{prof}"}}', "-o", str(prof)], f"-o {prof}"),
    ]  # fmt: skip
    _each_refused_as_an_input(src, cases, capsys)
    assert (table.read_text(), prof.read_text()) == ("kind,bytes,us\n", "{}")
    missing = tmp_path / "nodir" / "r.json"
    code, _, err = run_main(opt_main, [str(src), "-o", os.devnull, "-p",
                                       f'simulate{{report="{missing}"}}'], capsys)  # fmt: skip
    assert (code, err) == (1, f"lancet-opt: error: simulate{{report=}} (pass 1) {missing}: "
                              "folder does not exist\n")  # fmt: skip


def test_an_output_never_replaces_a_file_the_modules_own_attributes_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the module's `lancet.profile` / `lancet.comm_table` were read by the passes and then
    # replaced by `-o` or `--report`: only flags and pass options were checked
    monkeypatch.chdir(tmp_path)
    prof, table = tmp_path / "prof.json", tmp_path / "ct.csv"
    prof.write_text("{}")
    table.write_text("kind,bytes,us\n")
    src = tmp_path / "m.mlir"
    src.write_text('module attributes {lancet.profile = "prof.json", '
                   'lancet.comm_table = ["x.csv", "ct.csv"]} {\n' + GOOD + "}\n")  # fmt: skip
    cases = [
        (["-o", str(prof)], f"-o {prof}"),
        (["-o", os.devnull, "--report", "ct.csv"], "--report ct.csv"),
        (["-o", os.devnull, "-p", f'simulate{{timeline="{tmp_path / "." / "ct.csv"}"}}'],
         f"simulate{{timeline=}} (pass 1) {tmp_path / '.' / 'ct.csv'}"),
    ]  # fmt: skip
    _each_refused_as_an_input(src, cases, capsys)
    assert (prof.read_text(), table.read_text()) == ("{}", "kind,bytes,us\n")


def test_only_stale_staged_outputs_of_dead_processes_of_this_host_and_user_are_swept(
    tmp_path: Path,
) -> None:
    host = "".join(c if c.isalnum() or c in ".-_" else "_" for c in os.uname().nodename)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    names = {
        "dead": f".lancet-{dead}@{host}-abc.tmp",
        "dead_stdout": f".lancet-stdout-{dead}@{host}-abc.tmp",
        "mine": f".lancet-{os.getpid()}@{host}-abc.tmp",
        "parent": f".lancet-{os.getppid()}@{host}-abc.tmp",  # alive
        "other_host": f".lancet-{dead}@{host}x-abc.tmp",
        "host_with_our_prefix": f".lancet-{dead}@{host}-2-abc.tmp",  # host `vm` vs `vm-2`
        "young": f".lancet-{dead}@{host}-young.tmp",
        "old_format": ".lancet-abc.tmp",
        "not_ours": f"lancet-{dead}@{host}-abc.tmp",
        "no_suffix": f".lancet-{dead}@{host}-abc",
    }
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # ended, not reaped yet
    while (
        Path(f"/proc/{zombie.pid}").exists()
        and b") Z" not in Path(f"/proc/{zombie.pid}/stat").read_bytes()
    ):
        time.sleep(0.01)
    names["zombie"] = f".lancet-{zombie.pid}@{host}-abc.tmp"
    now = 2_000_000_000.0
    for key, name in names.items():
        (tmp_path / name).write_text("x")
        age = 0.0 if key == "young" else STALE_AFTER_S
        os.utime(tmp_path / name, (now - age, now - age))
    os.symlink(tmp_path / names["mine"], tmp_path / f".lancet-{dead}@{host}-link.tmp")
    removed = sweep_stale_temps(str(tmp_path), now=now)
    zombie.wait()
    assert removed == sorted([names["dead"], names["dead_stdout"], names["zombie"]])
    left = {p.name for p in tmp_path.iterdir()}
    assert left == (set(names.values()) - set(removed)) | {f".lancet-{dead}@{host}-link.tmp"}
    assert sweep_stale_temps(str(tmp_path / "missing"), now=now) == []


def test_time_passes_goes_to_stderr_and_covers_every_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "m.mlir"
    src.write_text(GOOD)
    code, out, err = run_main(opt_main, [str(src), "--time-passes", "-p",
                                         "program-order,lancet-schedule", "--report",
                                         str(tmp_path / "r.json")], capsys)  # fmt: skip
    assert code == 0
    parse(out)  # stdout holds only the IR
    names = [line.split(")", 1)[1].strip() for line in err.splitlines() if "%)" in line]
    assert names == ["parse", "verify", "program-order", "lancet-schedule",
                     "schedule outputs (--timeline, --report, --gantt)", "print", "write",
                     "Total"]  # fmt: skip
    total = float(err.split("Total Execution Time:")[1].split()[0])
    assert total > 0


# ---- the other tools ---------------------------------------------------------------------------


def test_lancet_run_save_to_stdout_and_input_protection(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    from lancet_mlir.tools.lancet_run import main

    src = tmp_path / "m.mlir"
    src.write_text(GOOD)
    with pytest.raises(SystemExit) as info:
        main([str(src), "--ranks", "2", "--save", "-"])
    out, _ = capsysbinary.readouterr()
    assert info.value.code == 0
    with np.load(io.BytesIO(out)) as saved:
        assert sorted(saved.files) == ["rank0/0", "rank1/0"]
        np.testing.assert_array_equal(saved["rank0/0"], saved["rank1/0"])  # an allreduce
    with pytest.raises(SystemExit) as info:
        main([str(src), "--save", str(src)])
    _, err = capsysbinary.readouterr()
    assert info.value.code == 1
    assert err.decode() == (f"lancet-run: error: --save {src}: is also an input of this run; "
                            "refusing to replace it\n")  # fmt: skip
    assert src.read_text() == GOOD


def test_lancet_run_reads_its_inputs_from_stdin_with_dash(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the user guide said every input of lancet-run may be `-`; --inputs - read a file "-"
    from lancet_mlir.tools.lancet_run import main

    src, saved = tmp_path / "m.mlir", tmp_path / "out.npz"
    src.write_text(GOOD)
    x = [np.arange(8, dtype=np.float32), np.full(8, 0.5, np.float32)]
    given = io.BytesIO()
    np.savez(given, **{"rank0/0": x[0], "rank1/0": x[1]})
    stdin = io.TextIOWrapper(io.BytesIO(given.getvalue()))
    monkeypatch.setattr(sys, "stdin", stdin)
    with pytest.raises(SystemExit) as info:
        main([str(src), "--ranks", "2", "--inputs", "-", "--save", str(saved)])
    assert info.value.code == 0
    with np.load(saved) as out:
        for rank in (0, 1):
            np.testing.assert_array_equal(out[f"rank{rank}/0"], x[0] + x[1])  # the allreduce
    with pytest.raises(SystemExit) as info:
        main(["-", "--inputs", "-"])
    _, err = capsysbinary.readouterr()
    assert (info.value.code, err.decode()) == (
        1, "lancet-run: error: --inputs -: stdin ('-') already holds the module; pass one as a "
           "file\n")  # fmt: skip


def test_lancet_model_and_profile_write_stdout_with_dash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lancet_mlir.cost.profile_db import ProfileDB, ProfileEntry
    from lancet_mlir.tools.lancet_model import main as model_main
    from lancet_mlir.tools.lancet_profile import main as profile_main

    argv = ["gpt2-moe", "--layers", "1", "--hidden", "8", "--heads", "2", "--seq", "4",
            "--batch", "1", "--world-size", "2", "--vocab", "16"]  # fmt: skip
    code, text, _ = run_main(model_main, [*argv, "-o", "-"], capsys)
    assert code == 0
    _, default_text, _ = run_main(model_main, argv, capsys)
    assert text == default_text
    assert "func.func" in text
    prof = tmp_path / "p.json"
    ProfileDB({"comp.add:f32[8]": ProfileEntry(2.0, 1, 0.0, 2.0, 2.0)}).save(prof)
    code, out, err = run_main(profile_main, ["merge", str(prof), "-o", "-"], capsys)
    assert code == 0, err
    assert json.loads(out)["entries"]["comp.add:f32[8]"]["mean_us"] == 2.0
    code, _, err = run_main(profile_main, ["merge", str(prof), "-o", str(prof)], capsys)
    assert code == 1
    assert (
        err
        == f"lancet-profile: error: -o {prof}: is also an input of this run; refusing to replace it\n"
    )


# ---- Ctrl-C while a tool starts ----------------------------------------------------------------


@pytest.mark.parametrize("tool", ["lancet_opt", "lancet_model"])
def test_ctrl_c_during_start_up_is_one_line(tool: str) -> None:
    """SIGINT 50 ms into the console entry point, while it imports xDSL (on a fast machine:
    while it waits for stdin or builds the default model): one line, exit code 130.

    The signal comes from a timer inside the process, so it surely lands after Python's own
    start-up (site imports), which no program can guard, and before the tool is ready."""
    import subprocess

    extra = ', "gpt2-moe"' if tool == "lancet_model" else ""
    code = (
        "import os, signal, sys, threading\n"
        f"sys.argv = ['{tool.replace('_', '-')}'{extra}]\n"
        "threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
        f"from lancet_mlir.tools.launch import {tool}\n"
        f"{tool}()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], input="", capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    name = tool.replace("_", "-")
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", f"{name}: error: interrupted\n")


def _run_python(code: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `python -c code` with an empty stdin."""
    import subprocess

    proc = subprocess.run([sys.executable, "-c", code], input="", capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def test_interrupt_turned_into_another_error_by_the_import_is_still_one_line() -> None:
    """Code run by the tool's import may catch the KeyboardInterrupt and raise another
    error; the launcher remembers the signal itself, so the user still gets the one line."""

    code = (
        "import os, signal, sys, time\n"
        "class Converting:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'slow_tool':\n"
        "            try:\n"
        "                os.kill(os.getpid(), signal.SIGINT)\n"
        "                time.sleep(5)\n"
        "            except KeyboardInterrupt:\n"
        "                raise RuntimeError('import failed') from None\n"
        "        return None\n"
        "sys.meta_path.insert(0, Converting())\n"
        "from lancet_mlir.tools.launch import _launch\n"
        "_launch('lancet-opt', 'slow_tool')\n"
    )
    assert _run_python(code) == (130, "", "lancet-opt: error: interrupted\n")


def test_interrupt_after_a_broken_import_is_still_one_line() -> None:
    """A Ctrl-C can cut an import of xDSL short and leave it half initialised, so importing
    xDSL again fails with an unrelated error (seen once in CI: a traceback about 'Dialect').
    The launcher's interrupt handler must not import it: here every xDSL import fails."""

    code = (
        "import sys\n"
        "class Broken:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'xdsl' or name.startswith('xdsl.'):\n"
        "            raise ImportError(f'cannot import name Dialect ({name} half initialised)')\n"
        "        return None\n"
        "sys.meta_path.insert(0, Broken())\n"
        "from lancet_mlir.tools.launch import _interrupted\n"
        "_interrupted('lancet-opt')\n"
    )
    assert _run_python(code) == (130, "", "lancet-opt: error: interrupted\n")


@pytest.mark.serial
def test_absurd_simulated_rank_count_fails_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    from lancet_mlir.runtime.limits import MAX_SIMULATED_RANKS
    from lancet_mlir.tools.lancet_run import main

    code, out, err = run_main(main, ["-", "--ranks", "100000000"], capsys)
    assert (code, out) == (1, "")
    assert err == (f"lancet-run: error: --ranks: at most {MAX_SIMULATED_RANKS} ranks can be "
                   "simulated in one process, got 100000000 (each runs every op in turn); run "
                   "more under mpiexec\n")  # fmt: skip


# ---- standard output by identity, links, SIGTERM (an outside review's findings) ----------------


def _opt(argv: Sequence[str], stdout: object, cwd: Path) -> tuple[int, str]:
    """(exit code, stderr) of a `lancet-opt` process whose stdout is `stdout` (a file or
    subprocess.PIPE): what fd 1 is matters here, so not in-process."""
    import subprocess

    code = "from lancet_mlir.tools.launch import lancet_opt; lancet_opt()"
    proc = subprocess.run([sys.executable, "-c", code, *argv], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=120)  # fmt: skip
    return proc.returncode, proc.stderr


def test_an_output_that_is_standard_output_under_another_name_is_stdout(tmp_path: Path) -> None:
    import subprocess

    (tmp_path / "m.mlir").write_text(GOOD)
    clash = ("standard output already carries the IR (-o, default stdout); only one output "
             "can go there (e.g. add -o FILE or -o /dev/null)\n")  # fmt: skip
    # the file the shell redirected stdout to: the report's rename replaced the IR
    with open(tmp_path / "r.json", "w") as out:
        assert _opt(["m.mlir", "--report", "r.json"], out, tmp_path) == (
            1, f"lancet-opt: error: --report r.json: {clash}")  # fmt: skip
    (tmp_path / "so").symlink_to("/dev/stdout")
    for alias in ("/dev//stdout", "so"):
        assert _opt(["m.mlir", "--report", alias], subprocess.PIPE, tmp_path) == (
            1, f"lancet-opt: error: --report {alias}: {clash}")  # fmt: skip
    # `>> log`: the report goes through the stream, appended, not over the file
    log = tmp_path / "log.txt"
    log.write_text("old\n")
    with open(log, "a") as out:
        assert _opt(["m.mlir", "-o", os.devnull, "--report", "/dev/stdout"], out, tmp_path) == (
            0, "")  # fmt: skip
    text = log.read_text()
    assert text.startswith("old\n{")
    assert json.loads(text[4:])["makespan_us"] > 0


def test_an_output_through_a_link_is_all_or_nothing_and_keeps_the_link(tmp_path: Path) -> None:
    import subprocess

    (tmp_path / "m.mlir").write_text(GOOD)
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    real.write_text("old")
    link.symlink_to("real.json")
    # the report was written through the link at once, before a later failure
    code, err = _opt(["m.mlir", "--report", "link.json", "-o", "out.s", "-t", "riscv-asm"],
                     subprocess.PIPE, tmp_path)  # fmt: skip
    assert (code, err) == (1, "lancet-opt: error: -t riscv-asm: the riscv-asm target cannot "
                              "print this module (AssertionError in xDSL's printer: it prints "
                              "IR lowered to that target only)\n")  # fmt: skip
    assert real.read_text() == "old"
    assert not (tmp_path / "out.s").exists()
    assert _opt(["m.mlir", "--report", "link.json", "-o", os.devnull], subprocess.PIPE,
                tmp_path) == (0, "")  # fmt: skip
    assert link.is_symlink()
    assert json.loads(real.read_text())["makespan_us"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "m.mlir", "real.json"]


def test_empty_and_folder_like_output_paths_are_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "m.mlir"
    src.write_text(GOOD)
    cases = [
        (["--report", ""], "--report: empty path"),
        (["-o", ""], "-o: empty path"),
        (["-o", os.devnull, "-p", 'simulate{report=""}'], "simulate{report=} (pass 1): empty path"),
        (["--timeline", f"{tmp_path}/x/"], f"--timeline {tmp_path}/x/: names a folder, not a file"),
    ]
    for argv, line in cases:
        code, out, err = run_main(opt_main, [str(src), *argv], capsys)
        assert (code, out, err) == (1, "", f"lancet-opt: error: {line}\n"), argv


def test_sigterm_removes_the_staged_outputs_and_is_one_line(tmp_path: Path) -> None:
    # SIGTERM's default action ended the process and left `.lancet-*.tmp` files behind
    code = (
        "import os, signal, sys, time\n"
        "from lancet_mlir.tools.errors import run_cli\n"
        "from lancet_mlir.support.files import write_atomic\n"
        f"os.chdir({str(tmp_path)!r})\n"
        "def body():\n"
        "    write_atomic('done.txt', 'staged')\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)  # the signal ends it long before\n"
        "    return 3\n"
        "signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as in a shell; nohup ignores SIGHUP\n"
        "run_cli('lancet-opt', body)\n"
    )
    (tmp_path / "done.txt").write_text("old")
    assert _run_python(code) == (143, "", "lancet-opt: error: terminated\n")
    assert (tmp_path / "done.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["done.txt"]


def test_lancet_run_reads_an_empty_file_as_an_empty_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lancet_mlir.tools.lancet_run import main

    src = tmp_path / "empty.mlir"
    for text in ("", " \n\n"):
        src.write_text(text)
        code, out, err = run_main(main, [str(src)], capsys)
        assert (code, out) == (1, "")
        # not `Could not parse entire input!`
        assert err == "lancet-run: error: the module has no public function with a body to run\n"


def test_a_replaced_output_keeps_its_mode_and_device_errors_name_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "m.mlir", tmp_path / "out.mlir"
    src.write_text(GOOD)
    out.write_text("old")
    out.chmod(0o600)  # the rename of a 0644 temporary file made it 0644
    assert run_main(opt_main, [str(src), "-o", str(out)], capsys)[0] == 0
    assert (out.stat().st_mode & 0o777, "func.func" in out.read_text()) == (0o600, True)
    if os.path.exists("/dev/full"):
        code, _, err = run_main(opt_main, [str(src), "-o", "/dev/full"], capsys)
        assert (code, err) == (1, "lancet-opt: error: /dev/full: No space left on device\n")


def test_stdout_outputs_refused_with_print_between_passes_or_a_closed_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess

    src = tmp_path / "m.mlir"
    src.write_text(GOOD)
    argv = [str(src), "-o", os.devnull, "--report", "-", "--print-between-passes", "-p",
            "program-order,program-order"]  # fmt: skip
    code, out, err = run_main(opt_main, argv, capsys)
    assert (code, out) == (1, "")
    assert err == ("lancet-opt: error: --report -: standard output carries the IR that "
                   "--print-between-passes prints; give this output a file\n")  # fmt: skip
    # started with fd 1 closed: one line, not "'NoneType' object has no attribute 'flush'"
    code_text = "from lancet_mlir.tools.launch import lancet_opt; lancet_opt()"
    proc = subprocess.run([sys.executable, "-c", code_text, str(src)], stdout=None,
                          stderr=subprocess.PIPE, text=True, timeout=120,
                          preexec_fn=lambda: os.close(1))  # fmt: skip
    assert (proc.returncode, proc.stderr) == (
        1, "lancet-opt: error: -: standard output is closed (give the output a file)\n")  # fmt: skip


def _sh(command: str, cwd: Path) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of a bash command line in which `OPT` runs lancet-opt."""
    import shlex
    import subprocess

    opt = shlex.join([sys.executable, "-c",
                      "from lancet_mlir.tools.launch import lancet_opt; lancet_opt()"])  # fmt: skip
    proc = subprocess.run(["bash", "-c", command.replace("OPT", opt)], capture_output=True,
                          text=True, cwd=cwd, timeout=120)  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def test_a_failing_stdout_renames_no_file_and_a_gone_reader_still_gets_them(
    tmp_path: Path,
) -> None:
    # stdout was printed in the middle of the renames: files renamed before it stayed
    # when it failed, and `| true` lost the files renamed after it with exit 0
    (tmp_path / "m.mlir").write_text(GOOD)
    if os.path.exists("/dev/full"):
        code, _, err = _sh("OPT m.mlir --report - -o out.mlir --timeline t.json > /dev/full",
                           tmp_path)  # fmt: skip
        assert (code, err) == (1, "lancet-opt: error: -: standard output: No space left on "
                                  "device\n")  # fmt: skip
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.mlir"]
    big = "\n".join(f'%v{k} = "test.op"() : () -> tensor<8xf32>' for k in range(3000))
    (tmp_path / "big.mlir").write_text(big + "\n")  # more than a pipe holds: the reader is gone
    code, _, err = _sh("OPT big.mlir -o out.mlir --report r.json --timeline - | true", tmp_path)
    assert code == 0
    assert "error" not in err  # (a warning that test.op is costed 0)
    assert json.loads((tmp_path / "r.json").read_text())["makespan_us"] >= 0
    assert "test.op" in (tmp_path / "out.mlir").read_text()
    # fd 1 closed: refused before any work, not after some files were renamed
    code, _, err = _sh("OPT m.mlir --report - -o o2.mlir >&-", tmp_path)
    assert (code, err) == (1, "lancet-opt: error: -: standard output is closed (give the "
                              "output a file)\n")  # fmt: skip
    assert not (tmp_path / "o2.mlir").exists()


def test_stderr_and_devices_are_never_taken_for_stdout(tmp_path: Path) -> None:
    (tmp_path / "m.mlir").write_text(GOOD)
    # 2>&1: stderr is the same pipe as stdout, but the user chose it (refused for a while)
    code, out, err = _sh("OPT m.mlir --report /dev/stderr 2>&1 | cat", tmp_path)
    assert (code, err) == (0, "")
    assert "func.func" in out
    assert '"makespan_us"' in out
    os.symlink(os.devnull, tmp_path / "nul")
    for path in ("//dev/null", "nul"):
        assert _sh(f"OPT m.mlir --report {path} > /dev/null", tmp_path) == (0, "", "")
    os.symlink("loop2", tmp_path / "loop1")
    os.symlink("loop1", tmp_path / "loop2")
    code, _, err = _sh("OPT m.mlir -o loop1", tmp_path)
    assert (code, err) == (1, "lancet-opt: error: -o loop1: Too many levels of symbolic "
                              "links\n")  # fmt: skip
    assert (tmp_path / "loop1").is_symlink()


def test_sighup_is_one_line_too(tmp_path: Path) -> None:
    code = (
        "import os, signal, time\n"
        "from lancet_mlir.tools.errors import run_cli\n"
        "from lancet_mlir.support.files import write_atomic\n"
        f"os.chdir({str(tmp_path)!r})\n"
        "def body():\n"
        "    write_atomic('done.txt', 'staged')\n"
        "    os.kill(os.getpid(), signal.SIGHUP)\n"
        "    time.sleep(30)  # the signal ends it long before\n"
        "    return 3\n"
        "signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as in a shell; nohup ignores SIGHUP\n"
        "run_cli('lancet-opt', body)\n"
    )
    assert _run_python(code) == (129, "", "lancet-opt: error: hung up\n")
    assert list(tmp_path.iterdir()) == []


def test_a_signal_during_the_renames_waits_for_them(tmp_path: Path) -> None:
    # the thread signal mask did not hold it (numpy's BLAS threads take signals too): one
    # output was new, the others old, and a temporary file stayed
    import signal as signals
    import subprocess
    import time

    (tmp_path / "m.mlir").write_text(GOOD)
    slow = (
        "import os, time\n"
        "real, n = os.replace, [0]\n"
        "def slow(a, b):\n"
        "    if '.lancet-' in str(a):\n"
        "        n[0] += 1\n"
        "        if n[0] == 2:\n"
        "            open('MARK', 'w').close(); time.sleep(0.5)\n"
        "    return real(a, b)\n"
        "os.replace = slow\n"
        "from lancet_mlir.tools.launch import lancet_opt; lancet_opt()\n"
    )
    for sig in (signals.SIGTERM, signals.SIGINT, signals.SIGHUP):
        for name in ("o.mlir", "r.json", "t.json"):
            (tmp_path / name).write_text("old")
        (tmp_path / "MARK").unlink(missing_ok=True)
        argv = [sys.executable, "-c", slow, "m.mlir", "-o", "o.mlir", "--report", "r.json",
                "--timeline", "t.json"]  # fmt: skip
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 60
        while not (tmp_path / "MARK").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        # everything was done when it came: the run ends as it would have a moment later
        assert (proc.returncode, out, err) == (0, "", ""), sig
        assert all((tmp_path / n).read_text() != "old" for n in ("o.mlir", "r.json", "t.json"))
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "MARK", "m.mlir", "o.mlir", "r.json", "t.json"]  # fmt: skip


def test_stdout_short_writes_are_continued_and_their_error_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the buffered stream took what a full disk had room for and said nothing: exit 0
    import errno

    from lancet_mlir.support import files

    read, write = os.pipe()
    real = os.write
    monkeypatch.setattr(files.os, "write", lambda fd, data: real(fd, bytes(data[:3])))
    files._write_all(write, b"0123456789")
    os.close(write)
    assert os.read(read, 100) == b"0123456789"
    os.close(read)
    calls: list[int] = []

    def full(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return 4

    class Out(io.StringIO):
        def fileno(self) -> int:
            return 1

    monkeypatch.setattr(files.os, "write", full)
    monkeypatch.setattr(sys, "stdout", Out())
    report = tmp_path / "r.json"

    def run() -> None:
        with OutputSet():
            write_atomic("-", "0123456789")
            write_atomic(report, "{}")

    with pytest.raises(UserError, match="^-: standard output: No space left on device$"):
        run()
    assert not report.exists()  # a failed print renames nothing
    assert calls == [10, 6]


def test_stderr_is_written_through_its_stream_and_a_file_that_is_stdout_is_replaced(
    tmp_path: Path,
) -> None:
    (tmp_path / "m.mlir").write_text(GOOD)
    # opening /dev/stderr truncated all.log: the IR printed before it was lost
    assert _sh("OPT m.mlir --report /dev/stderr > all.log 2>&1", tmp_path) == (0, "", "")
    text = (tmp_path / "all.log").read_text()
    assert "func.func" in text
    assert '"makespan_us"' in text
    # `-o x.txt >> x.txt`: -o replaces its file, it does not append to the log
    (tmp_path / "x.txt").write_text("old\n")
    assert _sh("OPT m.mlir -o x.txt >> x.txt", tmp_path) == (0, "", "")
    assert (tmp_path / "x.txt").read_text().startswith("builtin.module")


def test_lancet_run_refuses_a_closed_stdout(tmp_path: Path) -> None:
    import shlex

    (tmp_path / "m.mlir").write_text(GOOD)
    run = shlex.join([sys.executable, "-c",
                      "from lancet_mlir.tools.launch import lancet_run; lancet_run()"])  # fmt: skip
    assert _sh(f"{run} m.mlir >&-", tmp_path) == (
        1, "", "lancet-run: error: -: standard output is closed (give the output a file)\n")  # fmt: skip
