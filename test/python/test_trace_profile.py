"""lancet-profile from-kineto: measured GPU time per ATen op, keyed like op keys (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lancet_mlir.tools import lancet_profile

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


def test_from_kineto_keys_and_times(tmp_path: Path) -> None:
    out = tmp_path / "prof.json"
    with pytest.raises(SystemExit) as info:
        lancet_profile.main(["from-kineto", str(DATA / "host_bound.json"), "-o", str(out)])
    assert info.value.code == 0
    doc = json.loads(out.read_text())
    # aten::mm (9..17) launched gemm_a (10 us); the two adds have no cpu_op: not profiled
    assert doc["entries"] == {
        "aten::mm;T<64x64xf32>,T<64x64xf32>,|": {
            "mean_us": 10.0,
            "count": 1,
            "std_us": 0.0,
            "min_us": 10.0,
            "max_us": 10.0,
        },
        "comp.matmul;T<64x64xf32>,T<64x64xf32>,|T<64x64xf32>": {
            "mean_us": 10.0,
            "count": 1,
            "std_us": 0.0,
            "min_us": 10.0,
            "max_us": 10.0,
        },
    }
    assert doc["metadata"]["device"] == "v100"


def test_from_kineto_dlrm_covers_the_aten_ops(tmp_path: Path) -> None:
    out = tmp_path / "prof.json"
    with pytest.raises(SystemExit) as info:
        lancet_profile.main(
            ["from-kineto", str(DATA / "dlrm" / "worker0.pt.trace.json.gz"), "-o", str(out)]
        )
    assert info.value.code == 0
    doc = json.loads(out.read_text())
    assert len(doc["entries"]) > 50
    mm = [k for k in doc["entries"] if k.startswith("aten::mm;")]
    assert mm
    assert all(e["mean_us"] > 0 for e in doc["entries"].values())


def _importer_matmul_key(fn, dims: list[list[int]]) -> str:
    """The profile key of the matmul-like op (comp.matmul / comp.batch_matmul, or the aten.op
    of an addmm) the PyTorch importer makes of `fn` on f32 tensors of `dims` (make_fx)."""
    torch = pytest.importorskip("torch")
    from torch.fx.experimental.proxy_tensor import make_fx

    from lancet_mlir.cost.keys import op_key
    from lancet_mlir.importers.torch.importer import import_fx

    gm = make_fx(fn, tracing_mode="fake")(*[torch.randn(*d) for d in dims])
    ops = import_fx(gm, world_size=1).body.ops
    keys = [
        op_key(op)
        for op in ops
        if op.name in ("comp.matmul", "comp.batch_matmul")
        or (getattr(op, "target", None) is not None and "addmm" in op.target.data)
    ]
    assert len(keys) == 1
    return keys[0]


MATMULS = [  # (Kineto op name, the same call in PyTorch, Input Dims, the importer's key)
    ("aten::mm", "mm", [[16, 64], [64, 32]], "comp.matmul;T<16x64xf32>,T<64x32xf32>,|T<16x32xf32>"),
    ("aten::bmm", "bmm", [[4, 16, 64], [4, 64, 32]],
     "comp.batch_matmul;T<4x16x64xf32>,T<4x64x32xf32>,|T<4x16x32xf32>"),
    ("aten::addmm", "addmm", [[32], [16, 64], [64, 32]],
     "aten.addmm.default;T<32xf32>,T<16x64xf32>,T<64x32xf32>,|T<16x32xf32>"),
    # linear: make_fx writes t(W), then addmm(bias, x, W^T) / mm(x, W^T), x flattened to 2-D
    ("aten::linear", "linear", [[16, 64], [32, 64], [32]],
     "aten.addmm.default;T<32xf32>,T<16x64xf32>,T<64x32xf32>,|T<16x32xf32>"),
    ("aten::linear", "linear", [[4, 16, 64], [32, 64], [32]],
     "aten.addmm.default;T<32xf32>,T<64x64xf32>,T<64x32xf32>,|T<64x32xf32>"),
    ("aten::linear", "linear", [[4, 16, 64], [32, 64]],
     "comp.matmul;T<64x64xf32>,T<64x32xf32>,|T<64x32xf32>"),
    ("aten::matmul", "matmul", [[4, 16, 64], [64, 32]],
     "comp.matmul;T<64x64xf32>,T<64x32xf32>,|T<64x32xf32>"),
    ("aten::matmul", "matmul", [[4, 16, 64], [4, 64, 32]],
     "comp.batch_matmul;T<4x16x64xf32>,T<4x64x32xf32>,|T<4x16x32xf32>"),
]  # fmt: skip


@pytest.mark.parametrize(("aten", "call", "dims", "key"), MATMULS)
def test_matmul_keys_are_the_pytorch_importers(
    aten: str, call: str, dims: list[list[int]], key: str
) -> None:
    """from-kineto keys a matmul-like ATen call as the op the PyTorch importer makes of the
    same call (review of #19: addmm and linear had no such key)."""
    torch = pytest.importorskip("torch")
    from lancet_mlir.importers.traces.profile import aten_keys

    fn = {
        "mm": torch.mm,
        "bmm": torch.bmm,
        "addmm": torch.addmm,
        "linear": torch.nn.functional.linear,
        "matmul": torch.matmul,
    }[call]
    assert _importer_matmul_key(fn, dims) == key
    types = ["float"] * len(dims)
    assert aten_keys(aten, {"Input Dims": dims, "Input type": types})[1:] == [key]


def _addmm_trace(path: Path) -> Path:
    """A V100 step with one aten::addmm (bias 32, 16x64 @ 64x32 f32, new schema: the kernel
    names the cpu_op by External id) launching a 7 us GEMM kernel."""
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 50, "args": {}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 5,
         "dur": 8, "args": {"External id": 100, "Input Dims": [[32], [16, 64], [64, 32]],
                            "Input type": ["float", "float", "float"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 6, "dur": 4, "args": {"correlation": 1, "External id": 100}},
        {"ph": "X", "cat": "kernel", "name": "volta_sgemm_32x32_sliced1x4_nn", "pid": 0,
         "tid": 7, "ts": 12, "dur": 7, "args": {"stream": 7, "correlation": 1,
                                                "External id": 100, "device": 0}},
    ]  # fmt: skip
    path.write_text(
        json.dumps(
            {
                "schemaVersion": 1,
                "deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-32GB"}],
                "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
                "traceEvents": ev,
            }
        )
    )
    return path


