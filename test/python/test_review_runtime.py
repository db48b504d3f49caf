"""Review of the cost model, simulator, runtime and tools: regressions for the bugs found
(each test failed before its fix) and end-to-end checks a demanding user would run."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import parse, run_tool
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kernels import SAMPLES
from xdsl.dialects.builtin import BFloat16Type, ModuleOp, TensorType, f16, f32, f64, i64
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.cost.devices import canonical_device_name, get_device
from lancet_mlir.cost.keys import op_key
from lancet_mlir.cost.profile_db import ProfileDB, ProfileEntry
from lancet_mlir.cost.roofline import matmul_time_us
from lancet_mlir.dialects.comp import build_op
from lancet_mlir.dialects.kernels import get_kernel
from lancet_mlir.graph.core import Problem
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.measure import command as measure_command
from lancet_mlir.measure import measure
from lancet_mlir.measure.command import MeasureJob
from lancet_mlir.measure.measure import MeasureOptions
from lancet_mlir.measure.numpy_backend import NumpyBackend
from lancet_mlir.runtime import execute
from lancet_mlir.runtime.kernels import run_kernel
from lancet_mlir.runtime.loader import load_module
from lancet_mlir.sim import evaluate_fixed_order, list_schedule, summarize
from lancet_mlir.sim.trace import chrome_trace
from lancet_mlir.support.errors import UserError
from lancet_mlir.support.mpi_util import mpiexec_argv

H100 = get_device("h100")
BIN = Path(sys.executable).parent


def _cli(main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run a tool's main() in-process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


def _graph(text: str) -> DataflowGraph:
    return DataflowGraph.from_block(parse(text).body.block.first_op.body.block)


# ---- cost model: what the user's files did not cover ---------------------------------------------
STEP = """
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @f(%a: tensor<64x128xf32>, %b: tensor<128x256xf32>, %c: tensor<32x128xf32>) {
    %y = comp.matmul %a, %b : (tensor<64x128xf32>, tensor<128x256xf32>) -> tensor<64x256xf32>
    %z = comp.matmul %c, %b : (tensor<32x128xf32>, tensor<128x256xf32>) -> tensor<32x256xf32>
    %w = comp.matmul %c, %b : (tensor<32x128xf32>, tensor<128x256xf32>) -> tensor<32x256xf32>
    %r = comm.allreduce %y : (tensor<64x256xf32>) -> tensor<64x256xf32>
    %k = arith.constant dense<1.0> : tensor<4xf32>
    func.return
  }
}
"""


def test_profile_that_misses_op_keys_is_noted(tmp_path: Path) -> None:
    graph = _graph(STEP)
    path = tmp_path / "p.json"
    ProfileDB({op_key(graph.ops[0]): ProfileEntry(7.0)}, {"device": "h100"}).save(path)
    model = CostModel.build(CostConfig(profiles=(str(path),)))
    times = model.graph_times(graph)
    assert times[0] == 7.0
    # two distinct compute keys (the 32x128 matmul twice); the collective and the constant are
    # not compute keys a profile is expected to hold
    assert model.notes == [
        f"{path}: no entry for 1 of the 2 distinct compute op key(s) costed (estimated "
        "instead), e.g. comp.matmul;T<32x128xf32>,T<128x256xf32>,|T<32x256xf32>"
    ]
    full = tmp_path / "full.json"
    ProfileDB({op_key(graph.ops[i]): ProfileEntry(1.0) for i in (0, 1)}).save(full)
    covered = CostModel.build(CostConfig(profiles=(str(full),)))
    assert covered.graph_times(graph)[:3] == [1.0, 1.0, 1.0]
    assert covered.notes == []
    empty = tmp_path / "empty.json"  # e.g. measured on a module of collectives only
    ProfileDB().save(empty)
    nothing = CostModel.build(CostConfig(profiles=(str(empty),)))
    nothing.graph_times(graph)
    assert nothing.notes == [
        f"{empty}: no entry for 2 of the 2 distinct compute op key(s) costed (estimated "
        "instead), e.g. comp.matmul;T<64x128xf32>,T<128x256xf32>,|T<64x256xf32>"
    ]


def test_comm_table_that_no_collective_uses_is_noted(tmp_path: Path) -> None:
    table = tmp_path / "ar8.csv"
    table.write_text("kind,group_size,bytes,time_us\nallreduce,8,1024,30\nallreduce,8,65536,40\n")
    model = CostModel.build(CostConfig(comm_tables=(str(table),)))
    model.graph_times(_graph(STEP))  # world size 2: the shipped G=2 table is used
    assert model.notes == [
        f"{table}: allreduce at G=8 not used by any costed collective (tables used: "
        "allreduce at G=2)"
    ]
    used = CostModel.build(CostConfig(comm_tables=(str(table),), world_size=8))
    assert used.graph_times(_graph(STEP))[3] == 40.0  # 65536 bytes: the table's last row
    assert used.notes == []


def test_device_aliases_in_profile_metadata(tmp_path: Path) -> None:
    assert canonical_device_name(" SM_90 ") == "h100"
    assert canonical_device_name("cpu") == "cpu"
    path = tmp_path / "p.json"
    ProfileDB({}, {"device": "sm_90"}).save(path)
    assert CostModel.build(CostConfig(profiles=(str(path),))).notes == []  # sm_90 is an h100
    merged = ProfileDB({}, {"device": "sm_90"}).merge(ProfileDB({}, {"device": "H100"}))
    assert merged.metadata["device"] == "sm_90"
    with pytest.raises(UserError, match="different devices: sm_90 and a100"):
        ProfileDB({}, {"device": "sm_90"}).merge(ProfileDB({}, {"device": "a100"}))


def test_cached_model_rereads_a_rewritten_profile(tmp_path: Path) -> None:
    graph = _graph(STEP)
    path = tmp_path / "p.json"
    key = op_key(graph.ops[0])
    ProfileDB({key: ProfileEntry(5.0)}).save(path)
    cfg = CostConfig(profiles=(str(path),))
    assert CostModel.from_config(cfg).op_time_us(graph.ops[0]) == 5.0
    assert CostModel.from_config(cfg) is CostModel.from_config(cfg)  # unchanged: cached
    ProfileDB({key: ProfileEntry(50.0)}).save(path)
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse-grained file systems
    assert CostModel.from_config(cfg).op_time_us(graph.ops[0]) == 50.0


def test_f64_and_fp8_matmuls_use_the_calibrated_curve() -> None:
    # 64x128 @ 128x256: 4194304 FLOPs, below the shipped tables' first point 2^25: extrapolate
    # the first segment (tf32 rows (2^25, 5.568), (2^26, 6.584); bf16 (2^25, 4.992), (2^26, 5.44))
    tf32 = 5.568 - (6.584 - 5.568) * (33554432 - 4194304) / 33554432
    bf16_half = 4.992 - (5.44 - 4.992) * (33554432 - 2097152) / 33554432
    nbytes = (64 * 128 + 128 * 256 + 64 * 256) * 8
    # f64 runs at the f32 rate on an H100, so it is never faster than an f32 matmul (was: the
    # plain roofline, 0.17 us raised to the 2 us launch floor)
    assert matmul_time_us(4194304, nbytes, "f64", H100) == pytest.approx(tf32)
    assert matmul_time_us(4194304, nbytes, "f64", H100) == matmul_time_us(4194304, 0, "f32", H100)
    # fp8 has twice the bf16 peak: the bf16 curve at half the FLOPs (2097152)
    assert matmul_time_us(4194304, 0, "f8E4M3FN", H100) == pytest.approx(bf16_half)
    # large: the dtype's own peak wins (2^40 FLOPs at 0.75 x 67 TFLOP/s for f64)
    assert matmul_time_us(2**40, 0, "f64", H100) == pytest.approx(2**40 / (67e12 * 0.75) * 1e6)


def test_extrapolation_above_a_pooled_tail_keeps_rising() -> None:
    from lancet_mlir.cost.comm_model import PiecewiseLinear

    # 4 MiB measured faster than 2 MiB: pooled to 245, 245; above 4 MiB the curve rose flat
    curve = PiecewiseLinear.fit([(2**20, 100.0), (2**21, 250.0), (2**22, 240.0)])
    assert curve.ys == (100.0, 245.0, 245.0)
    assert curve(2**22) == 245.0
    # the last rising segment: 145 us per MiB, so 64 MiB costs 245 + 60 * 145
    assert curve(2**26) == 245.0 + 60 * 145.0


def test_flat_comm_table_grows_at_link_bandwidth_above_its_range(tmp_path: Path) -> None:
    table = tmp_path / "small.csv"  # an nccl-tests run of small messages only: all latency
    table.write_text("kind,group_size,bytes,time_us\nallreduce,8,1024,20\nallreduce,8,4096,20\n")
    model = CostModel.build(CostConfig(comm_tables=(str(table),)))
    assert model.comm.time_us("allreduce", 4096, 8) == 20.0
    # 1 GiB: 2 * 7/8 bus bytes per payload byte at the H100's 900 GB/s NVLink (was: 20 us)
    expected = 20.0 + (2**30 - 4096) * 1.75 / 900e9 * 1e6
    assert model.comm.time_us("allreduce", 2**30, 8) == pytest.approx(expected)
    assert model.notes == [
        "allreduce: group size 8: payloads above the table's largest size (4096 bytes) grow "
        "slower than the link bandwidth allows; extrapolated at 900 GB/s"
    ]


# ---- tools: fail before the long work, stdin, argument checks ---------------------------------------
def _measure_args(module: str, output: str | None) -> MeasureJob:
    return MeasureJob(
        module=module, backend="cpu", output=output, options=MeasureOptions(warmup=0, iters=1)
    )


def test_measure_checks_the_output_folder_before_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "m.mlir"
    src.write_text(STEP)

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("measured although the output cannot be written")

    monkeypatch.setattr(measure_command, "measure_with_stats", never)
    bad = tmp_path / "no" / "p.json"
    with pytest.raises(UserError, match=f"{bad}: folder does not exist"):
        measure_command.run_measure(_measure_args(str(src), str(bad)))
    with pytest.raises(UserError, match=f"{tmp_path}: is a folder"):
        measure_command.run_measure(_measure_args(str(src), str(tmp_path)))


def test_measure_reads_the_module_from_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(STEP))
    out = tmp_path / "p.json"
    measure_command.run_measure(_measure_args("-", str(out)))
    db = ProfileDB.load(out)
    assert db.metadata["source"] == "<stdin>"
    assert sorted(db.entries) == [
        "comp.matmul;T<32x128xf32>,T<128x256xf32>,|T<32x256xf32>",
        "comp.matmul;T<64x128xf32>,T<128x256xf32>,|T<64x256xf32>",
    ]
    assert "1 collective op key(s) not measured" in capsys.readouterr().err


def test_model_checks_the_output_folder_before_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lancet_mlir.tools import lancet_model

    def never(cfg: object) -> None:
        raise AssertionError("built although the output cannot be written")

    monkeypatch.setattr(lancet_model, "build_gpt2_moe", never)
    bad = tmp_path / "no" / "m.mlir"
    code, _, err = _cli(lancet_model.main, ["gpt2-moe", "-o", str(bad)], capsys)
    assert (code, err) == (1, f"lancet-model: error: {bad}: folder does not exist\n")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["lancet-run", "M", "--seed", "-1"], "lancet-run: error: argument --seed: must be >= 0, got -1"),
        (["lancet-profile", "measure", "M", "--seed", "-3"],
         "lancet-profile: error: argument --seed: must be >= 0, got -3"),
        (["lancet-model", "gpt2-moe", "--capacity-factor", "inf"],
         "lancet-model: error: gpt2-moe: capacity_factor must be a finite number > 0, got inf"),
    ],
)  # fmt: skip
def test_bad_numbers_name_the_option(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from lancet_mlir.tools import lancet_model, lancet_profile, lancet_run

    src = tmp_path / "m.mlir"
    src.write_text(STEP)
    main = {"lancet-run": lancet_run.main, "lancet-profile": lancet_profile.main,
            "lancet-model": lancet_model.main}[argv[0]]  # fmt: skip
    code, _, err = _cli(main, [str(src) if a == "M" else a for a in argv[1:]], capsys)
    assert (code, err) == (1, message + "\n")


def test_show_xla_and_matmul_tables(capsys: pytest.CaptureFixture[str]) -> None:
    from lancet_mlir.tools.lancet_profile import main

    xla = str(
        Path(__file__).resolve().parents[1] / "data" / "profile" / "xla_collective_subset.csv"
    )
    code, _, err = _cli(main, ["show", xla], capsys)  # several GPUs: which one?
    assert (code, err) == (1, f"lancet-profile: error: {xla}: an XLA perf table holds several "
                              "GPUs; pass --device D or --gpu G to choose one\n")  # fmt: skip
    code, out, _ = _cli(main, ["show", xla, "--device", "h100"], capsys)
    assert code == 0
    assert out.splitlines()[0] == f"{xla}: 6 samples"  # the sm_90 rows but collective-permute
    matmul = str(Path(measure.__file__).resolve().parents[1] / "data" / "matmul_h100.csv")
    code, out, _ = _cli(main, ["show", matmul, "--limit", "1"], capsys)
    assert code == 0
    assert out.splitlines()[0] == f"{matmul}: 30 matmul samples"
    row = next(ln for ln in out.splitlines() if "bf16" in ln)
    # first row: bf16, 2^25 FLOPs in 4.992 us = 6.7 TFLOP/s
    assert [c.strip() for c in row.strip("│ ").split("│")] == ["bf16", "33554432", "4.992", "6.7"]


# ---- lancet-run --compare: clear messages --------------------------------------------------------
ADD3 = """func.func @f(%x: tensor<64xT>, %y: tensor<64xT>, %z: tensor<64xT>) -> tensor<64xT> {
  %a = comp.add FIRST : (tensor<64xT>, tensor<64xT>) -> tensor<64xT>
  %b = comp.add SECOND : (tensor<64xT>, tensor<64xT>) -> tensor<64xT>
  func.return %b : tensor<64xT>
}
"""


def _add3(dtype: str, left: bool) -> str:
    first, second = ("%x, %y", "%a, %z") if left else ("%y, %z", "%x, %a")
    return ADD3.replace("FIRST", first).replace("SECOND", second).replace("xT>", f"x{dtype}>")


def test_compare_names_the_first_differing_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lancet_mlir.tools.lancet_run import main

    a, b = tmp_path / "a.mlir", tmp_path / "b.mlir"
    a.write_text(_add3("f32", True))
    b.write_text(_add3("f32", True).replace("%z: tensor<64xf32>", "%z: tensor<64xf16>")
                 .replace("%a, %z", "%a, %x"))  # fmt: skip
    code, _, err = _cli(main, ["--compare", str(a), str(b)], capsys)
    assert (code, err) == (1, (
        f"lancet-run: error: @f of {a} and @f of {b} take different arguments, so they cannot "
        f"run on the same inputs: argument #2 (%z) is tensor<64xf32> in {a} but tensor<64xf16> "
        f"in {b} (1 of 3 arguments differ)\n"
    ))  # fmt: skip


def test_compare_reads_at_most_one_module_from_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    from lancet_mlir.tools.lancet_run import main

    # was: the second read of stdin found it empty ("<stdin>:1:1: Could not parse entire input!")
    code, _, err = _cli(main, ["--compare", "-", "-"], capsys)
    assert (code, err) == (
        1,
        "lancet-run: error: --compare: stdin ('-') can hold only one of the two modules\n",
    )


def test_compare_of_reassociated_sums_is_same_with_the_dtype_tolerances(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lancet_mlir.tools.lancet_run import main

    a, b = tmp_path / "a.mlir", tmp_path / "b.mlir"
    a.write_text(_add3("f16", True))
    b.write_text(_add3("f16", False))  # x + (y + z): other roundings in f16
    # f16's default tolerances (1e-2, 1e-3) admit its rounding (were f32's 1e-4, 1e-5: failed)
    code, out, _ = _cli(main, ["--compare", str(a), str(b)], capsys)
    assert code == 0
    assert "same (tolerances by dtype: float16 rtol=0.01 atol=0.001)" in out
    # tolerances too tight for f16: the f64 rerun shows only the order of the sums differs
    code, out, err = _cli(main, ["--compare", str(a), str(b), "--rtol", "1e-6", "--atol", "0"],
                          capsys)  # fmt: skip
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith(f"{a} vs {b}: DIFFERENT (rtol=1e-06, atol=0): 1 outputs")
    assert lines[1].startswith("in f64 the two agree (tolerances by dtype: float64 rtol=1e-09 "
                               "atol=1e-12; worst abs err ")  # fmt: skip
    assert lines[1].endswith("the same operations, sums in another order; the 1 differing "
                             "outputs are rounding, not a different computation")  # fmt: skip
    a.write_text(_add3("f32", True))
    b.write_text(_add3("f32", False))
    assert _cli(main, ["--compare", str(a), str(b)], capsys)[0] == 0


# ---- every kernel through lancet-run, in every float dtype -----------------------------------------
NUMPY_OF = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "bf16": np.float32}
ELEMENT_OF = {"f16": f16, "f32": f32, "f64": f64, "bf16": BFloat16Type()}


def _all_kernels_module(dtype: str) -> tuple[ModuleOp, list[np.ndarray], list[np.ndarray]]:
    """One function running every registry kernel on its test sample (floats in `dtype`):
    (module, argument values, the registry's direct numpy results)."""
    args: list[np.ndarray] = []
    calls = []
    for name, (arrays, params) in sorted(SAMPLES.items()):
        first = len(args)
        for a in arrays:
            a = np.asarray(a)
            args.append(a.astype(NUMPY_OF[dtype]) if a.dtype.kind == "f" else a.astype(np.int64))
        fixed = {**params, "dtype": dtype} if "dtype" in params else dict(params)
        calls.append((name, range(first, len(args)), fixed))
    types = [TensorType(ELEMENT_OF[dtype] if a.dtype.kind == "f" else i64, a.shape) for a in args]
    block = Block(arg_types=types)
    results, expected = [], []
    for name, indices, params in calls:
        op = build_op(name, [block.args[i] for i in indices], params)
        block.add_op(op)
        results.extend(op.results)
        expected.extend(run_kernel(get_kernel(name), [args[i] for i in indices], params))
    block.add_op(ReturnOp(*results))
    func = FuncOp("kernels", (types, [r.type for r in results]), Region(block))
    return ModuleOp([func]), args, expected


@pytest.mark.parametrize("dtype", ["f64", "f32", "f16", "bf16"])
def test_every_kernel_through_lancet_run_equals_direct_numpy(
    tmp_path: Path, dtype: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from lancet_mlir.tools.lancet_run import main

    module, args, expected = _all_kernels_module(dtype)
    src, ins, out = tmp_path / "k.mlir", tmp_path / "in.npz", tmp_path / "out.npz"
    src.write_text(str(module))
    np.savez(ins, **{f"rank0/{i}": a for i, a in enumerate(args)})
    code, _, err = _cli(main, [str(src), "--inputs", str(ins), "--save", str(out)], capsys)
    assert code == 0, err
    with np.load(out) as saved:
        assert len(saved.files) == len(expected) >= len(SAMPLES)
        for i, want in enumerate(expected):
            got = saved[f"rank0/{i}"]
            assert (got.dtype, got.shape) == (want.dtype, want.shape), i
            np.testing.assert_array_equal(got, want, err_msg=f"result #{i}")


# ---- simulator invariants on random graphs -----------------------------------------------------------
TIMES = st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=1e6))


