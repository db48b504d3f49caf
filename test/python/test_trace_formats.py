"""Trace formats besides Kineto: PyTorch execution traces (data dependencies), Chakra `.et`
(protobuf wire format, encoded here by hand) and Chakra JSON (the jsonizer's form; issue 19)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from lancet_mlir.importers.traces import load_steps
from lancet_mlir.importers.traces.et import et_rank
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


def _jsonizer_node(
    nid: int, name: str, ntype: int, dur: int, data_deps=(), ctrl_deps=(), attrs=None
) -> dict:
    """One node as protobuf's `MessageToJson` writes it (mlcommons/chakra's jsonizer):
    lowerCamelCase keys, 64-bit integers as strings, the type by name, defaults left out."""
    types = {4: "COMP_NODE", 7: "COMM_COLL_NODE"}
    out: dict = {"id": str(nid), "name": name, "type": types[ntype]}
    if ctrl_deps:
        out["ctrlDeps"] = [str(d) for d in ctrl_deps]
    if data_deps:
        out["dataDeps"] = [str(d) for d in data_deps]
    if dur:
        out["durationMicros"] = str(dur)
    out["attr"] = [
        {"name": k, "boolVal": v} if isinstance(v, bool) else {"name": k, "int64Val": str(v)}
        for k, v in (attrs or {}).items()
    ]
    return out


def _write_jsonizer(path: Path, nodes: list[dict]) -> None:
    """The jsonizer's file: the GlobalMetadata's JSON, then every node's, concatenated."""
    path.write_text("".join(json.dumps(x, indent=2) for x in [{"version": "0.0.4"}, *nodes]))


def _chakra_json(path: Path, cycle: bool = False) -> None:
    nodes = []
    for i, n, t, d, dd, cd, a in NODES:
        ctrl = list(cd) + ([4] if cycle and i == 1 else []) + ([1] if cycle and i == 4 else [])
        nodes.append(_jsonizer_node(i, n, t, d, dd, ctrl, a))
    _write_jsonizer(path, nodes)


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
    # kernelA -> kernelD -> kernelA (ctrl): kernelA is the lowest id left waiting
    assert err == [
        f"lancet-trace: error: {path}: the nodes' ctrl/data deps form a cycle "
        "(node 1, kernelA, never becomes ready)"
    ]


def test_chakra_deps_against_stream_order_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # node 1 waits for node 2's data, but both run on stream 7 in id order: no cycle among the
    # deps, yet it can never run
    gpu = {"is_cpu_op": False, "tid": 7}
    path = tmp_path / "order.json"
    _write_jsonizer(
        path,
        [_jsonizer_node(1, "a", 4, 1, [2], (), gpu), _jsonizer_node(2, "b", 4, 1, (), (), gpu)],
    )
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(["replay", str(path)])
    assert info.value.code == 1
    assert capsys.readouterr().err.splitlines() == [
        f"lancet-trace: error: {path}: the GPU nodes' ctrl/data deps contradict their stream "
        "order (node id order per tid)"
    ]


def test_pytorch_et_adds_data_dependencies_the_times_satisfy() -> None:
    steps = load_steps(
        [str(DATA / "dlrm" / "worker0.pt.trace.json.gz")],
        et=[str(DATA / "dlrm" / "dlrm_eg_0.json.gz")],
    )
    st = steps[0]
    # 248 read-after-write edges, 92 write-after-read (an in-place op after a reader of the
    # old value) and 53 write-after-write ones, each kept because the measured times satisfy
    # it (counted by leaving each kind out); one WAR edge is from the second stream of an
    # operator that launches on two (All2All_Pooled_WaitBackward's copies and all-to-all)
    assert st.data_deps == 393
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


def _op_deps(path: Path, et: Path, step: int | None = None) -> dict[tuple[int, str], list[str]]:
    """(step, kernel) -> the kernels its data dependencies name, of the imported window."""
    st = load_steps([str(path)], step=step, et=[str(et)])[0]
    ops = st.graph.ops
    return {
        (st.info[j].step, o.name): [f"{st.info[d].step}:{ops[d].name}" for d in o.deps]
        for j, o in enumerate(ops)
    }


def test_et_dependencies_land_on_the_replayed_step() -> None:
    # two identical steps (gemm 50 us on stream 7, relu on stream 8 reading it, add on stream 7
    # reading relu); the ET records one iteration: its edges belong to the replayed step only
    path, et = DATA / "two_steps.json", DATA / "two_steps_et.json"
    assert _op_deps(path, et) == {
        (1, "gemm"): [],
        (1, "relu"): [],
        (1, "add"): [],
        (2, "gemm"): [],
        (2, "relu"): ["2:gemm"],  # relu starts at 285, gemm ends at 270
        (2, "add"): ["2:relu"],  # add starts at 305, relu ends at 295
    }
    assert load_steps([str(path)], et=[str(et)])[0].data_deps == 2
    # --step 1 replays the first step (no earlier step to warm up): the edges follow it
    assert _op_deps(path, et, step=1) == {
        (1, "gemm"): [],
        (1, "relu"): ["1:gemm"],
        (1, "add"): ["1:relu"],
    }


