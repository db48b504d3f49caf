"""Read a PyTorch profiler (Kineto) trace: Chrome-trace JSON, optionally gzip-compressed.

The result is plain data (`RawTrace`): GPU activities, CUDA runtime calls, CPU spans (ATen ops
and annotations), CUDA sync records and the `ProfilerStep#N` windows. Both schemas are read:
in the older one a kernel's `External id` equals its correlation id and its `cpu_op` is found by
time nesting on the launching thread; in the newer one `External id` names the `cpu_op`. Which
one a trace uses is decided from the data (`RawTrace.schema`). Facts about real traces:
docs/formats.md "Profiler traces" and reference/trace-notes.md.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from lancet_mlir.support.errors import UserError
from lancet_mlir.support.files import decode_text, read_bytes

GPU_CATS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "Kernel": "kernel",
    "Memcpy": "memcpy",
    "Memset": "memset",
}
"""Chrome-trace categories of GPU activities -> our kinds."""
CALL_CATS = ("cuda_runtime", "cuda_driver", "Runtime", "Driver")
SPAN_CATS = ("cpu_op", "user_annotation", "Operator", "python_function")
_USED_CATS = {*GPU_CATS, *CALL_CATS, *SPAN_CATS, "cuda_sync"}
"""Categories whose events are read (and so checked); others are skipped unread."""
SCHEMA_VERSIONS = (1,)
"""Kineto `schemaVersion`s this reader knows (absent is accepted too)."""
_STEP = re.compile(r"ProfilerStep#(\d+)$")
STEP_CATS = ("user_annotation", "cpu_op", "Operator")
"""The categories of a `ProfilerStep#N` span: `Operator` is PyTorch 1.8's libkineto, which
wrote every CPU op so."""
OVERLAP_TOLERANCE_US = 1.0
"""Overlap of two consecutive GPU activities on one stream that is put down to clock rounding
(real traces have sub-µs ones); beyond it `RawTrace.overlap_warning` is set."""


@dataclass
class Activity:
    """A GPU activity: kernel, memcpy or memset."""

    name: str
    kind: str
    ts: float
    dur: float
    stream: int
    corr: int
    ext: int
    args: dict[str, Any]


@dataclass
class Call:
    """A CUDA runtime/driver call on a host thread."""

    name: str
    ts: float
    dur: float
    tid: int
    corr: int


@dataclass
class Span:
    """A CPU span: an ATen op (`cpu_op`) or a `user_annotation`."""

    name: str
    cat: str
    ts: float
    dur: float
    tid: int
    ext: int
    args: dict[str, Any]


@dataclass
class SyncRecord:
    """A `cuda_sync` record (newer traces): what a sync call waited on."""

    kind: str
    corr: int
    stream: int
    wait_on_stream: int
    record_corr: int


@dataclass
class RawTrace:
    """One rank's trace as plain data, every list sorted by start time."""

    source: str
    rank: int
    world_size: int
    device: str
    activities: list[Activity]
    calls: list[Call]
    spans: list[Span]
    syncs: list[SyncRecord]
    steps: list[tuple[int, float, float]]
    """(N, ts, dur) of every `ProfilerStep#N`, by start."""
    schema: str = "new"
    pg_config: list[dict[str, Any]] = field(default_factory=list)
    overlap_warning: str | None = None
    """Set when GPU activities on one stream overlap by more than `OVERLAP_TOLERANCE_US`: the
    first such overlap, and how many the trace has."""
    rank_known: bool = False
    """Whether `distributedInfo` states the rank (else `rank` is 0 by default)."""
    world_known: bool = False
    """Whether `distributedInfo` states the world size (else `world_size` is rank + 1)."""