def test_addmm_profile_costs_the_imported_linear(tmp_path: Path) -> None:
    """A trace's addmm time costs the same op of an imported PyTorch model: F.linear(x, W, b)
    imports as comp.transpose + the addmm's aten.op, whose key from-kineto writes with the
    measured 7 us; lancet-schedule with that profile simulates that op at 7 us (its roofline
    estimate from FLOPs and bytes would be another time)."""
    torch = pytest.importorskip("torch")
    from torch.fx.experimental.proxy_tensor import make_fx
    from xdsl.printer import Printer

    from lancet_mlir.importers.torch.importer import import_fx
    from lancet_mlir.tools import lancet_opt

    prof = tmp_path / "prof.json"
    with pytest.raises(SystemExit) as info:
        lancet_profile.main(
            ["from-kineto", str(_addmm_trace(tmp_path / "t.json")), "-o", str(prof)]
        )
    assert info.value.code == 0
    key = "aten.addmm.default;T<32xf32>,T<16x64xf32>,T<64x32xf32>,|T<16x32xf32>"
    entries = json.loads(prof.read_text())["entries"]
    assert entries[key]["mean_us"] == 7.0
    assert entries["aten::addmm;T<32xf32>,T<16x64xf32>,T<64x32xf32>,|"]["mean_us"] == 7.0

    gm = make_fx(torch.nn.functional.linear, tracing_mode="fake")(
        torch.randn(16, 64), torch.randn(32, 64), torch.randn(32)
    )
    module = tmp_path / "linear.mlir"
    with module.open("w") as f:
        Printer(stream=f).print_op(import_fx(gm, world_size=1).module)
    timeline = tmp_path / "tl.json"
    args = [str(module), "--device", "v100", "-p", "lancet-schedule", "--timeline", str(timeline)]
    with pytest.raises(SystemExit) as info:
        lancet_opt.main([*args, "--profile", str(prof), "-o", str(tmp_path / "out.mlir")])
    assert info.value.code == 0
    events = json.loads(timeline.read_text())["traceEvents"]
    times = {e["args"]["op_key"]: e["dur"] for e in events if "op_key" in e.get("args", {})}
    assert times[key] == 7.0


@pytest.mark.parametrize(
    ("trace", "message"),
    [
        # a Chakra trace carries durations, no ATen ops with input shapes
        ("chakra_feeder.0.et.gz", "a Chakra trace has no ATen ops with input shapes"),
        # comm_overlap.json's kernels are launched with no cpu_op around them
        ("comm_overlap.json", "no GPU kernel of step 1 is linked to an ATen op (a cpu_op event)"),
    ],
)
def test_from_kineto_refuses_a_trace_with_nothing_to_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], trace: str, message: str
) -> None:
    """Before, both wrote an empty profile and exited 0."""
    out = tmp_path / "prof.json"
    with pytest.raises(SystemExit) as info:
        lancet_profile.main(["from-kineto", str(DATA / trace), "-o", str(out)])
    assert info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0] == f"lancet-profile: error: {DATA / trace}: {message}: " + (
        "from-kineto needs a PyTorch profiler (Kineto) trace" if trace.endswith(".gz")
        else "nothing to profile"
    )  # fmt: skip
    assert not out.exists()