@st.composite
def _dags(draw: st.DrawFn) -> tuple[Problem, list[float]]:
    n = draw(st.integers(min_value=1, max_value=20))
    pairs = [(p, c) for c in range(n) for p in range(c)]
    edges = draw(st.lists(st.sampled_from(pairs), max_size=3 * n, unique=True)) if pairs else []
    comm = [i for i in range(n) if draw(st.booleans())]
    return Problem.from_edges(n, edges, comm), [draw(TIMES) for _ in range(n)]


@settings(max_examples=150, deadline=None)
@given(_dags(), st.sampled_from([1, 2, 5]), st.sampled_from([1.0, 1.1, 3.0]))
def test_summary_invariants_and_trace_validity(case, k: int, f: float) -> None:
    g, d = case
    fixed = evaluate_fixed_order(g, d, num_comm_streams=k, overlap_slowdown=f)
    for tl, is_fixed in ((fixed, True), (list_schedule(g, d, num_comm_streams=k,
                                                       overlap_slowdown=f), False)):  # fmt: skip
        s = summarize(g, d, tl)
        eps = 1e-9 * max(1.0, s.makespan_us)
        assert -eps <= s.exposed_comm_us <= s.comm_us + eps
        assert s.overlap_us <= min(s.comm_us, s.compute_us) + eps
        assert s.compute_us + s.exposed_comm_us <= s.makespan_us + eps
        assert s.makespan_us + eps >= s.lower_bound_us
        if is_fixed:  # every op starts when its stream and its producers are done
            assert s.critical_path_us == pytest.approx(s.makespan_us, rel=1e-9, abs=1e-9)
        events = [e for e in chrome_trace(g, d, tl)["traceEvents"] if e["ph"] == "X"]
        assert len(events) == sum(1 for x in d if x > 0)
        for e in events:
            assert {"name", "cat", "ph", "pid", "tid", "ts", "dur", "args"} <= set(e)
            assert e["ts"] >= 0
            assert e["dur"] >= 0


