"""MLCommons Chakra execution traces: the binary `.et` (protobuf) and the jsonizer's JSON.

The `.et` file is a sequence of varint-length-delimited protobuf messages: one
`GlobalMetadata`, then `Node`s (mlcommons/chakra `schema/protobuf/et_def.proto`: id = 1,
name = 2, type = 3, ctrl_deps = 4, data_deps = 5, start_time_micros = 6, duration_micros = 7,
inputs = 8, outputs = 9, attr = 10). The wire format is decoded here with the standard library
(varints, fixed 32/64-bit fields, length-delimited fields, packed repeated fields). The JSON
form is what mlcommons/chakra's jsonizer (`src/jsonizer/jsonizer.py`) writes: protobuf's JSON
mapping (`MessageToJson`) of the GlobalMetadata and then of every Node, one object after
another with nothing between them (`parse_chakra_jsonizer`). ASTRA-sim's feeder JSON
(`{"workload_graph": [...]}`) is another format, not read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from lancet_mlir.importers.traces.step import OpInfo, StepTrace
from lancet_mlir.sim.replay import GpuOp, RankGraph
from lancet_mlir.support.errors import UserError

NODE_TYPES = {
    0: "INVALID_NODE",
    1: "METADATA_NODE",
    2: "MEM_LOAD_NODE",
    3: "MEM_STORE_NODE",
    4: "COMP_NODE",
    5: "COMM_SEND_NODE",
    6: "COMM_RECV_NODE",
    7: "COMM_COLL_NODE",
    8: "STORAGE_NODE",
    9: "BATCH_NODE",
    10: "CHECKPOINT_NODE",
}
COMM_TYPES = {
    0: "allreduce",
    1: "reduce",
    2: "allgather",
    3: "gather",
    4: "scatter",
    5: "broadcast",
    6: "all_to_all",
    7: "reduce_scatter",
    8: "reduce_scatter",
    9: "barrier",
}
"""Chakra `CollectiveCommType` -> our collective kinds."""
_ATTR_VALUE_FIELDS = {
    3: "double",
    5: "float",
    7: "int",
    9: "int",
    11: "int",
    13: "int",
    15: "sint",
    17: "sint",
    27: "bool",
    29: "string",
}


@dataclass
class ChakraNode:
    """One Chakra node (plain data)."""

    id: int
    name: str
    type: str
    ctrl_deps: list[int]
    data_deps: list[int]
    start_us: float
    duration_us: float
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def is_gpu(self) -> bool:
        """GPU work: a compute or collective node not marked as a CPU op."""
        return self.type in ("COMP_NODE", "COMM_COLL_NODE") and not self.attrs.get(
            "is_cpu_op", False
        )


class _Reader:
    def __init__(self, data: bytes, source: str):
        self.data = data
        self.pos = 0
        self.source = source

    def varint(self) -> int:
        shift = 0
        out = 0
        data = self.data
        while True:
            if self.pos >= len(data):
                raise UserError(
                    f"{self.source}: truncated Chakra trace (a varint runs past the end)"
                )
            b = data[self.pos]
            self.pos += 1
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 70:
                raise UserError(f"{self.source}: bad Chakra trace (a varint longer than 10 bytes)")

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise UserError(f"{self.source}: truncated Chakra trace (a field runs past the end)")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out


def _fields(data: bytes, source: str) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message: ints for varint/fixed, bytes for
    length-delimited fields."""
    r = _Reader(data, source)
    out: list[tuple[int, int, Any]] = []
    while r.pos < len(data):
        key = r.varint()
        num, wire = key >> 3, key & 7
        if wire == 0:
            out.append((num, 0, r.varint()))
        elif wire == 1:
            out.append((num, 1, r.take(8)))
        elif wire == 2:
            out.append((num, 2, r.take(r.varint())))
        elif wire == 5:
            out.append((num, 5, r.take(4)))
        else:
            raise UserError(f"{source}: bad Chakra trace (protobuf wire type {wire})")
    return out


def _packed(value: Any, wire: int, source: str) -> list[int]:
    if wire == 0:
        return [value]
    r = _Reader(value, source)
    vals = []
    while r.pos < len(value):
        vals.append(r.varint())
    return vals


