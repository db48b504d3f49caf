"""`lancet-profile measure`: real measurements of every op key (cpu), the cuda back-end's
error without a GPU, and its kernel loading (the registry with CuPy in place of numpy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from lancet_mlir.cost.keys import op_key
from lancet_mlir.cost.profile_db import ProfileDB
from lancet_mlir.dialects.comm import CollectiveOp
from lancet_mlir.dialects.kernels import KERNELS
from lancet_mlir.measure.cuda_backend import gpu_status
from lancet_mlir.measure.measure import catalog_ops, measure_module, synthetic_inputs
from lancet_mlir.measure.numpy_backend import NumpyBackend
from lancet_mlir.runtime.loader import load_module, parse_module_text
from lancet_mlir.support.mpi_util import mpiexec_argv

DATA = Path(__file__).resolve().parents[1] / "data" / "runtime"
BIN = Path(sys.executable).parent


def _compute_keys(module) -> set[str]:
    from xdsl.traits import IsTerminator

    return {
        op_key(op)
        for op in module.walk()
        if not op.regions and not op.has_trait(IsTerminator) and not isinstance(op, CollectiveOp)
    }


def _models():
    yield load_module(str(DATA / "moe_step_w4.mlir")).module
    from lancet_mlir.models.gpt2_moe import GPT2MoEConfig, build_gpt2_moe

    yield build_gpt2_moe(GPT2MoEConfig(layers=2, hidden=16, heads=2, seq=8, batch=2, world_size=2,
                                       experts_per_rank=2, vocab=32))  # fmt: skip


def test_cpu_profile_covers_every_compute_op_key() -> None:
    for module in _models():
        db, cat = measure_module(module, NumpyBackend(), warmup=1, iters=4, seed=0)
        assert set(db.entries) == _compute_keys(module)
        assert cat.collectives
        assert all(k.startswith("comm.") for k in cat.collectives)
        assert not set(cat.collectives) & set(db.entries)
        for key, entry in db.entries.items():
            # floor(4 * 0.0625) = 0 samples trimmed at each end; outliers are rejected first
            assert entry.count + db.metadata["key_stats"][key]["rejected"] == 4
            assert 0 < entry.min_us <= entry.mean_us <= entry.max_us
        assert db.metadata["backend"] == "cpu"
        assert db.metadata["device"] == "cpu"


def test_measured_times_reflect_the_work() -> None:
    """A 256x256x256 matmul takes longer than a 4x4x4 one (real measurements, not constants)."""
    text = """
    func.func @f(%a: tensor<4x4xf32>, %b: tensor<256x256xf32>) -> (tensor<4x4xf32>, tensor<256x256xf32>) {
      %x = comp.matmul %a, %a : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
      %y = comp.matmul %b, %b : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
      func.return %x, %y : tensor<4x4xf32>, tensor<256x256xf32>
    }"""
    db, _ = measure_module(parse_module_text(text).module, NumpyBackend(), warmup=2, iters=10)
    small = db.mean_us("comp.matmul;T<4x4xf32>,T<4x4xf32>,|T<4x4xf32>")
    big = db.mean_us("comp.matmul;T<256x256xf32>,T<256x256xf32>,|T<256x256xf32>")
    assert small is not None
    assert big is not None
    assert big > small


def test_synthetic_integer_inputs_are_valid_indices() -> None:
    text = """
    func.func @f(%t: tensor<5x3xf32>, %ids: tensor<64xi64>, %l: tensor<64x7xf32>, %lab: tensor<64xi64>) -> (tensor<64x3xf32>, tensor<f32>) {
      %e = comp.embedding %t, %ids : (tensor<5x3xf32>, tensor<64xi64>) -> tensor<64x3xf32>
      %c = comp.cross_entropy %l, %lab : (tensor<64x7xf32>, tensor<64xi64>) -> tensor<f32>
      func.return %e, %c : tensor<64x3xf32>, tensor<f32>
    }"""
    module = parse_module_text(text).module
    ops = [op for op in module.walk() if op.name in ("comp.embedding", "comp.cross_entropy")]
    ids = synthetic_inputs(ops[0], seed=0)[1]
    assert ids.min() >= 0
    assert ids.max() < 3
    labels = synthetic_inputs(ops[1], seed=0)[1]
    assert labels.min() >= 0
    assert labels.max() < 7
    db, _ = measure_module(module, NumpyBackend(), warmup=0, iters=2)
    assert len(db) == 2


def test_catalog_lists_ops_without_kernels() -> None:
    text = """
    func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
      %x = "test.op"(%a) {lancet.time_us = 1.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
      %y = comm.allreduce %x : (tensor<4xf32>) -> tensor<4xf32>
      %z = comp.add %y, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      func.return %z : tensor<4xf32>
    }"""
    cat = catalog_ops(parse_module_text(text).module)
    assert list(cat.measurable) == ["comp.add;T<4xf32>,T<4xf32>,|T<4xf32>"]
    assert cat.collectives == ["comm.allreduce;T<4xf32>,|T<4xf32>"]
    assert cat.unsupported == ["test.op;T<4xf32>,|T<4xf32>"]


def _profile_cli(*args: str, mpi: int | None = None) -> subprocess.CompletedProcess[str]:
    prefix = mpiexec_argv(mpi) if mpi else []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI_LOCAL"))}
    argv = [*prefix, sys.executable, "-m", "lancet_mlir.tools.lancet_profile", "measure", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def test_measure_cli_writes_a_profile(tmp_path: Path) -> None:
    out = tmp_path / "prof.json"
    proc = _profile_cli(str(DATA / "moe_step_w1.mlir"), "--backend", "cpu", "--iters", "3",
                        "--warmup", "1", "-o", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    db = ProfileDB.load(out)
    assert set(db.entries) == _compute_keys(load_module(str(DATA / "moe_step_w1.mlir")).module)
    assert db.metadata["world_size"] == 1
    assert db.metadata["iters"] == 3
    assert "collective op key(s) not measured by the cpu back-end" in proc.stderr


@pytest.mark.serial
@pytest.mark.timeout(300)
def test_measure_under_mpi_averages_the_ranks(tmp_path: Path) -> None:
    out = tmp_path / "prof.json"
    proc = _profile_cli(str(DATA / "moe_step_w1.mlir"), "--backend", "cpu", "--iters", "2",
                        "--warmup", "0", "-o", str(out), mpi=2)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["metadata"]["synced_ranks"] == 2
    assert all(e["count"] == 4 for e in doc["entries"].values())  # 2 samples from each rank


@pytest.mark.skipif(
    gpu_status()[0] > 0, reason="a CUDA GPU is present: the no-GPU error does not apply"
)
def test_cuda_backend_without_gpu_is_one_clear_error(tmp_path: Path) -> None:
    out = tmp_path / "prof.json"
    proc = _profile_cli(str(DATA / "moe_step_w1.mlir"), "--backend", "cuda", "-o", str(out))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("lancet-profile: error: --backend cuda: no CUDA GPU available (")
    assert not out.exists()


@pytest.mark.parametrize(
    "name", ["matmul", "moe_gate", "layer_norm_dx", "embedding_dw", "adam_update"]
)
def test_reference_kernels_with_another_array_namespace_compute_the_same(name: str) -> None:
    """The cuda back-end passes CuPy as `xp`; checked here with a namespace copied from numpy
    against what the numpy measurement back-end runs."""
    from lancet_mlir.dialects.comp import kernel_params
    from lancet_mlir.measure.numpy_backend import NumpyBackend
    from lancet_mlir.runtime.kernels import run_kernel

    other_xp = types.SimpleNamespace(**vars(np))
    text = """
    func.func @f(%a: tensor<6x4xf32>, %g: tensor<4xf32>, %ids: tensor<6xi64>) -> (tensor<6x4xf32>, tensor<6x4x3xf32>, tensor<6x4x3xf32>, tensor<6x4xf32>, tensor<5x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>) {
      %m = comp.matmul %a, %a {transpose_b = true} : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x6xf32>
      %c, %d = comp.moe_gate %a {capacity = 3 : i64, gate = "top2"} : (tensor<6x4xf32>) -> (tensor<6x4x3xf32>, tensor<6x4x3xf32>)
      %l = comp.layer_norm_dx %a, %a, %g : (tensor<6x4xf32>, tensor<6x4xf32>, tensor<4xf32>) -> tensor<6x4xf32>
      %e = comp.embedding_dw %a, %ids {num_embeddings = 5 : i64} : (tensor<6x4xf32>, tensor<6xi64>) -> tensor<5x4xf32>
      %p, %q, %r = comp.adam_update %a, %a, %a, %a {step = 2 : i64} : (tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> (tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
      func.return %a, %c, %d, %l, %e, %p, %q, %r : tensor<6x4xf32>, tensor<6x4x3xf32>, tensor<6x4x3xf32>, tensor<6x4xf32>, tensor<5x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>
    }"""
    ops = {
        op.name[5:]: op
        for op in parse_module_text(text).module.walk()
        if op.name.startswith("comp.")
    }
    op = ops[name]
    inputs = synthetic_inputs(op, seed=4)
    params = kernel_params(op)
    want = NumpyBackend().prepare(op, inputs)()
    got = run_kernel(KERNELS[name], inputs, params, xp=other_xp)
    assert len(want) == len(got) >= 1
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(w, g)
    assert np.abs(want[0]).sum() > 0


class _DeviceArray(np.ndarray):
    """Stands for a CuPy array: only the fake namespace below makes these."""


def test_cuda_backend_prepare_runs_the_kernel_with_its_array_namespace() -> None:
    """CudaBackend.prepare (no GPU needed): inputs go to the device through the back-end's
    namespace, the reference kernel runs with `xp` = that namespace inside its stream, and
    computes what the numpy back-end computes."""
    from lancet_mlir.measure.cuda_backend import CudaBackend

    entered: list[str] = []
    fake = types.SimpleNamespace(**vars(np))
    fake.asarray = lambda a, dtype=None: np.asarray(a, dtype=dtype).view(_DeviceArray)

    class Stream:  # reusable, like cupy.cuda.ExternalStream
        def __enter__(self) -> None:
            entered.append("enter")

        def __exit__(self, *exc: object) -> None:
            entered.append("exit")

    backend = object.__new__(CudaBackend)  # skip the CUDA runtime set-up of __init__
    backend._cupy = fake
    backend._cupy_stream = Stream()
    text = """
    func.func @f(%a: tensor<6x4xf32>, %b: tensor<5x4xf32>) -> tensor<6x5xf32> {
      %m = comp.matmul %a, %b {transpose_b = true} : (tensor<6x4xf32>, tensor<5x4xf32>) -> tensor<6x5xf32>
      func.return %m : tensor<6x5xf32>
    }"""
    (op,) = [o for o in parse_module_text(text).module.walk() if o.name == "comp.matmul"]
    inputs = synthetic_inputs(op, seed=5)
    run = backend.prepare(op, inputs)
    assert entered == ["enter", "exit"]  # the inputs were copied on the stream
    (got,) = run()
    (want,) = NumpyBackend().prepare(op, inputs)()
    assert isinstance(got, _DeviceArray)
    assert got.shape == (6, 5)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    assert entered == ["enter", "exit"] * 2


@pytest.mark.skipif(gpu_status()[0] == 0, reason=f"no CUDA GPU: {gpu_status()[1]}")
def test_cuda_backend_measures_on_the_gpu() -> None:
    pytest.importorskip("cupy", reason="CuPy (extra 'gpu') is not installed")
    from lancet_mlir.measure.cuda_backend import CudaBackend

    backend = CudaBackend.for_rank(0)
    module = load_module(str(DATA / "moe_step_w1.mlir")).module
    db, _ = measure_module(module, backend, warmup=2, iters=5)
    assert set(db.entries) == _compute_keys(module)
    assert all(e.mean_us > 0 for e in db.entries.values())
    assert db.metadata["backend"] == "cuda"
    backend.close()


@pytest.mark.serial
def test_measure_under_mpi_with_rank_in_output_writes_one_profile_per_rank(tmp_path: Path) -> None:
    pattern = str(tmp_path / "prof.{rank}.json")
    proc = _profile_cli(str(DATA / "moe_step_w1.mlir"), "--iters", "2", "--warmup", "0",
                        "-o", pattern, mpi=2)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prof.0.json", "prof.1.json"]
    for rank in (0, 1):
        doc = json.loads((tmp_path / f"prof.{rank}.json").read_text())
        assert "synced_ranks" not in doc["metadata"]  # each rank's own, not averaged
        assert all(e["count"] <= 2 for e in doc["entries"].values())
