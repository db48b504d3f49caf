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
