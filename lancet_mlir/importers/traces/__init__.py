"""Profiler traces in: Kineto (PyTorch profiler), PyTorch execution traces and Chakra.

* `kineto`: the Chrome-trace JSON reader (`RawTrace`, both schemas);
* `step`: one step of one rank as a replayable graph with inferred dependencies (`StepTrace`);
* `report`: replay against the measurement, multi-rank rendezvous, what-ifs;
* `build`: the IR (`trace.kernel` / `comm` ops with measured times, `trace.host_sync` ops, token edges);
* `nccl`: what an NCCL kernel does (kind, bytes, group).

`load_steps` is the entry point: paths in, one `StepTrace` per rank out. Formats and facts:
docs/formats.md "Profiler traces", reference material in docs/user-guide.md.
"""

from __future__ import annotations

import gzip
import sys
import zlib

from lancet_mlir.importers.traces.chakra import (
    chakra_step,
    is_chakra_binary,
    is_chakra_jsonizer,
    looks_like_chakra_binary,
    parse_chakra_binary,
    parse_chakra_jsonizer,
)
from lancet_mlir.importers.traces.et import is_pytorch_et
from lancet_mlir.importers.traces.kineto import JsonStream, is_kineto, load_json, parse_kineto
from lancet_mlir.importers.traces.step import (
    UNKNOWN_COPY_FLAG,
    StepTrace,
    build_step,
    measure_launch_lags,
    trace_tolerance,
)
from lancet_mlir.support.errors import UserError
from lancet_mlir.support.files import read_bytes


def _chakra(path: str) -> StepTrace | None:
    """The step of a binary Chakra `.et` file, gzip-compressed or not (by its magic bytes),
    or None if `path` is not one (a JSON document, compressed or not, is read by the caller)."""
    data = read_bytes(path)
    if data[:2] == b"\x1f\x8b":
        try:
            # the first bytes tell a gzip-compressed JSON trace (the caller reads it) without
            # inflating all of it twice
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, 64)
            if head.lstrip()[:1] in (b"{", b"["):
                return None
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise UserError(f"{path}: not a valid gzip file ({exc})") from None
    if data[:1] in (b"{", b"["):
        return None
    if not is_chakra_binary(data):
        if looks_like_chakra_binary(data):
            # cut inside its metadata: parsing says where it runs past the end
            parse_chakra_binary(data, path)
        return None
    return chakra_step(parse_chakra_binary(data, path), path)


def _check_world(steps: list[StepTrace]) -> None:
    """UserError unless every trace states the same world size and a rank within it."""
    first = steps[0]
    for st in steps:
        if not 0 <= st.rank < st.world_size:
            raise UserError(f"{st.source}: rank {st.rank} is outside world size {st.world_size}")
        if st.world_size != first.world_size:
            raise UserError(
                f"{st.source}: world size {st.world_size} differs from {first.source}'s "
                f"{first.world_size}"
            )


def _check_groups(steps: list[StepTrace]) -> None:
    """UserError unless, with several traces, every rank of every collective's group is given.

    A rendezvous (report.match_collectives) takes the last arrival and the median end over the
    ranks present: with members missing, their wait becomes "wire" time (2 of DLRM's 8 ranks:
    5710 µs of wire against 212 µs with all 8), the straggler is misnamed and a network
    what-if scales the waiting. A sound fallback would be to replay each rank alone, but that
    is what giving one trace already does, so the refusal says so instead of guessing."""
    present = {st.rank for st in steps}
    missing: set[int] = set()
    for st in steps:
        for j, op in enumerate(st.graph.ops):
            if op.is_comm:
                missing.update(r for r in st.info[j].group or () if r not in present)
    if missing:
        names = ", ".join(map(str, sorted(missing)))
        raise UserError(
            f"{len(present)} of world size {steps[0].world_size} ranks given, but the "
            f"collectives' groups also need rank{'s' if len(missing) > 1 else ''} {names}: "
            "coupling needs every rank of each group; give them all, or one trace alone "
            "(the single-rank model)"
        )