def test_et_that_matches_nothing_of_the_step_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    et = tmp_path / "et.json"
    nodes = [{"id": 2, "name": "aten::conv2d", "parent": 1, "inputs": [], "outputs": []}]
    et.write_text(json.dumps({"schema": "1.0.1", "nodes": nodes}))
    path = DATA / "two_steps.json"
    out = tmp_path / "o.mlir"
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(["import", str(path), "--et", str(et), "-o", str(out)])
    assert info.value.code == 1
    # refused by the match measure (et.match_share: 0 of max(3, 1) ops line up) before the
    # older "no operator matches a launching ATen op" check is reached
    assert capsys.readouterr().err.splitlines() == [
        f"lancet-trace: error: {et}: does not match ProfilerStep#2 of {path}: 0.0 % of their "
        "ops line up by name and order (least 80 %): an execution trace of another program "
        "or run?"
    ]
    assert not out.exists()


def _comms(inputs: list, types: list[str]) -> dict:
    return {"id": 9, "name": "record_param_comms", "parent": 1, "inputs": inputs,
            "input_types": types, "outputs": []}  # fmt: skip


def test_et_rank_from_its_collectives() -> None:
    # PyTorch 2.0 (the DLRM ET): seq, pg id, rank, collective name, in splits, out splits
    old = ["Int", "Int", "Int", "String", "GenericList[]", "GenericList[]"]
    assert et_rank({"nodes": [_comms([141, 0, 3, "allreduce", [], []], old)]}) == 3
    # 2.2+: (pg name, desc), rank 1 of a group strided by 2 from 4: global rank 6
    new = ["Int", "Tuple[String,String]", "Int", "String", "GenericList[]", "GenericList[]",
           "Int", "Int", "Int"]  # fmt: skip
    assert et_rank({"nodes": [_comms([5, ["1", "x"], 1, "allgather", [], [], 4, 2, 4], new)]}) == 6
    # a group that is not strided (stride -1): no rank; group ranks that disagree: no rank
    assert (
        et_rank({"nodes": [_comms([5, ["1", "x"], 1, "allgather", [], [], 4, -1, 4], new)]}) is None
    )
    two = [_comms([1, 0, 0, "allreduce", [], []], old), _comms([2, 1, 1, "allreduce", [], []], old)]
    assert et_rank({"nodes": two}) is None
    assert et_rank({"nodes": []}) is None
    with gzip.open(DATA / "dlrm" / "dlrm_eg_0.json.gz") as f:
        assert et_rank(json.load(f)) == 0


def test_et_of_another_rank_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace, et = DATA / "dlrm" / "worker1.pt.trace.json.gz", DATA / "dlrm" / "dlrm_eg_0.json.gz"
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(["replay", str(trace), "--et", str(et)])
    assert info.value.code == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"lancet-trace: error: {et}: an execution trace of rank 0 (its collectives say so), "
        f"given for {trace}, rank 1"
    ]


# ---- the real Chakra feeder test trace (mlcommons/chakra, test/data/traces/README.md) ----------
def _walk_et(data: bytes) -> list[dict]:
    """The nodes of a Chakra `.et`, decoded here independently of the importer: the varint
    length-prefixed messages, and of each node (after the GlobalMetadata) its id (1), type (3),
    ctrl deps (4) and data deps (5) packed or not, duration (7) and the attributes (10) whose
    value is a varint (`is_cpu_op`, `tid`, `comm_type`, `comm_size`)."""

    def varint(buf: bytes, pos: int) -> tuple[int, int]:
        out = shift = 0
        while True:
            b = buf[pos]
            pos += 1
            out |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return out, pos

    def fields(buf: bytes):
        pos = 0
        while pos < len(buf):
            key, pos = varint(buf, pos)
            num, wire = key >> 3, key & 7
            if wire == 0:
                value, pos = varint(buf, pos)
            elif wire == 2:
                size, pos = varint(buf, pos)
                value, pos = buf[pos : pos + size], pos + size
            else:  # fixed 64 / 32 bits
                size = 8 if wire == 1 else 4
                value, pos = buf[pos : pos + size], pos + size
            yield num, wire, value

    def ints(wire: int, value) -> list[int]:
        if wire == 0:
            return [value]
        out, pos = [], 0
        while pos < len(value):
            v, pos = varint(value, pos)
            out.append(v)
        return out

    messages, pos = [], 0
    while pos < len(data):
        size, pos = varint(data, pos)
        messages.append(data[pos : pos + size])
        pos += size
    nodes = []
    for body in messages[1:]:
        node = {"ctrl": [], "data": [], "dur": 0, "attr": {}}
        for num, wire, value in fields(body):
            if num == 1:
                node["id"] = value
            elif num == 3:
                node["type"] = value
            elif num == 4:
                node["ctrl"] += ints(wire, value)
            elif num == 5:
                node["data"] += ints(wire, value)
            elif num == 7:
                node["dur"] = value
            elif num == 10:
                parts = list(fields(value))
                name = next(v for n, _, v in parts if n == 1).decode()
                vals = [v for n, w, v in parts if n != 1 and w == 0]
                if vals:
                    node["attr"][name] = vals[0]
        nodes.append(node)
    return nodes