# ---- measured profile drives the schedule ------------------------------------------------------------
def test_measured_profile_replaces_every_compute_estimate(tmp_path: Path) -> None:
    model = tmp_path / "m.mlir"
    gen = run_tool(["lancet-model", "gpt2-moe", "--layers", "2", "--hidden", "32", "--heads", "2",
                    "--seq", "8", "--batch", "2", "--world-size", "2", "--vocab", "64",
                    "--gate", "top2", "--optimizer", "sgd", "-o", str(model)])  # fmt: skip
    assert gen.returncode == 0, gen.stderr
    module = load_module(str(model)).module
    db, _ = measure.measure_module(module, NumpyBackend(), warmup=0, iters=2)
    prof = tmp_path / "prof.json"
    db.save(prof)
    report = tmp_path / "r.json"
    opt = run_tool(["lancet-opt", str(model), "-p", "simulate", "--profile", str(prof),
                    "--report", str(report), "-o", os.devnull])  # fmt: skip
    assert opt.returncode == 0, opt.stderr
    doc = json.loads(report.read_text())
    func = module.body.block.first_op
    graph = DataflowGraph.from_block(func.body.block)
    compute_keys = [op_key(op) for op, c in zip(graph.ops, graph.is_comm, strict=True) if not c]
    # the compute stream is busy exactly the sum of the measured means (no roofline estimate)
    assert doc["compute_us"] == pytest.approx(sum(db.entries[k].mean_us for k in compute_keys))
    assert doc["cost_model"]["notes"] == [
        f"{prof}: measured on cpu, costing for h100: profiled times are used as they are"
    ]