def load_steps(
    paths: list[str],
    step: int | None = None,
    et: list[str] | None = None,
    tool: str = "lancet-trace",
) -> list[StepTrace]:
    """One `StepTrace` per Kineto trace in `paths` (one per rank), sorted by rank; `et[i]`, a
    PyTorch execution trace of the same run, adds data dependencies to `paths[i]`'s step.
    A Kineto trace whose GPU activities overlap on a stream gets one warning line on stderr,
    prefixed with `tool`, and so does one with copies whose name says no direction."""
    if not paths:
        raise UserError("no trace given")
    if et and len(et) != len(paths):
        raise UserError(
            f"--et: {len(et)} execution trace(s) for {len(paths)} trace(s): give one per trace, "
            "in the same order"
        )
    steps: list[StepTrace] = []
    for k, path in enumerate(paths):
        chakra = _chakra(path)
        doc = None
        if chakra is None:
            doc = load_json(path)
            if isinstance(doc, JsonStream) or is_chakra_jsonizer([doc]):
                docs = list(doc) if isinstance(doc, JsonStream) else [doc]
                if not is_chakra_jsonizer(docs):
                    raise UserError(
                        f"{path}: {len(docs)} JSON values one after another, but not Chakra "
                        "jsonizer output (its first object is a GlobalMetadata: version, attr)"
                    )
                chakra = chakra_step(parse_chakra_jsonizer(docs, path), path)
        if chakra is not None:
            if step is not None:
                raise UserError(
                    f"--step: {path} is a Chakra trace, which holds one step (no "
                    "ProfilerStep#N): leave --step out"
                )
            if et:
                raise UserError(
                    f"--et: {path} is a Chakra trace, which has its data dependencies already"
                )
            steps.append(chakra)
            continue
        if isinstance(doc, dict) and "workload_graph" in doc:
            raise UserError(
                f"{path}: ASTRA-sim's feeder JSON ('workload_graph') is not read: give the "
                "Chakra .et, or the jsonizer's JSON of it"
            )
        if isinstance(doc, dict) and isinstance(doc.get("nodes"), list) and "schema" not in doc:
            raise UserError(
                f"{path}: a 'nodes' list without 'schema': not a PyTorch execution trace, and "
                "not Chakra JSON (the jsonizer writes one object per node, one after another)"
            )
        if is_pytorch_et(doc):
            raise UserError(
                f"{path}: a PyTorch execution trace: give it with --et next to its Kineto trace"
            )
        if not is_kineto(doc):
            raise UserError(f"{path}: not a Kineto, Chakra or PyTorch execution trace")
        raw = parse_kineto(doc, path)
        if len(paths) > 1 and not raw.world_known:
            raise UserError(
                f"{path}: distributedInfo states no world_size: several ranks' traces are "
                "coupled only when each states its job's world size (one trace alone is replayed "
                "as one rank)"
            )
        if raw.overlap_warning is not None:
            sys.stderr.write(f"{tool}: warning: {raw.overlap_warning}\n")
        st = build_step(raw, step)
        for flag in st.flags:
            if flag.startswith(UNKNOWN_COPY_FLAG):
                sys.stderr.write(f"{tool}: warning: {path}: {flag}\n")
        if et:
            from lancet_mlir.importers.traces.et import add_data_dependencies, et_rank, parse_et

            et_doc = load_json(et[k])
            add_data_dependencies(
                st, raw, parse_et(et_doc, et[k]), et_source=et[k], et_rank=et_rank(et_doc)
            )
            # an op whose start a data dependency now explains did not wait for its launch
            measure_launch_lags(st, trace_tolerance(raw))
        steps.append(st)
    if len(steps) > 1 and any(s.period_basis == "none" for s in steps):
        raise UserError(
            "Chakra traces are replayed one at a time (they carry no times to couple ranks by)"
        )
    _check_world(steps)
    ranks = [s.rank for s in steps]
    if len(set(ranks)) != len(ranks):
        raise UserError(f"several traces claim the same rank ({sorted(ranks)}): give one per rank")
    if len(steps) > 1:
        _check_groups(steps)
    if len({s.step for s in steps}) > 1:
        raise UserError(
            "the traces' steps differ ("
            + ", ".join(f"rank {s.rank}: {s.step}" for s in steps)
            + "): pass --step N"
        )
    return sorted(steps, key=lambda s: s.rank)


__all__ = ["StepTrace", "load_steps"]
