"""lancet-profile subcommands, and `sync` under mpiexec with 2 and 4 ranks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_tool

from lancet_mlir.cost.profile_db import ProfileDB, ProfileEntry, write_lancet_profile
from lancet_mlir.support.mpi_util import mpiexec_argv

DATA = Path(__file__).resolve().parents[1] / "data" / "profile"
MATMUL = "comp.matmul;T<64x128xf32>,T<128x256xf32>,|T<64x256xf32>"
GELU = "comp.gelu;T<64x256xf32>,|T<64x256xf32>"


def _error_line(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 1, (run.returncode, run.stdout, run.stderr)
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    return lines[0]


def test_from_nccl_tests_writes_comm_table(tmp_path: Path) -> None:
    out = tmp_path / "a2a.csv"
    log = DATA / "alltoall_perf_2gpu.log"
    run = run_tool(["lancet-profile", "from-nccl-tests", str(log), "-o", str(out)])
    assert run.returncode == 0, run.stderr
    assert out.read_text().splitlines()[1:] == [
        "kind,group_size,bytes,time_us",
        "all_to_all,2,1024,19.51",
        "all_to_all,2,4096,20.18",
        "all_to_all,2,16384,19.94",
        "all_to_all,2,65536,19.97",
    ]


def test_from_lancet_and_from_lancet_csv(tmp_path: Path) -> None:
    prof = tmp_path / "x.profile"
    write_lancet_profile(prof, {"raf_op_gelu;T<8xf32>,|T<8xf32>": 3})
    run = run_tool(["lancet-profile", "from-lancet", str(prof), "--device", "V100"])
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["entries"] == {
        "raf_op_gelu;T<8xf32>,|T<8xf32>": {
            "mean_us": 3.0,
            "count": 1,
            "std_us": 0.0,
            "min_us": 3.0,
            "max_us": 3.0,
        }
    }
    assert doc["metadata"]["device"] == "v100"

    out = tmp_path / "t.csv"
    run = run_tool(
        [
            "lancet-profile",
            "from-lancet-csv",
            str(DATA / "alltoall_perf_2x8.csv"),
            "--kind",
            "alltoall",
            "--group-size",
            "16",
            "-o",
            str(out),
        ]
    )
    assert run.returncode == 0, run.stderr
    assert out.read_text().splitlines()[2:] == [
        "all_to_all,16,1024,21.0",
        "all_to_all,16,4096,22.0",
        "all_to_all,16,65536,35.0",
        "all_to_all,16,1048576,410.0",
    ]


def test_merge_and_show(tmp_path: Path) -> None:
    ProfileDB({MATMUL: ProfileEntry(10.0, 3, 0.0, 10.0, 10.0)}, {"device": "h100"}).save(
        tmp_path / "a.json"
    )
    ProfileDB({MATMUL: ProfileEntry(20.0, 1, 0.0, 20.0, 20.0), GELU: ProfileEntry(2.0)}).save(
        tmp_path / "b.json"
    )
    run = run_tool(
        [
            "lancet-profile",
            "merge",
            str(tmp_path / "a.json"),
            str(tmp_path / "b.json"),
            "-o",
            str(tmp_path / "ab.json"),
        ]
    )
    assert run.returncode == 0, run.stderr
    merged = ProfileDB.load(tmp_path / "ab.json")
    assert merged.entries[MATMUL].mean_us == 12.5
    assert merged.entries[GELU] == ProfileEntry(2.0)

    run = run_tool(
        ["lancet-profile", "show", str(tmp_path / "ab.json"), "--sort", "mean"],
        env={"COLUMNS": "200"},
    )
    assert run.returncode == 0, run.stderr
    assert "12.500" in run.stdout
    assert "comp.gelu" in run.stdout
    assert run.stdout.index("comp.matmul") < run.stdout.index("comp.gelu")  # slowest first


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    line = _error_line(run_tool(["lancet-profile", "from-lancet", str(tmp_path / "a.json")]))
    assert line == f"lancet-profile: error: {tmp_path / 'a.json'}: expected a Lancet .profile file"
    line = _error_line(run_tool(["lancet-profile", "bogus"]))
    assert line.startswith("lancet-profile: error: argument command: invalid choice: 'bogus'")
    line = _error_line(
        run_tool(
            ["lancet-profile", "merge", str(tmp_path / "none.json"), "-o", str(tmp_path / "o.json")]
        )
    )
    assert line == f"lancet-profile: error: {tmp_path / 'none.json'}: no such file"
    assert not (tmp_path / "o.json").exists()
    line = _error_line(
        run_tool(
            [
                "lancet-profile",
                "from-xla",
                str(DATA / "xla_collective_subset.csv"),
                "--device",
                "quantum",
            ]
        )
    )
    assert "unknown device 'quantum'" in line


# ---- MPI -----------------------------------------------------------------------------------------
def _sync(tmp_path: Path, ranks: int) -> subprocess.CompletedProcess[str]:
    argv = [
        *mpiexec_argv(ranks),
        sys.executable,
        "-m",
        "lancet_mlir.tools.lancet_profile",
        "sync",
        str(tmp_path / "in{rank}.json"),
        "-o",
        str(tmp_path / "out{rank}.json"),
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90)


@pytest.mark.serial
@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks", [2, 4])
def test_sync_gives_every_rank_the_same_average(tmp_path: Path, ranks: int) -> None:
    for r in range(ranks):
        ProfileDB(
            {
                MATMUL: ProfileEntry(10.0 + r, 20, 0.0, 10.0 + r, 10.0 + r),
                GELU: ProfileEntry(2.0 * (r + 1), 10, 0.5, 1.0, 9.0),
            },
            {"device": "h100", "rank": r},
        ).save(tmp_path / f"in{r}.json")
    run = _sync(tmp_path, ranks)
    assert run.returncode == 0, run.stderr
    texts = [(tmp_path / f"out{r}.json").read_text() for r in range(ranks)]
    assert all(t == texts[0] for t in texts)
    db = ProfileDB.load(tmp_path / "out0.json")
    # equal counts: the plain mean over ranks
    assert db.entries[MATMUL].mean_us == pytest.approx(10.0 + (ranks - 1) / 2)
    assert db.entries[MATMUL].count == 20 * ranks
    assert db.entries[GELU].mean_us == pytest.approx(2.0 * (ranks + 1) / 2)
    assert db.metadata["rank"] == 0
    assert db.metadata["synced_ranks"] == ranks


@pytest.mark.serial
@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks", [2, 4])
def test_sync_missing_key_fails_on_every_rank(tmp_path: Path, ranks: int) -> None:
    for r in range(ranks):
        entries = {MATMUL: ProfileEntry(10.0)}
        if r != 1:
            entries[GELU] = ProfileEntry(2.0)
        ProfileDB(entries, {"device": "h100"}).save(tmp_path / f"in{r}.json")
    run = _sync(tmp_path, ranks)
    assert run.returncode != 0
    expected = (
        f"lancet-profile: error: profile key '{GELU}' is missing on rank(s) 1 "
        "(1 key(s) not measured on every rank)"
    )
    assert run.returncode == 1  # every rank fails; rank 0 alone prints the line
    assert run.stderr.count(expected) == 1, run.stderr
    assert not any(tmp_path.glob("out*.json"))


@pytest.mark.serial
@pytest.mark.timeout(120)
def test_sync_device_mismatch_and_missing_file_fail_everywhere(tmp_path: Path) -> None:
    ProfileDB({MATMUL: ProfileEntry(1.0)}, {"device": "h100"}).save(tmp_path / "in0.json")
    ProfileDB({MATMUL: ProfileEntry(1.0)}, {"device": "a100"}).save(tmp_path / "in1.json")
    run = _sync(tmp_path, 2)
    assert run.returncode != 0
    assert (
        run.stderr.count("profiles were measured on different devices (rank 0: h100, rank 1: a100)")
        == 1
    ), run.stderr
    (tmp_path / "in1.json").unlink()
    run = _sync(tmp_path, 2)
    assert run.returncode != 0
    assert run.stderr.count(f"error: rank 1: {tmp_path / 'in1.json'}: no such file") == 1


def test_from_xla_tables(tmp_path: Path) -> None:
    run = run_tool(
        ["lancet-profile", "from-xla", str(DATA / "xla_collective_subset.csv"), "--gpu", "sm_90"]
    )
    assert run.returncode == 0, run.stderr
    assert [ln for ln in run.stdout.splitlines() if not ln.startswith("#")] == [
        "kind,group_size,bytes,time_us",
        "all_to_all,2,1024,134.272",
        "all_to_all,2,2048,30.784",
        "allreduce,8,1024,49.312",
        "allreduce,8,2048,35.968",
        "allreduce,8,4096,32.512",
        "allreduce,8,1048576,51.936",
    ]
    out = tmp_path / "mm.csv"
    run = run_tool(
        [
            "lancet-profile",
            "from-xla-matmul",
            str(DATA / "xla_matmul_subset.csv"),
            "--device",
            "H100",
            "-o",
            str(out),
        ]
    )
    assert run.returncode == 0, run.stderr
    rows = [ln.split(",") for ln in out.read_text().splitlines() if not ln.startswith("#")]
    assert rows[0] == ["dtype", "flops", "time_us"]
    assert [(d, int(f)) for d, f, _ in rows[1:]] == [
        ("bf16", 2**25),
        ("bf16", 2**26),
        ("tf32", 2**26),
    ]
    times = [float(t) for _, _, t in rows[1:]]
    # 2^25 FLOPs: the single 256^3 row; 2^26: median of four shapes (middle two averaged);
    # the fp8 row and the B200 row are ignored
    assert times[0] == round(2**25 / 6721641025641 * 1e6, 4)
    assert times[1] == pytest.approx(2**26 / 12336188235294 * 1e6, abs=1e-4)
    mid = (2**26 / 10230009756097 + 2**26 / 10155699757869) / 2 * 1e6
    assert times[2] == pytest.approx(mid, abs=1e-4)
