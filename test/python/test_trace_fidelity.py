"""Cost-model fidelity classes on a hand-written Kineto trace (importers/traces/fidelity.py).

One V100 step (old schema: kernels find their ATen op by time nesting of the launch):
* aten::mm 16x512 @ 512x512 f32, launched as two kernels (split-K: a GEMM and its reduce),
  measured 13 + 6 us;
* an fbgemm embedding kernel whose Input Dims name a 2^20-row table;
* a cuDNN convolution run by a GEMM-named kernel (its Input Dims are not a GEMM's).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lancet_mlir.cost.devices import get_device
from lancet_mlir.importers.traces import load_steps
from lancet_mlir.importers.traces.fidelity import (
    copy_traffic_factor,
    gemm_dtype,
    gemm_groups,
    model_durations,
    op_class,
)
from lancet_mlir.importers.traces.report import replay_steps
from lancet_mlir.tools import lancet_trace


def _trace(path: Path) -> Path:
    ev: list[dict] = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 200,
            "args": {},
        }
    ]
    ops = [  # (ATen op, Input Dims, Input type, [(kernel, measured us)])
        (
            "aten::mm",
            [[16, 512], [512, 512]],
            ["float", "float"],
            [("volta_sgemm_64x32_sliced1x4_nn", 13.0), ("splitKreduce_kernel", 6.0)],
        ),
        (
            "fbgemm::split_embedding_codegen_lookup_adagrad_function",
            [[1048576, 64], [768]],
            ["float", "long int"],
            [("void fbgemm_gpu::split_embedding_codegen_forward_kernel", 7.0)],
        ),
        (
            "aten::cudnn_convolution",
            [[8, 3, 32, 32], [16, 3, 3, 3]],
            ["float", "float"],
            [("volta_sgemm_32x128_nn", 50.0)],
        ),
    ]
    t, gpu, corr = 10.0, 20.0, 0
    for name, dims, types, kernels in ops:
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": t,
                "dur": 2.0 * len(kernels) + 1,
                "args": {"Input Dims": dims, "Input type": types},
            }
        )
        for kname, dur in kernels:
            corr += 1
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 0.5,
                    "dur": 1,
                    "args": {"correlation": corr, "External id": corr},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": kname,
                    "pid": 0,
                    "tid": 7,
                    "ts": gpu,
                    "dur": dur,
                    "args": {"stream": 7, "correlation": corr, "External id": corr, "device": 0},
                }
            )
            t += 2.0
            gpu += dur
        t += 1.0
    return _write_v100_trace(path, ev)


def _write_v100_trace(path: Path, events: list[dict]) -> Path:
    """Write `events` as a one-rank V100 Kineto trace at `path`."""
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-32GB"}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "traceEvents": events,
    }
    path.write_text(json.dumps(doc))
    return path


def test_classes_and_split_k_gemm(tmp_path: Path) -> None:
    """The two split-K kernels are one GEMM: one estimate (17.8 us, the V100's matmul floor
    5 us + 0.025 us x K = 512 of serial K loop: 8.4 MFLOP at 0.75 x 15.7 TFLOP/s is 0.71 us,
    1.1 MB at 0.8 x 900 GB/s is 1.5 us) against 13 + 6 us, each kernel replayed at 8.9 us;
    the fbgemm and cuDNN kernels are not GEMMs with shapes and keep their measured times."""
    st = load_steps([str(_trace(tmp_path / "t.json"))])[0]
    assert [op_class(st, j) for j in range(4)] == ["gemm", "gemm", "embedding", "gemm_unshaped"]
    assert gemm_groups(st) == {0: [0, 1], 1: [0, 1]}
    durations, fid = model_durations([st], None)
    assert get_device("v100").min_matmul_us == 5.0
    assert get_device("v100").matmul_k_step_us == 0.025
    assert durations == [[8.9, 8.9, 7.0, 50.0]]
    assert fid["classes"] == {
        "gemm": {
            "count": 1,
            "median_ratio": round(17.8 / 19.0, 4),
            "p90_ratio": round(17.8 / 19.0, 4),
        }
    }
    assert fid["unmodeled"] == {"embedding": 1, "gemm_unshaped": 1}


@pytest.mark.parametrize(
    ("itype", "kernel", "dtype"),
    [
        ("float", "cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4", "tf32"),
        ("float", "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16", "tf32"),
        ("float", "ampere_sgemm_128x64_nn", "f32"),
        ("c10::BFloat16", "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_nn", "bf16"),
        ("c10::Half", "volta_h884gemm_64x64_nn", "f16"),
    ],
)
def test_gemm_dtype_from_kernel(itype: str, kernel: str, dtype: str) -> None:
    """f32 inputs on a TF32 tensor-core kernel are costed as tf32; other dtypes are the inputs'."""
    assert gemm_dtype(itype, kernel) == dtype