def load_json(path: str) -> Any:
    """The JSON document of `path` (gzip recognised by its magic bytes); UserError if bad."""
    data = read_bytes(path)
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise UserError(f"{path}: not a valid gzip file ({exc})") from None
    # decoded here, not by json.loads: on bytes it guesses UTF-16/32 from NUL bytes and
    # reports a binary file in the codec's words
    text = decode_text(data, path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # objects one after another: Chakra's jsonizer writes that
            stream = _json_stream(text)
            if stream is not None:
                return stream
        raise UserError(f"{path}: not valid JSON ({exc.msg}; truncated?)") from None


class JsonStream(list):
    """The JSON values of a file that holds several, one after another (whitespace between
    them, nothing else): what mlcommons/chakra's jsonizer writes."""


def _json_stream(text: str) -> JsonStream | None:
    """The values of `text` read one after another, or None if it is not such a stream."""
    dec = json.JSONDecoder()
    out = JsonStream()
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos == n:
            return out
        try:
            value, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError:
            return None
        out.append(value)


_INT64 = 1 << 63


def _int(value: Any, default: int = -1) -> int:
    """`value` as an integer that fits 64 bits (as the IR stores it), else `default`."""
    if isinstance(value, bool):
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            return default
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else default
    return default


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _fmt(x: float) -> str:
    """`x` as written in a message: an integral float without its `.0`."""
    return str(int(x)) if x.is_integer() else repr(x)


def _times(
    e: dict[str, Any], name: str, gpu: str | None, source: str
) -> tuple[float, float] | None:
    """(ts, dur) of the complete event `e`, None to skip it; UserError for a bad value. `gpu`
    is the kind of a GPU activity (None for host events): it must have a duration >= 0, where
    a host event without a usable duration is skipped as before."""
    what = f"{gpu} {name!r}" if gpu else f"event {name!r}"
    ts = _field(e, "ts", "a start", gpu, f"{source}: {what}")
    if ts is None:
        return None
    what = f"{what} at ts {_fmt(ts)}"
    dur = _field(e, "dur", "a duration", gpu, f"{source}: {what}")
    if dur is None:
        return None
    if dur < 0:
        if gpu:
            raise UserError(f"{source}: {what}: dur must be >= 0, got {_fmt(dur)}")
        return None
    return ts, dur


_KIND_WORDS = {"step annotation": "step"}
"""What `_field`'s message calls a required event that is no GPU activity."""


def _field(e: dict[str, Any], key: str, meaning: str, gpu: str | None, where: str) -> float | None:
    """The finite number `e[key]`; None when it is absent from a host event (skipped);
    UserError when it is absent from a GPU activity, not a number, or not finite."""
    raw = e.get(key)
    if raw is None:
        if gpu:
            raise UserError(
                f"{where}: no {key} (a {_KIND_WORDS.get(gpu, 'GPU activity')} without "
                f"{meaning} cannot be replayed)"
            )
        return None
    value = _num(raw)
    if value is None:
        raise UserError(f"{where}: {key} must be a number, got {raw!r}")
    if not math.isfinite(value):
        raise UserError(f"{where}: {key} must be finite, got {raw!r}")
    return value


def _overlap_warning(acts: list[Activity], source: str) -> str | None:
    """The warning about GPU activities that overlap on one stream by more than the tolerance
    (`acts` sorted by start), None if none do."""
    last: dict[int, Activity] = {}
    first: tuple[Activity, Activity, float] | None = None
    count = 0
    for a in acts:
        prev = last.get(a.stream)
        if prev is not None:
            overlap = prev.ts + prev.dur - a.ts
            if overlap > OVERLAP_TOLERANCE_US:
                count += 1
                if first is None:
                    first = (a, prev, overlap)
        if prev is None or a.ts + a.dur > prev.ts + prev.dur:
            last[a.stream] = a
    if first is None:
        return None
    a, prev, overlap = first
    more = (
        f"; {count} overlaps beyond {_fmt(OVERLAP_TOLERANCE_US)} us in the trace"
        if count > 1
        else ""
    )
    return (
        f"{source}: stream {a.stream}: {a.kind} {a.name!r} at ts {_fmt(a.ts)} starts before "
        f"{prev.name!r} ends (overlap {_fmt(round(overlap, 3))} us){more}"
    )


def _dist_int(dist: dict[str, Any], key: str, default: int, least: int, source: str) -> int:
    """`distributedInfo[key]` as an int >= `least`, `default` when absent or null; UserError
    for a value that is not one (a rank read as 0 would couple the trace as another rank's)."""
    if dist.get(key) is None:
        return default
    raw = dist[key]
    value = _int(raw, least - 1)
    if value < least or isinstance(raw, float) and not raw.is_integer():
        raise UserError(
            f"{source}: distributedInfo.{key} must be an integer >= {least}, got {raw!r}"
        )
    return value


def _check_gpu_args(e: dict[str, Any], name: str, kind: str, ts: float, source: str) -> None:
    """UserError unless GPU activity `e` has an `args` object with an integer correlation id:
    without it the activity cannot be tied to its launch call, and replaying it as an op
    nothing launched silently drops its host-side wait (every activity of every Kineto trace
    we have, ours and HTA's, carries both `stream` and `correlation`)."""
    args = e.get("args")
    where = f"{source}: {kind} {name!r} at ts {_fmt(ts)}"
    if not isinstance(args, dict):
        raise UserError(
            f"{where}: no args object (a GPU activity needs its stream and correlation id)"
        )
    corr = args.get("correlation")
    if isinstance(corr, bool) or not isinstance(corr, int):
        raise UserError(
            f"{where}: args.correlation must be an integer (it ties the activity to its "
            f"launch), got {corr!r}"
        )


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _step_number(digits: str, source: str) -> int:
    number = int(digits)
    if number >= _INT64:
        raise UserError(f"{source}: ProfilerStep#{digits}: the step number is out of range")
    return number


def _check_unique_steps(steps: list[tuple[int, float, float]], source: str) -> None:
    """UserError when one step number names two different spans (which would be read as one
    step from the first's start)."""
    seen: dict[int, tuple[float, float]] = {}
    for n, ts, dur in steps:
        if n in seen:
            raise UserError(
                f"{source}: ProfilerStep#{n} appears twice (at ts {_fmt(seen[n][0])} and "
                f"{_fmt(ts)}): which one is step {n}?"
            )
        seen[n] = (ts, dur)


def is_kineto(doc: Any) -> bool:
    """Whether `doc` looks like a Chrome-trace document."""
    return isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list)