# ---- MPI: non-power-of-two worlds, groups, the generated model -----------------------------------
THREE_RANKS = """builtin.module attributes {lancet.world_size = 3 : i64} {
  func.func @c(%x: tensor<6x4xf32>, %y: tensor<3xf32>, %h: tensor<6xf16>, %k: tensor<6xi64> {lancet.max_int = 100 : i64}, %d: tensor<3x2x2xf32>, %n: tensor<3xi64> {lancet.max_int = 3 : i64}, %b: tensor<2x3xbf16>) -> (tensor<6x4xf32>, tensor<3xf32>, tensor<18x4xf32>, tensor<2x4xf32>, tensor<6x4xf32>, tensor<3x2x2xf32>, tensor<3xi64>, tensor<6xf16>, tensor<6xi64>, tensor<3xf32>, tensor<2x3xbf16>, tensor<6x4xf32>) {
    %s1, %s2 = comm.allreduce %x, %y : (tensor<6x4xf32>, tensor<3xf32>) -> (tensor<6x4xf32>, tensor<3xf32>)
    %g1 = comm.allgather %x : (tensor<6x4xf32>) -> tensor<18x4xf32>
    %r1 = comm.reduce_scatter %x reduce avg : (tensor<6x4xf32>) -> tensor<2x4xf32>
    %a1 = comm.all_to_all %x split 0 concat 0 : (tensor<6x4xf32>) -> tensor<6x4xf32>
    %v1, %c1 = comm.all_to_allv %d, %n : (tensor<3x2x2xf32>, tensor<3xi64>) -> (tensor<3x2x2xf32>, tensor<3xi64>)
    %m1 = comm.allreduce %h reduce max : (tensor<6xf16>) -> tensor<6xf16>
    %m2 = comm.allreduce %k reduce avg : (tensor<6xi64>) -> tensor<6xi64>
    %m3 = comm.allreduce %y reduce prod group <[[2], [0], [1]]> : (tensor<3xf32>) -> tensor<3xf32>
    %m4 = comm.allreduce %b : (tensor<2x3xbf16>) -> tensor<2x3xbf16>
    %a2 = comm.all_to_all %x split 0 concat 0 group <[[2, 0, 1]]> : (tensor<6x4xf32>) -> tensor<6x4xf32>
    func.return %s1, %s2, %g1, %r1, %a1, %v1, %c1, %m1, %m2, %m3, %m4, %a2 : tensor<6x4xf32>, tensor<3xf32>, tensor<18x4xf32>, tensor<2x4xf32>, tensor<6x4xf32>, tensor<3x2x2xf32>, tensor<3xi64>, tensor<6xf16>, tensor<6xi64>, tensor<3xf32>, tensor<2x3xbf16>, tensor<6x4xf32>
  }
}
"""