def _attr(data: bytes, source: str) -> tuple[str, Any]:
    name, value = "", None
    for num, wire, v in _fields(data, source):
        if num == 1 and wire == 2:
            name = v.decode("utf-8", "replace")
        elif num in _ATTR_VALUE_FIELDS:
            kind = _ATTR_VALUE_FIELDS[num]
            if kind == "double" and wire == 1:
                value = struct.unpack("<d", v)[0]
            elif kind == "float" and wire == 5:
                value = struct.unpack("<f", v)[0]
            elif kind == "int" and wire == 0:
                value = v - (1 << 64) if v >= 1 << 63 else v
            elif kind == "sint" and wire == 0:
                value = (v >> 1) ^ -(v & 1)
            elif kind == "bool" and wire == 0:
                value = bool(v)
            elif kind == "string" and wire == 2:
                value = v.decode("utf-8", "replace")
    return name, value


def _node(data: bytes, source: str) -> ChakraNode:
    n = ChakraNode(0, "", "INVALID_NODE", [], [], 0.0, 0.0)
    for num, wire, v in _fields(data, source):
        if num == 1 and wire == 0:
            n.id = v
        elif num == 2 and wire == 2:
            n.name = v.decode("utf-8", "replace")
        elif num == 3 and wire == 0:
            n.type = NODE_TYPES.get(v, f"TYPE_{v}")
        elif num == 4:
            n.ctrl_deps.extend(_packed(v, wire, source))
        elif num == 5:
            n.data_deps.extend(_packed(v, wire, source))
        elif num == 6 and wire == 0:
            n.start_us = float(v)
        elif num == 7 and wire == 0:
            n.duration_us = float(v)
        elif num == 10 and wire == 2:
            key, value = _attr(v, source)
            n.attrs[key] = value
    return n


def is_chakra_binary(data: bytes) -> bool:
    """Whether `data` starts like a Chakra `.et` (a length-prefixed GlobalMetadata with a
    version string as field 1)."""
    try:
        r = _Reader(data, "")
        size = r.varint()
        body = r.take(size)
        fields = _fields(body, "")
    except UserError:
        return False
    return bool(fields) and all(num in (1, 2) and wire == 2 for num, wire, _ in fields)


def looks_like_chakra_binary(data: bytes) -> bool:
    """Whether `data` starts like a Chakra `.et` even if it is cut short: a varint length,
    then the GlobalMetadata's first key (field 1 `version` or 2 `attr`, length-delimited:
    byte 0x0a or 0x12). JSON never starts so (its first byte is whitespace, `{` or `[`), so
    a truncated `.et` is reported as one, not as bad JSON."""
    r = _Reader(data, "")
    try:
        r.varint()
    except UserError:
        return False
    if data[:1] in (b"{", b"[") or r.pos + 1 >= len(data) or data[r.pos] not in (0x0A, 0x12):
        return False
    # the key's length varint: a text file whose first line is one character also has 0x0a
    # there, but then a printable byte or whitespace, where a metadata field's length is a
    # control byte (< 0x20) or a multi-byte varint (>= 0x80)
    size = data[r.pos + 1]
    return size >= 0x80 or size < 0x20 and size not in (0x09, 0x0A, 0x0D)


def parse_chakra_binary(data: bytes, source: str) -> list[ChakraNode]:
    """The nodes of a `.et` file (after its GlobalMetadata)."""
    r = _Reader(data, source)
    nodes: list[ChakraNode] = []
    first = True
    while r.pos < len(data):
        body = r.take(r.varint())
        if first:
            first = False
            continue
        nodes.append(_node(body, source))
    if not nodes:
        raise UserError(f"{source}: a Chakra trace without nodes")
    return nodes


NODE_JSON_FIELDS = {
    "id": "id",
    "name": "name",
    "type": "type",
    "ctrlDeps": "ctrl_deps",
    "ctrl_deps": "ctrl_deps",
    "dataDeps": "data_deps",
    "data_deps": "data_deps",
    "startTimeMicros": "start_time_micros",
    "start_time_micros": "start_time_micros",
    "durationMicros": "duration_micros",
    "duration_micros": "duration_micros",
    "inputs": "inputs",
    "outputs": "outputs",
    "attr": "attr",
    "storage": "storage",
}
"""The JSON names of `Node`'s fields (et_def.proto) -> the proto field: protobuf's JSON
mapping writes the lowerCamelCase name (`MessageToJson`, the jsonizer's call) and its parsers
accept the proto name too, so both spellings are read; any other key is refused."""
_SCALAR_KINDS = {
    "double": "float",
    "float": "float",
    "int32": "int",
    "int64": "int",
    "uint32": "int",
    "uint64": "int",
    "sint32": "int",
    "sint64": "int",
    "fixed32": "int",
    "fixed64": "int",
    "sfixed32": "int",
    "sfixed64": "int",
    "bool": "bool",
    "string": "string",
    "bytes": "string",
}
ATTR_JSON_VALUES: dict[str, tuple[str, bool]] = {}
"""The JSON names of `AttributeProto`'s value fields -> (value kind, is a list): `int64Val` /
`int64_val`, `int64List` / `int64_list` (`{"values": [...]}`), ..."""
for _t, _kind in _SCALAR_KINDS.items():
    ATTR_JSON_VALUES[f"{_t}Val"] = ATTR_JSON_VALUES[f"{_t}_val"] = (_kind, False)
    ATTR_JSON_VALUES[f"{_t}List"] = ATTR_JSON_VALUES[f"{_t}_list"] = (_kind, True)