def test_real_chakra_feeder_trace(tmp_path: Path) -> None:
    """The Chakra converter's output for a real PyTorch run (a ResNet-like step: cuDNN
    convolution and batch-norm backward kernels, NCCL broadcasts and all-reduces), read from
    its gzip-compressed form, against an independent decoding of the same file."""
    path = DATA / "chakra_feeder.0.et.gz"
    nodes = _walk_et(gzip.decompress(path.read_bytes()))
    by_id = {n["id"]: n for n in nodes}
    assert len(nodes) == len(by_id) == 3664
    # GPU nodes: COMP (4) or COMM_COLL (7) with is_cpu_op false; their tid is the stream
    gpu = sorted(
        (n for n in nodes if n["type"] in (4, 7) and not n["attr"].get("is_cpu_op")),
        key=lambda n: n["id"],
    )
    comm = [n for n in gpu if n["type"] == 7]
    assert (len(gpu), len(comm)) == (1216, 7)
    assert sorted(n["attr"]["comm_type"] for n in comm) == [0, 0, 0, 0, 0, 5, 5]  # 5 AR, 2 bcast
    # the ctrl deps of CPU nodes on themselves or on later nodes that the cycle check leaves out
    cpu = [n for n in nodes if n not in gpu]
    ignored = sum(1 for n in cpu for d in n["ctrl"] if d >= n["id"])
    assert ignored == 1049
    # no CPU node takes data from a GPU node, so a GPU node's deps are its own ctrl/data deps on
    # GPU nodes (those through CPU nodes reach none)
    gpu_ids = {n["id"] for n in gpu}
    assert not any(d in gpu_ids for n in cpu for d in n["data"])
    deps = {n["id"]: {d for d in n["ctrl"] + n["data"] if d in gpu_ids} for n in gpu}
    # GPU-only schedule: each stream in id order, each node after its deps (a fixpoint)
    end: dict[int, int] = {}
    changed = True
    while changed:
        changed = False
        last: dict[int, int] = {}
        for n in gpu:
            start = max([last.get(n["attr"]["tid"], 0)] + [end.get(d, 0) for d in deps[n["id"]]])
            if end.get(n["id"]) != start + n["dur"]:
                end[n["id"]] = start + n["dur"]
                changed = True
            last[n["attr"]["tid"]] = end[n["id"]]
    makespan = max(end.values())
    assert makespan == 292828  # = the compute stream's (tid 7) durations summed
    assert makespan == sum(n["dur"] for n in gpu if n["attr"]["tid"] == 7)

    steps = load_steps([str(path)])
    st = steps[0]
    assert len(st.graph.ops) == 1216
    assert sum(len(o.deps) for o in st.graph.ops) == sum(len(v) for v in deps.values()) == 96
    r = replay_steps(steps)
    assert r["predicted_period_us"] == makespan
    assert (r["gpu_ops"], r["comm_ops"], r["data_dependencies"]) == (1216, 7, 96)
    assert r["flags"][1].startswith(f"chakra_cpu_ctrl_deps_ignored: {ignored} ctrl deps")
    out = tmp_path / "chakra.mlir"
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(["import", str(path), "-o", str(out)])
    assert info.value.code == 0
    text = out.read_text()
    # the all-reduces are comm collectives on their comm_size bytes; the broadcasts stay kernels
    all_reduce_bytes = sorted(n["attr"]["comm_size"] for n in comm if n["attr"]["comm_type"] == 0)
    assert (
        sorted(int(x) for x in re.findall(r"comm\.allreduce .*?tensor<(\d+)xi8>", text))
        == all_reduce_bytes
    )
    assert text.count(" = trace.kernel") == 1216 - 5


