"""Profiler traces in: Kineto (PyTorch profiler), PyTorch execution traces and Chakra.

* `kineto`: the Chrome-trace JSON reader (`RawTrace`, both schemas);
* `step`: one step of one rank as a replayable graph with inferred dependencies (`StepTrace`);
* `report`: replay against the measurement, multi-rank rendezvous, what-ifs;
* `build`: the IR (`trace.kernel` / `comm` ops with measured times, token edges);
* `nccl`: what an NCCL kernel does (kind, bytes, group).

`load_steps` is the entry point: paths in, one `StepTrace` per rank out. Formats and facts:
docs/formats.md "Profiler traces", reference material in docs/user-guide.md.
"""

from __future__ import annotations

from lancet_mlir.importers.traces.kineto import is_kineto, load_json, parse_kineto
from lancet_mlir.importers.traces.step import StepTrace, build_step
from lancet_mlir.support.errors import UserError


def load_steps(paths: list[str], step: int | None = None) -> list[StepTrace]:
    """One `StepTrace` per Kineto trace in `paths` (one per rank), sorted by rank."""
    if not paths:
        raise UserError("no trace given")
    steps: list[StepTrace] = []
    for path in paths:
        doc = load_json(path)
        if not is_kineto(doc):
            raise UserError(f"{path}: not a Kineto trace (no 'traceEvents' list)")
        steps.append(build_step(parse_kineto(doc, path), step))
    ranks = [s.rank for s in steps]
    if len(set(ranks)) != len(ranks):
        raise UserError(f"several traces claim the same rank ({sorted(ranks)}): give one per rank")
    if len({s.step for s in steps}) > 1:
        raise UserError("the traces' steps differ (" + ", ".join(f"rank {s.rank}: {s.step}" for s in steps)
                        + "): pass --step N")
    return sorted(steps, key=lambda s: s.rank)


__all__ = ["StepTrace", "load_steps"]