def parse_kineto(doc: Any, source: str) -> RawTrace:
    """The plain-data form of a Kineto document; UserError for anything it cannot read."""
    if not is_kineto(doc):
        raise UserError(f"{source}: not a Kineto trace (no 'traceEvents' list)")
    version = doc.get("schemaVersion")
    if version is not None and version not in SCHEMA_VERSIONS:
        raise UserError(
            f"{source}: unknown Kineto schemaVersion {version!r} (known: "
            f"{', '.join(map(str, SCHEMA_VERSIONS))})"
        )
    dist = _dict(doc.get("distributedInfo"))
    rank = _dist_int(dist, "rank", 0, 0, source)
    # a trace that states its rank but no world size (HTA's trace_compare) is one rank of a
    # job of at least rank + 1: enough for the single-rank model; coupling needs it stated
    world = _dist_int(dist, "world_size", rank + 1, 1, source)
    pg_raw = dist.get("pg_config")
    pg = [x for x in pg_raw if isinstance(x, dict)] if isinstance(pg_raw, list) else []
    props = doc.get("deviceProperties")
    device = ""
    if isinstance(props, list) and props and isinstance(props[0], dict):
        device = str(props[0].get("name", ""))
    acts: list[Activity] = []
    calls: list[Call] = []
    spans: list[Span] = []
    syncs: list[SyncRecord] = []
    steps: list[tuple[int, float, float]] = []
    devices: dict[str, tuple[str, float]] = {}  # GPU `pid` -> its first activity
    for e in doc["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if not isinstance(cat, str) or cat not in _USED_CATS:
            continue
        name = str(e.get("name", ""))
        m = _STEP.match(name) if cat in STEP_CATS else None
        # a step annotation must have its times: skipping it would replay another step
        times = _times(e, name, "step annotation" if m else GPU_CATS.get(cat), source)
        if times is None:
            continue
        ts, dur = times
        args = _dict(e.get("args"))
        if cat in GPU_CATS:
            _check_gpu_args(e, name, GPU_CATS[cat], ts, source)
            devices.setdefault(repr(e.get("pid")), (name, ts))
            acts.append(
                Activity(
                    name,
                    GPU_CATS[cat],
                    ts,
                    dur,
                    _int(args.get("stream"), _int(e.get("tid"))),
                    _int(args.get("correlation")),
                    _int(args.get("External id")),
                    args,
                )
            )
        elif cat in CALL_CATS:
            calls.append(Call(name, ts, dur, _int(e.get("tid")), _int(args.get("correlation"))))
        elif cat in SPAN_CATS:
            if m:
                steps.append((_step_number(m.group(1), source), ts, dur))
                continue
            spans.append(
                Span(
                    name, str(cat), ts, dur, _int(e.get("tid")), _int(args.get("External id")), args
                )
            )
        elif cat == "cuda_sync":
            syncs.append(
                SyncRecord(
                    str(args.get("cuda_sync_kind", name)),
                    _int(args.get("correlation")),
                    _int(args.get("stream")),
                    _int(args.get("wait_on_stream")),
                    _int(args.get("wait_on_cuda_event_record_corr_id")),
                )
            )
    if len(devices) > 1:
        # streams are numbered per device: merged, two devices' stream 7 would be one FIFO
        (a, (an, at)), (b, (bn, bt)) = list(devices.items())[:2]
        raise UserError(
            f"{source}: GPU activities of {len(devices)} devices (pid {a}: {an!r} at ts "
            f"{_fmt(at)}; pid {b}: {bn!r} at ts {_fmt(bt)}): a trace is one rank on one GPU; "
            "profile one process per GPU"
        )
    acts.sort(key=lambda a: (a.ts, a.corr))
    calls.sort(key=lambda c: (c.ts, c.corr))
    spans.sort(key=lambda s: (s.ts, -s.dur))
    steps = sorted(set(steps), key=lambda s: (s[1], s[0]))
    _check_unique_steps(steps, source)
    schema = "old" if acts and all(a.ext == a.corr for a in acts if a.ext >= 0) else "new"
    return RawTrace(
        source,
        rank,
        world,
        device,
        acts,
        calls,
        spans,
        syncs,
        steps,
        schema,
        pg,
        _overlap_warning(acts, source),
        _int(dist.get("rank")) >= 0,
        dist.get("world_size") is not None,
    )