def _mpi_run(n: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI_LOCAL"))}
    argv = [*mpiexec_argv(n), sys.executable, "-m", "lancet_mlir.tools.lancet_run", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.serial
@pytest.mark.timeout(300)
def test_three_mpi_ranks_with_groups_equal_simulated_ranks(tmp_path: Path) -> None:
    src = tmp_path / "w3.mlir"
    src.write_text(THREE_RANKS)
    sim = execute(load_module(str(src)).module, ranks=3).flat()
    x = _inputs(src, 3)
    # hand-checked: rank 0 is member 1 of [[2, 0, 1]], so it gets chunk 1 of ranks 2, 0, 1
    chunk = [np.split(x[r][0], 3)[1] for r in (2, 0, 1)]
    np.testing.assert_array_equal(sim["rank0/11"], np.concatenate(chunk))
    np.testing.assert_array_equal(sim["rank1/9"], x[1][1])  # a group of one: unchanged
    proc = _mpi_run(3, str(src), "--save", str(tmp_path / "mpi.npz"))
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "mpi.npz") as mpi:
        assert sorted(mpi.files) == sorted(sim)
        for key, want in sim.items():
            assert mpi[key].dtype == want.dtype, key
            np.testing.assert_allclose(mpi[key], want, rtol=1e-6, err_msg=key)


def _inputs(src: Path, n: int) -> list[list[np.ndarray]]:
    from lancet_mlir.runtime.executor import function_inputs, select_function

    func = select_function(load_module(str(src)).module)
    return [function_inputs(func, seed=0, rank=r) for r in range(n)]


@pytest.mark.serial
@pytest.mark.timeout(300)
def test_generated_top2_sgd_f16_model_on_three_mpi_ranks(tmp_path: Path) -> None:
    model = tmp_path / "m.mlir"
    gen = run_tool(["lancet-model", "gpt2-moe", "--layers", "2", "--hidden", "32", "--heads", "2",
                    "--seq", "8", "--batch", "2", "--world-size", "3", "--vocab", "64",
                    "--gate", "top2", "--optimizer", "sgd", "--dtype", "f16", "-o", str(model)])  # fmt: skip
    assert gen.returncode == 0, gen.stderr
    sim = execute(load_module(str(model)).module, ranks=3).flat()
    assert all(np.all(np.isfinite(v.astype(np.float64))) for v in sim.values())
    proc = _mpi_run(3, str(model), "--save", str(tmp_path / "mpi.npz"))
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "mpi.npz") as mpi:
        assert sorted(mpi.files) == sorted(sim)
        for key, want in sim.items():  # MPI may reduce in another order: f16 tolerance
            np.testing.assert_allclose(mpi[key].astype(np.float64), want.astype(np.float64),
                                       rtol=2e-3, atol=1e-4, err_msg=key)  # fmt: skip