def test_chakra_jsonizer_output_of_the_feeder_trace_replays_as_the_et() -> None:
    """chakra_feeder.0.json.gz is protobuf's MessageToJson of chakra_feeder.0.et.gz (the
    jsonizer's output; README): the same nodes, so the same step and replay as the binary."""
    a = load_steps([str(DATA / "chakra_feeder.0.et.gz")])[0]
    b = load_steps([str(DATA / "chakra_feeder.0.json.gz")])[0]
    assert len(b.graph.ops) == 1216
    key = [(o.name, o.stream, o.dur, o.deps, o.is_comm) for o in a.graph.ops]
    assert [(o.name, o.stream, o.dur, o.deps, o.is_comm) for o in b.graph.ops] == key
    assert [(i.comm_kind, i.comm_bytes) for i in b.info] == [
        (i.comm_kind, i.comm_bytes) for i in a.info
    ]
    assert replay_steps([b])["predicted_period_us"] == 292828.0


def test_chakra_json_both_spellings_and_int_forms(tmp_path: Path) -> None:
    """Protobuf's JSON parsers accept a field's proto name as well as its lowerCamelCase one,
    and 64-bit integers as numbers as well as strings: kernel a (10 us) -> b (20 us), 30 us."""
    nodes = [
        {"id": 1, "name": "a", "type": 4, "duration_micros": 10,
         "attr": [{"name": "is_cpu_op", "bool_val": False}, {"name": "tid", "int64_val": 7}]},
        {"id": "2", "name": "b", "type": "COMP_NODE", "data_deps": ["1"], "durationMicros": "20",
         "attr": [{"name": "is_cpu_op", "boolVal": False}, {"name": "tid", "int64Val": "8"}]},
    ]  # fmt: skip
    path = tmp_path / "t.json"
    _write_jsonizer(path, nodes)
    st = load_steps([str(path)])[0]
    assert [(o.name, o.dur, o.deps) for o in st.graph.ops] == [("a", 10.0, []), ("b", 20.0, [0])]
    assert replay_steps([st])["predicted_period_us"] == 30.0


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (  # a near-miss spelling: it used to be read as absent (0 us, no deps)
            {"id": "1", "type": "COMP_NODE", "durationMicro": "10"},
            "JSON object 2: unknown Chakra node field 'durationMicro' (et_def.proto's Node has "
            "id, name, type, ctrlDeps, dataDeps, startTimeMicros, durationMicros, inputs, "
            "outputs, attr, storage)",
        ),
        (
            {"id": "1", "type": "COMP_NODE", "durationMicros": "-5"},
            "node 1: durationMicros is '-5', not an unsigned integer",
        ),
        (
            {"id": "1", "type": "COMP_NODE", "dataDeps": ["x"]},
            "node 1: data_deps is 'x', not an unsigned integer",
        ),
        (
            {"id": "1", "type": "COMP_NODES"},
            "node 1: type is 'COMP_NODES', not a node type of et_def.proto",
        ),
        (
            {"id": "1", "durationMicros": "1", "duration_micros": "2"},
            "JSON object 2: the field duration_micros is given twice ('duration_micros')",
        ),
        (
            {"id": "1", "attr": [{"name": "tid", "int64Vals": "7"}]},
            "node 1: attr 'tid' has the unknown field 'int64Vals'",
        ),
    ],
)
def test_chakra_json_bad_fields_are_one_error_line(
    doc: dict, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.json"
    _write_jsonizer(path, [doc])
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(["replay", str(path)])
    assert info.value.code == 1
    assert capsys.readouterr().err.splitlines() == [f"lancet-trace: error: {path}: {message}"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (  # the form formats.md used to document: no Chakra tool writes it
            json.dumps({"nodes": [{"id": 1, "name": "k", "duration_micros": 10}]}),
            "a 'nodes' list without 'schema': not a PyTorch execution trace, and not Chakra "
            "JSON (the jsonizer writes one object per node, one after another)",
        ),
        (
            json.dumps({"workload_graph": [{"Id": 1, "runtime": 3}]}),
            "ASTRA-sim's feeder JSON ('workload_graph') is not read: give the Chakra .et, or "
            "the jsonizer's JSON of it",
        ),
        (
            '{"a": 1}{"b": 2}',
            "2 JSON values one after another, but not Chakra jsonizer output (its first "
            "object is a GlobalMetadata: version, attr)",
        ),
        ('{"version": "0.0.4"}', "a Chakra trace without nodes"),
    ],
)
def test_other_json_node_lists_are_refused(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "other.json"
    path.write_text(text)
    with pytest.raises(SystemExit) as info:
        lancet_trace.main(["replay", str(path)])
    assert info.value.code == 1
    assert capsys.readouterr().err.splitlines() == [f"lancet-trace: error: {path}: {message}"]
