"""Trace formats besides Kineto: PyTorch execution traces (data dependencies), Chakra `.et`
(protobuf wire format, encoded here by hand) and Chakra JSON (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lancet_mlir.importers.traces import load_steps
from lancet_mlir.importers.traces.report import replay_steps
from lancet_mlir.tools import lancet_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


# ---- a tiny protobuf encoder (the wire format of mlcommons/chakra et_def.proto) ----------------
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return _varint(num << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _attr(name: str, value: int | bool) -> bytes:
    body = _field(1, name) + (
        _field(27, int(value)) if isinstance(value, bool) else _field(9, value)
    )
    return _field(10, body)


def _node(
    nid: int, name: str, ntype: int, dur: int, data_deps=(), ctrl_deps=(), **attrs: int | bool
) -> bytes:
    body = _field(1, nid) + _field(2, name) + _field(3, ntype)
    if ctrl_deps:  # packed repeated
        body += _field(4, b"".join(_varint(d) for d in ctrl_deps))
    for d in data_deps:  # unpacked repeated
        body += _field(5, d)
    body += _field(7, dur)
    for k, v in attrs.items():
        body += _attr(k, v)
    return body


def _delimited(messages: list[bytes]) -> bytes:
    return b"".join(_varint(len(m)) + m for m in messages)


# kernel A (stream 7, 10 us) -> CPU op C -> all-reduce B (stream 14, 5 us, 4096 bytes); kernel D
# (stream 7, 3 us) after A. GPU-only replay: A 0..10, D 10..13, B 10..15 (waits for A via C)
NODES = [
    (1, "kernelA", 4, 10, (), (), {"is_cpu_op": False, "tid": 7}),
    (2, "aten::cpu_thing", 4, 50, (1,), (), {"is_cpu_op": True, "tid": 1}),
    (
        3,
        "ncclKernel_AllReduce",
        7,
        5,
        (2,),
        (),
        {"is_cpu_op": False, "tid": 14, "comm_type": 0, "comm_size": 4096},
    ),
    (4, "kernelD", 4, 3, (), (), {"is_cpu_op": False, "tid": 7}),
]


def _chakra_binary(path: Path) -> None:
    meta = _field(1, "0.0.4")
    path.write_bytes(
        _delimited([meta] + [_node(i, n, t, d, dd, cd, **a) for i, n, t, d, dd, cd, a in NODES])
    )


def _chakra_json(path: Path, cycle: bool = False) -> None:
    nodes = []
    for i, n, t, d, dd, cd, a in NODES:
        attr = [
            {"name": k, ("bool_val" if isinstance(v, bool) else "int64_val"): v}
            for k, v in a.items()
        ]
        ctrl = list(cd) + ([4] if cycle and i == 1 else []) + ([1] if cycle and i == 4 else [])
        nodes.append(
            {
                "id": i,
                "name": n,
                "type": t,
                "data_deps": list(dd),
                "ctrl_deps": ctrl,
                "duration_micros": d,
                "attr": attr,
            }
        )
    path.write_text(json.dumps({"nodes": nodes}))


@pytest.mark.parametrize("form", ["binary", "json"])
def test_chakra_replay_and_import(form: str, tmp_path: Path) -> None:
    path = tmp_path / ("t.0.et" if form == "binary" else "t.json")
    (_chakra_binary if form == "binary" else _chakra_json)(path)
    steps = load_steps([str(path)])
    st = steps[0]
    assert [o.name for o in st.graph.ops] == ["kernelA", "ncclKernel_AllReduce", "kernelD"]
    assert st.graph.ops[1].deps == [0]  # through the CPU node
    r = replay_steps(steps)
    assert r["predicted_period_us"] == 15.0
    assert r["measured_period_us"] is None
    out = tmp_path / "t.mlir"
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(["import", str(path), "-o", str(out)])
    assert info.value.code == 0
    assert "comm.allreduce" in out.read_text()
    assert "tensor<4096xi8>" in out.read_text()


def test_chakra_ctrl_cycle_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cycle.json"
    _chakra_json(path, cycle=True)
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(["replay", str(path)])
    assert info.value.code == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"lancet-trace: error: {path}: the GPU nodes' ctrl/data deps form a cycle"]


def test_pytorch_et_adds_data_dependencies_the_times_satisfy() -> None:
    steps = load_steps(
        [str(DATA / "dlrm" / "worker0.pt.trace.json.gz")],
        et=[str(DATA / "dlrm" / "dlrm_eg_0.json.gz")],
    )
    st = steps[0]
    assert st.data_deps == 248
    ops = st.graph.ops
    for o in ops:
        for d in o.deps:
            assert o.ts + 1.0 >= ops[d].ts + ops[d].dur  # every kept edge holds in the measurement
    r = replay_steps(steps)
    assert abs(r["period_error"]) <= 0.02


def test_whatif_pipeline_with_data_dependencies(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "t.json"
    _chakra_json(path)
    report = tmp_path / "r.json"
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(
            ["whatif", str(path), "--pipeline", "lancet-schedule", "--report", str(report)]
        )
    assert info.value.code == 0
    pipe = json.loads(report.read_text())["pipeline"]
    assert pipe["simulated_after_us"] <= pipe["simulated_before_us"]  # never worse
    assert pipe["predicted_period_us"] == pytest.approx(
        pipe["replayed_period_us"] - pipe["saved_us"]
    )