GLOBAL_METADATA_FIELDS = ("version", "attr")
"""`GlobalMetadata`'s fields: the jsonizer's first JSON object."""


def is_chakra_jsonizer(docs: list[Any]) -> bool:
    """Whether `docs` (the JSON objects of one file, in order) is what mlcommons/chakra's
    jsonizer writes: `MessageToJson(GlobalMetadata)` and then `MessageToJson(node)` for every
    node, concatenated with nothing between them. The first object must be the metadata,
    with nothing but `GlobalMetadata`'s fields (the feeder test trace's has only `attr`: an
    empty `version` is left out), and alone it must have a `version`."""
    return (
        bool(docs)
        and isinstance(docs[0], dict)
        and all(k in GLOBAL_METADATA_FIELDS for k in docs[0])
        and (len(docs) > 1 or "version" in docs[0])
    )


def _json_uint(value: Any, what: str) -> int:
    """A protobuf JSON uint64: a number, or (as `MessageToJson` writes 64-bit integers) a
    decimal string; UserError naming `what` otherwise."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    raise UserError(f"{what} is {value!r}, not an unsigned integer")


def _json_value(value: Any, kind: str, what: str) -> Any:
    """One attribute value of kind `kind` (`ATTR_JSON_VALUES`) in protobuf JSON."""
    if kind == "int":
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        elif isinstance(value, int) and not isinstance(value, bool):
            return value
        elif isinstance(value, float) and value.is_integer():
            return int(value)
        raise UserError(f"{what} is {value!r}, not an integer")
    if kind == "float":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if value in ("NaN", "Infinity", "-Infinity"):
            return float(value.replace("Infinity", "inf"))
        raise UserError(f"{what} is {value!r}, not a number")
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise UserError(f"{what} is {value!r}, not true or false")
    if isinstance(value, str):
        return value
    raise UserError(f"{what} is {value!r}, not a string")


def _json_attr(a: Any, where: str) -> tuple[str, Any]:
    """(name, value) of one `AttributeProto` in protobuf JSON. A oneof with no member set
    (the jsonizer writes `{"name": "is_cpu_op"}` when the encoder wrote no value) is None."""
    if not isinstance(a, dict) or not isinstance(a.get("name"), str):
        raise UserError(f"{where}: an attr that is not an object with a string 'name'")
    name, value = a["name"], None
    for k, v in a.items():
        if k in ("name", "docString", "doc_string"):
            continue
        if k not in ATTR_JSON_VALUES:
            raise UserError(f"{where}: attr {name!r} has the unknown field {k!r}")
        kind, is_list = ATTR_JSON_VALUES[k]
        what = f"{where}: attr {name!r} {k}"
        if is_list:
            vals = v.get("values", []) if isinstance(v, dict) else None
            if not isinstance(vals, list) or any(x not in ("values",) for x in v):
                raise UserError(f"{what} is not an object {{'values': [...]}}")
            value = [_json_value(x, kind, what) for x in vals]
        else:
            value = _json_value(v, kind, what)
    return name, value


def parse_chakra_jsonizer(docs: list[Any], source: str) -> list[ChakraNode]:
    """The nodes of a Chakra jsonizer file (`is_chakra_jsonizer`): protobuf's JSON mapping of
    et_def.proto's `Node`s. Keys in lowerCamelCase or proto spelling (`NODE_JSON_FIELDS`),
    64-bit integers as strings or numbers, the node type by name (`COMP_NODE`) or number,
    fields at their default left out (as protobuf does: a missing `durationMicros` is 0).
    A key `Node` does not have is refused, not read as absent: a near-miss spelling would
    otherwise read every duration and dependency as 0 / none (review 20, finding 5)."""
    nodes = []
    names = {v: k for k, v in NODE_TYPES.items()}
    for k, n in enumerate(docs[1:], 1):
        where = f"{source}: JSON object {k + 1}"
        if not isinstance(n, dict):
            raise UserError(f"{where} is not a Chakra node (an object)")
        fields: dict[str, Any] = {}
        for key, v in n.items():
            field = NODE_JSON_FIELDS.get(key)
            if field is None:
                raise UserError(
                    f"{where}: unknown Chakra node field {key!r} (et_def.proto's Node has "
                    "id, name, type, ctrlDeps, dataDeps, startTimeMicros, durationMicros, "
                    "inputs, outputs, attr, storage)"
                )
            if field in fields:
                raise UserError(f"{where}: the field {field} is given twice ({key!r})")
            fields[field] = v
        nid = _json_uint(fields.get("id", 0), f"{where}: id")
        where = f"{source}: node {nid}"
        t = fields.get("type", 0)
        if isinstance(t, str) and t in names:
            ntype = t
        elif isinstance(t, int) and not isinstance(t, bool) and t >= 0:
            ntype = NODE_TYPES.get(t, f"TYPE_{t}")  # a number newer than ours: not GPU work
        else:  # a misspelt name would silently make a kernel a non-GPU node
            raise UserError(f"{where}: type is {t!r}, not a node type of et_def.proto")
        deps = {}
        for f in ("ctrl_deps", "data_deps"):
            v = fields.get(f, [])
            if not isinstance(v, list):
                raise UserError(f"{where}: {f} is not a list")
            deps[f] = [_json_uint(x, f"{where}: {f}") for x in v]
        attrs = dict(_json_attr(a, where) for a in fields.get("attr", []) or [])
        name = fields.get("name", "")
        if not isinstance(name, str):
            raise UserError(f"{where}: name is {name!r}, not a string")
        nodes.append(
            ChakraNode(
                nid,
                name,
                ntype,
                deps["ctrl_deps"],
                deps["data_deps"],
                float(_json_uint(fields.get("start_time_micros", 0), f"{where}: startTimeMicros")),
                float(_json_uint(fields.get("duration_micros", 0), f"{where}: durationMicros")),
                attrs,
            )
        )
    if not nodes:
        raise UserError(f"{source}: a Chakra trace without nodes")
    return nodes


def _impossible_cpu_ctrl(n: ChakraNode) -> list[int]:
    """The ctrl deps of CPU node `n` on itself or on a node with a larger id. A CPU op's ctrl
    dep orders it after earlier host work, and the nodes are numbered in the order the PyTorch
    execution trace recorded the ops, so such a dep points at the op itself or forward. The
    Chakra converter writes them on PyTorch's autograd thread (mlcommons/chakra issue 134,
    "Cyclic Dependency"): in its feeder test trace (test/data/traces/chakra_feeder.0.et.gz)
    1,049 of the 1,580 ctrl deps of thread 2's CPU ops (383 on the op itself, 348 on the
    thread's next CPU op, 199 on a kernel launched after it, often its own, 119 others), and
    they alone close the trace's 417 cycles. The replay never follows a CPU node's ctrl deps
    (it has no host), so they only matter to the cycle check, which leaves them out and
    counts them (`chakra_step`'s flag)."""
    if n.is_gpu:
        return []
    return [d for d in n.ctrl_deps if d >= n.id]


def _check_ids(nodes: list[ChakraNode], source: str) -> None:
    """UserError at the first node id that two nodes share: every dep names a node by id, so
    a shared id makes the deps ambiguous (the first and the second would both be meant)."""
    seen: dict[int, ChakraNode] = {}
    for n in nodes:
        first = seen.setdefault(n.id, n)
        if first is not n:
            raise UserError(
                f"{source}: node id {n.id} is used twice ({first.name} and {n.name}): "
                "deps name nodes by id"
            )


def _check_acyclic(by_id: dict[int, ChakraNode], source: str) -> None:
    """UserError if the ctrl/data deps of all nodes (CPU nodes too) have a cycle: the GPU
    nodes' dependencies are followed through CPU nodes, so a cycle anywhere is a trace that
    cannot run. Deps on ids the trace lacks are ignored (as everywhere here), and so are a CPU
    node's ctrl deps on itself or on a later node (`_impossible_cpu_ctrl`)."""
    users: dict[int, list[int]] = {i: [] for i in by_id}
    waiting: dict[int, int] = {}
    for i, n in by_id.items():
        skip = set(_impossible_cpu_ctrl(n))
        ctrl = [d for d in n.ctrl_deps if d not in skip]
        deps = {d for d in (*ctrl, *n.data_deps) if d in by_id}
        if i in deps:
            raise UserError(f"{source}: node {i} ({n.name}) depends on itself")
        waiting[i] = len(deps)
        for d in deps:
            users[d].append(i)
    ready = [i for i, k in waiting.items() if k == 0]  # Kahn's algorithm
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    if done < len(by_id):
        stuck = min(i for i, k in waiting.items() if k > 0)
        raise UserError(
            f"{source}: the nodes' ctrl/data deps form a cycle (node {stuck}, "
            f"{by_id[stuck].name}, never becomes ready)"
        )


def chakra_step(nodes: list[ChakraNode], source: str) -> StepTrace:
    """The GPU nodes of a Chakra trace as a replayable step: stream order by node id per
    `tid`, data dependencies followed through CPU nodes to the nearest GPU nodes, and the GPU
    nodes' own ctrl deps. A cycle in the deps of any nodes, CPU nodes too, or a node that
    depends on itself is an error; so are deps that contradict the stream order and two nodes
    with one id. A CPU node's ctrl deps on itself or on a later node are left out of the check
    and counted in the flag `chakra_cpu_ctrl_deps_ignored` (`_impossible_cpu_ctrl`). Chakra traces carry durations but (in the
    files seen) no start times, so there is no measured period: `period_basis` "none"."""
    _check_ids(nodes, source)
    by_id = {n.id: n for n in nodes}
    _check_acyclic(by_id, source)
    ignored = sum(len(_impossible_cpu_ctrl(n)) for n in nodes)
    gpu = sorted((n for n in nodes if n.is_gpu), key=lambda n: n.id)
    if not gpu:
        raise UserError(f"{source}: no GPU node (a COMP or COMM_COLL node with is_cpu_op false)")
    index = {n.id: j for j, n in enumerate(gpu)}
    memo: dict[int, frozenset[int]] = {}

    def gpu_sources(node_id: int) -> frozenset[int]:
        """The nearest GPU nodes a CPU node's data comes from (iterative, memoised)."""
        stack = [node_id]
        while stack:
            cur = stack[-1]
            if cur in memo:
                stack.pop()
                continue
            n = by_id.get(cur)
            pending = [
                d
                for d in (n.data_deps if n else [])
                if d not in index and d not in memo and d in by_id
            ]
            if pending:  # terminates: the deps are acyclic (_check_acyclic)
                stack.extend(pending)
                continue
            out: set[int] = set()
            for d in n.data_deps if n else []:
                if d in index:
                    out.add(d)
                elif d in memo:
                    out |= memo[d]
            memo[cur] = frozenset(out)
            stack.pop()
        return memo[node_id]

    streams = sorted({int(n.attrs.get("tid") or 0) for n in gpu})
    stream_index = {t: k for k, t in enumerate(streams)}
    ops: list[GpuOp] = []
    info: list[OpInfo] = []
    for n in gpu:
        deps: set[int] = set()
        for d in n.data_deps:
            if d in index:
                deps.add(index[d])
            elif d in by_id:
                deps |= {index[x] for x in gpu_sources(d)}
        for d in n.ctrl_deps:
            if d in index:
                deps.add(index[d])
        deps.discard(index[n.id])
        comm = n.type == "COMM_COLL_NODE"
        ops.append(
            GpuOp(
                n.name,
                stream_index[int(n.attrs.get("tid") or 0)],
                n.start_us,
                n.duration_us,
                deps=sorted(deps),
                is_comm=comm,
            )
        )
        kind = COMM_TYPES.get(n.attrs.get("comm_type", -1)) if comm else None
        info.append(
            OpInfo(
                n.name,
                "comm" if comm else "kernel",
                0,
                float(index[n.id]),
                comm_kind=kind,
                comm_bytes=int(n.attrs.get("comm_size") or 0),
            )
        )
    st = StepTrace(
        source,
        0,
        1,
        "",
        "chakra",
        0,
        0.0,
        RankGraph([], ops, 0.0),
        info,
        list(range(len(ops))),
        -1,
        0.0,
        "none",
        stream_index=stream_index,
    )
    st.data_deps = sum(len(o.deps) for o in ops)
    if ignored:
        st.flags.append(
            f"chakra_cpu_ctrl_deps_ignored: {ignored} ctrl deps of CPU nodes on themselves or "
            "on later nodes (the Chakra converter's autograd-thread deps, mlcommons/chakra#134) "
            "are left out of the cycle check; the replay follows no CPU node's ctrl deps"
        )
    from lancet_mlir.sim.replay import replay

    try:
        replay([st.graph], host=False)
    except ValueError:
        # the deps are acyclic (checked above), so the stream order (node id order per tid)
        # is what closes the cycle
        raise UserError(
            f"{source}: the GPU nodes' ctrl/data deps contradict their stream order (node id "
            "order per tid)"
        ) from None
    return st