def _copy_trace(path: Path, names: dict[str, str] | None = None) -> Path:
    """One V100 step of copies (old schema: a copy finds its ATen op by time nesting):
    (ATen op, Input Dims, Input type, [(category, activity name, measured us, args.bytes)]);
    `names` renames activities (first match of each old name, in order)."""
    ops = [
        (  # an embedding op clearing a 4 KiB buffer: its Input Dims name a 256 MiB table
            "fbgemm::split_embedding_codegen_lookup_adagrad_function",
            [[1048576, 64], [768]],
            ["float", "long int"],
            [
                ("gpu_memset", "Memset (Device)", 2.0, 4096),
                ("gpu_memset", "Memset (Device)", 3.0, None),
            ],
        ),
        (  # a copy op without the activity's bytes: the destination's 4 MiB
            "aten::copy_",
            [[1024, 1024], [1024, 1024]],
            ["float", "float"],
            [("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 10.0, None)],
        ),
        (  # the activity's own bytes win over the op's Input Dims
            "aten::to",
            [[10]],
            ["float"],
            [("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 20.0, 7_200_000)],
        ),
    ]
    ev: list[dict] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 200, "args": {}}
    ]  # fmt: skip
    t, gpu, corr = 10.0, 20.0, 0
    for name, dims, types, acts in ops:
        ev.append(
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": t,
             "dur": 2.0 * len(acts) + 1, "args": {"Input Dims": dims, "Input type": types}}
        )  # fmt: skip
        for cat, aname, dur, nbytes in acts:
            if names and aname in names:
                aname = names.pop(aname)
            corr += 1
            call = "cudaMemsetAsync" if cat == "gpu_memset" else "cudaMemcpyAsync"
            ev.append(
                {"ph": "X", "cat": "cuda_runtime", "name": call, "pid": 1, "tid": 1,
                 "ts": t + 0.5, "dur": 1, "args": {"correlation": corr, "External id": corr}}
            )  # fmt: skip
            args = {"stream": 7, "correlation": corr, "External id": corr, "device": 0}
            if nbytes is not None:
                args["bytes"] = nbytes
            ev.append(
                {"ph": "X", "cat": cat, "name": aname, "pid": 0, "tid": 7, "ts": gpu,
                 "dur": dur, "args": args}
            )  # fmt: skip
            t += 2.0
            gpu += dur
        t += 1.0
    return _write_v100_trace(path, ev)


def test_copy_bytes_are_the_copys_own(tmp_path: Path) -> None:
    """A copy's bytes are its activity's `bytes`, else a copy ATen op's first input, never
    another op's inputs (review of #19, finding 4: a memset launched inside an embedding op
    was costed at the 256 MiB table, 268435456 B / (0.8 x 900 GB/s) = 372.8 us against 2 us).
    V100 memory roofline at 0.8 x 900 GB/s = 720 GB/s, floor 2 us:
    * the embedding's memset of 4096 B: 0.0057 us -> the 2 us floor (measured 2: 1.0x);
    * its memset without `bytes`: no estimate, keeps its measured 3 us;
    * copy_ of 1024 x 1024 f32 (4194304 B), device to device: it reads and writes them,
      2 x 4194304 / 720e9 = 11.6508 us against 10 (1.1651x; review 20, finding 8);
    * the 7.2 MB HtoD copy of a 10-element `to`: its bytes once over HBM (no PCIe model),
      7.2e6 / 720e9 = 10 us against 20 (0.5x)."""
    st = load_steps([str(_copy_trace(tmp_path / "c.json"))])[0]
    assert [i.kind for i in st.info] == ["memset", "memset", "memcpy", "memcpy"]
    assert [i.copy_bytes for i in st.info] == [4096, None, None, 7_200_000]
    assert [i.cpu_op.name for i in st.info if i.cpu_op is not None][2:] == [
        "aten::copy_",
        "aten::to",
    ]
    durations, fid = model_durations([st], None)
    copy_us = 2 * 4194304 / 720e9 * 1e6
    assert copy_us == pytest.approx(11.6508, abs=1e-4)
    assert durations[0] == pytest.approx([2.0, 3.0, copy_us, 10.0])
    assert fid["classes"] == {
        "memcpy": {"count": 2, "median_ratio": 0.5, "p90_ratio": round(copy_us / 10.0, 4)},
        "memset": {"count": 1, "median_ratio": 1.0, "p90_ratio": 1.0},
    }
    assert fid["unmodeled"] == {"memset": 1}


@pytest.mark.parametrize(
    ("name", "factor"),
    [
        ("Memcpy DtoD (Device -> Device)", 2),
        ("Memcpy AtoA (Array -> Array)", 2),
        ("Memcpy PtoP (Device -> Device)", 1),
        ("Memcpy HtoD (Pageable -> Device)", 1),
        ("Memcpy DtoH (Device -> Pinned)", 1),
        ("Memset (Device)", 1),
        ("Memcpy", 1),
    ],
)
def test_copy_traffic_factor(name: str, factor: int) -> None:
    """A copy within one GPU's memory reads and writes its bytes (2x); a memset writes them, a
    host copy moves them once over HBM and a peer copy once on each GPU (1x)."""
    assert copy_traffic_factor(name) == factor


def test_copies_of_unknown_direction_are_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy whose name says no direction goes to the shared copy queue as before, but the
    import counts it: the report's `copies_of_unknown_direction` and flag name it, and import
    and replay warn once on stderr (review of #19, finding 7). The known names (HtoD, DtoD,
    Memset) are not counted."""
    path = _copy_trace(
        tmp_path / "u.json", {"Memset (Device)": "Memcpy", "Memcpy HtoD (Pinned -> Device)": "cpy"}
    )
    flag = (
        "unknown_copy_direction: 2 memcpy/memset activities named with no known direction "
        "('Memcpy', 'cpy') go to the shared copy queue (device to device, memset): their queue "
        "is a guess"
    )
    st = load_steps([str(path)])[0]
    assert st.unknown_copies == {"Memcpy": 1, "cpy": 1}
    report = replay_steps([st])
    assert report["copies_of_unknown_direction"] == 2
    assert report["flags"][0] == flag
    assert capsys.readouterr().err == f"lancet-trace: warning: {path}: {flag}\n"
    for cmd in (["import", str(path), "-o", str(tmp_path / "u.mlir")], ["replay", str(path)]):
        with pytest.raises(SystemExit) as info:
            lancet_trace.main(cmd)
        assert info.value.code == 0
        assert capsys.readouterr().err.splitlines() == [f"lancet-trace: warning: {path}: {flag}"]
    # the named copies are not flagged
    known = load_steps([str(_copy_trace(tmp_path / "k.json"))])[0]
    assert known.unknown_copies == {}
    assert replay_steps([known])["copies_of_unknown_direction"] == 0


def test_a_collective_without_a_group_size_is_unmodeled() -> None:
    """review20/chakra_comm.json (second pass of review 20): a Chakra kernel and a 1 MiB
    all-reduce; Chakra states no world or group size, so the comm table cannot price the
    all-reduce. It was reported as estimated at 0 µs (NCCL ratio 0.0); it is counted as
    unmodeled (the replay keeps its measured 30 µs), and the elementwise kernel too."""
    from lancet_mlir.importers.traces import load_steps
    from lancet_mlir.importers.traces.report import replay_steps

    trace = (
        Path(__file__).resolve().parents[1] / "data" / "traces" / "review20" / "chakra_comm.json"
    )
    rep = replay_steps(load_steps([str(trace)]))
    assert rep["predicted_period_us"] == 40.0
    out = subprocess.run(
        [sys.executable, "-m", "lancet_mlir.tools.lancet_trace", "replay",
         str(trace), "--costs", "model", "--device", "h100",
         "--report", "-"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    model = json.loads(out.stdout)["cost_model"]
    assert model["classes"] == {}
    assert model["unmodeled"] == {"elementwise": 1, "nccl": 1}
