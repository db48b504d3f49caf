"""The outputs about a simulated schedule: the JSON report, the Chrome/Perfetto trace and the
Gantt picture, as the `simulate` pass writes them (`simulate{report="r.json"
timeline="t.json" gantt="g.png"}`; lancet-opt's `--report/--timeline/--gantt` append that
pass).

`check_output_request` validates the request before any work (a picture format the suffix
names, no file written twice, a well-formed window); `write_outputs` builds every
requested document first and then writes each through a temporary file and a rename
(`support.files.atomic_path`; under lancet-opt they join its all-or-nothing output set), so
no output is ever half-written. Errors are `ParameterError`s naming the parameter (`report`,
`gantt-window`, ...) through `names`, so a tool can name its flags instead.

What the driver knows and a pass does not (the input file's name and the pipeline) comes
from `invocation(...)`, a context a driver may set around the run; without it (plain
`xdsl-opt`) the report says `input: null` and `pipeline: null`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from lancet_mlir.dialects.comm import module_world_size
from lancet_mlir.support.errors import ParameterError

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

    from lancet_mlir.cost.cost_model import CostConfig, CostModel
    from lancet_mlir.sim.blocks import BlockResult
    from lancet_mlir.sim.gantt import GanttBlock, Window
    from lancet_mlir.sim.options import SimOptions

PICTURE_FORMATS = {"": "png", ".png": "png", ".svg": "svg", ".pdf": "pdf"}
"""Gantt picture formats by file suffix (no suffix, e.g. `-` or `/dev/null`: PNG)."""


@dataclass(frozen=True)
class OutputRequest:
    """Where each output goes (None: not written) and the Gantt window's text."""

    report: str | None = None
    timeline: str | None = None
    gantt: str | None = None
    gantt_window: str | None = None

    def any(self) -> bool:
        """Whether any file is requested."""
        return bool(self.report or self.timeline or self.gantt)


PARAMETERS: Mapping[str, str] = {
    "report": "report", "timeline": "timeline", "gantt": "gantt", "gantt_window": "gantt-window",
}  # fmt: skip
"""How errors and warnings name each request field (the `simulate` pass's option names)."""


@dataclass(frozen=True)
class Invocation:
    """The input file (`-`: stdin) and the pipeline of the run, for the report; None when
    the driver did not say (plain `xdsl-opt` tells its passes neither)."""

    input: str | None = None
    pipeline: str | None = None


_INVOCATION: ContextVar[Invocation | None] = ContextVar("lancet_invocation", default=None)


@contextmanager
def invocation(input_file: str | None, pipeline: str) -> Iterator[None]:
    """Tell the outputs written meanwhile the input file and pipeline of the run."""
    token = _INVOCATION.set(Invocation(input_file or "-", pipeline))
    try:
        yield
    finally:
        _INVOCATION.reset(token)


def current_invocation() -> Invocation:
    """The invocation set by `invocation`, or the default one."""
    return _INVOCATION.get() or Invocation()


def picture_format(path: str, parameter: str = "gantt") -> str:
    """The matplotlib format a picture path's suffix names; ParameterError for others."""
    suffix = os.path.splitext(path)[1].lower() if path != "-" else ""
    found = PICTURE_FORMATS.get(suffix)
    if found is None:
        raise ParameterError(parameter, path, f"cannot write a '{suffix}' picture; use "
                             ".png, .svg or .pdf", quoted=False)  # fmt: skip
    return found


def check_output_request(
    request: OutputRequest, names: Mapping[str, str] = PARAMETERS
) -> Window | None:
    """Validate `request` before any work; returns the parsed window.

    ParameterError (named through `names`) for a picture format other than PNG, SVG and
    PDF, for a report or timeline named `*.mlir`, for two outputs that name the same file,
    and for a malformed window."""
    from lancet_mlir.sim.gantt import parse_window

    if request.gantt:
        picture_format(request.gantt, names["gantt"])
    for field in ("report", "timeline"):
        path = getattr(request, field)
        if path and Path(path).suffix.lower() == ".mlir":
            # under xdsl-opt a pass cannot see the input's name: a JSON output named like a
            # module is most likely the input itself (an outside review lost its module so)
            raise ParameterError(names[field], path, "writes JSON; refusing a .mlir file name "
                                 "(the input module?)", quoted=False)  # fmt: skip
    given = [(f, p) for f in ("report", "timeline", "gantt") if (p := getattr(request, f))]
    for k, (field, path) in enumerate(given):
        for other, other_path in given[:k]:
            if same_target(path, other_path):
                raise ParameterError(names[field], path, f"{names[other]} writes that file "
                                     "too; give each output its own file", quoted=False)  # fmt: skip
    if request.gantt_window is None:
        return None
    try:
        return parse_window(request.gantt_window)
    except ParameterError as exc:
        raise ParameterError(names["gantt_window"], exc.value, exc.reason) from None


def same_target(a: str, b: str) -> bool:
    """Whether two output paths are one file (`/dev/null` may take several)."""
    if os.devnull in (a, b):
        return False
    if a == "-" or b == "-":
        return a == b
    return os.path.realpath(a) == os.path.realpath(b)


def window_warnings(
    request: OutputRequest, results: Sequence[BlockResult], names: Mapping[str, str] = PARAMETERS
) -> list[str]:
    """One line each: a window given without a picture, or one that starts after the end."""
    if request.gantt_window is None:
        return []
    window_name = names["gantt_window"]
    if not request.gantt:
        return [f"{window_name} has no effect without {names['gantt']}"]
    from lancet_mlir.sim.gantt import parse_window, time_unit

    window = parse_window(request.gantt_window)
    end = max((r.timeline.makespan_us for r in shown_blocks(results)), default=0.0)
    if window.start_us >= end:
        unit, scale = time_unit(end)
        return [f"{window_name} {request.gantt_window!r} starts after the end of the "
                f"timeline ({end / scale:.4g} {unit}): the picture shows no ops"]  # fmt: skip
    return []


def write_outputs(
    module: ModuleOp,
    results: Sequence[BlockResult],
    cost_model: CostModel,
    sim: SimOptions,
    request: OutputRequest,
    costing_spec: str | None,
    warning_prefix: str = "lancet",
) -> None:
    """Write the requested outputs of `results` (the simulation of `module` under
    `cost_model` and `sim`); `costing_spec`: the simulating pass as written (the report's
    `costing.pass`). Every document is built before the first file is written. A report whose
    bodies mix measured and estimated compute times prints one warning line
    (`<warning_prefix>: warning: ...`)."""
    run = current_invocation()
    texts: list[tuple[str, str]] = []
    if request.timeline:
        texts.append((request.timeline, json.dumps(timeline_trace(results, cost_model)) + "\n"))
    if request.report:
        config = cost_model.config
        if config.world_size is None:  # say which world size the collectives were costed at
            config = replace(config, world_size=module_world_size(module))
        report = build_report(results, cost_model.notes, run, costing_spec, config, sim)
        report.update(how_costed(results, cost_model, warning_prefix))
        texts.append((request.report, json.dumps(report, indent=2) + "\n"))
    figure = None
    if request.gantt:
        figure = gantt_picture(results, run, _window(request))
    from lancet_mlir.support.files import atomic_path

    for path, text in texts:
        with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    if figure is not None and request.gantt:
        from lancet_mlir.sim.gantt import save_figure

        save_figure(figure, request.gantt, picture_format(request.gantt))


def _window(request: OutputRequest) -> Window | None:
    from lancet_mlir.sim.gantt import parse_window

    return parse_window(request.gantt_window) if request.gantt_window is not None else None


def timeline_trace(results: Sequence[BlockResult], cost_model: CostModel) -> dict:
    """One trace process per simulated block (pid = its position in module order); each
    event's args name where its time came from (`time_source`)."""
    from lancet_mlir.cost.time_source import time_source
    from lancet_mlir.sim.trace import chrome_trace, merge_traces

    return merge_traces(
        [
            chrome_trace(
                r.graph,
                r.durations,
                r.timeline,
                pid=k,
                process_name=runs_label(r),
                sources=[time_source(cost_model, op) for op in r.graph.ops],
            )
            for k, r in enumerate(results)
        ]
    )


def _shipped_table(cost_model: CostModel) -> list[str]:
    """The comm table shipped for the device (lancet_mlir/data), if it has one."""
    from lancet_mlir.cost.fileio import data_path

    name = cost_model.device.comm_table
    return [str(data_path(name))] if name else []


def how_costed(
    results: Sequence[BlockResult], cost_model: CostModel, warning_prefix: str | None = None
) -> dict:
    """The report's account of how it was costed: tool versions, the cost model's input
    files with their content hashes, and per time source how many ops of the function
    bodies (and of the bodies costed in their ops) took their time from it, with the bodies
    whose compute mixes measured and estimated times (`time_source.source_summary`; with a
    `warning_prefix`, one warning line on stderr when there are any)."""
    from lancet_mlir.cost.time_source import source_summary, warn_mixed
    from lancet_mlir.support.provenance import (
        describe_files,
        lancet_mlir_version,
        xdsl_version,
    )

    cfg = cost_model.config
    top = [r for r in results if r.top_level or r.in_parent]  # with the bodies costed in ops
    sources = source_summary(cost_model, [(r.label, r.graph.ops) for r in top])
    if warning_prefix is not None:
        warn_mixed(sources, warning_prefix)
    return {
        "provenance": {
            "lancet_mlir_version": lancet_mlir_version(),
            "xdsl_version": xdsl_version(),
            "device": cost_model.device.name,
            "device_comm_table": describe_files(_shipped_table(cost_model)),
            "profiles": describe_files(cfg.profiles),
            "comm_tables": describe_files(cfg.comm_tables),
        },
        "time_sources": sources,
    }


_TOTAL_KEYS = (
    "makespan_us",
    "compute_us",
    "comm_us",
    "exposed_comm_us",
    "overlap_us",
    "lower_bound_us",
    "num_ops",
    "num_collectives",
)


def build_report(
    results: Sequence[BlockResult],
    notes: Sequence[str],
    run: Invocation,
    costing_spec: str | None,
    config: CostConfig,
    sim: SimOptions,
) -> dict:
    """The whole report document: totals over the function bodies, how they were costed,
    then per-function and nested-block entries."""
    top = [r for r in results if r.top_level]
    report: dict = {key: sum(getattr(r.summary, key) for r in top) for key in _TOTAL_KEYS}
    for key in _TOTAL_KEYS:  # times stay floats (0.0, not sum([])'s 0) in an empty module
        if key.endswith("_us"):
            report[key] = float(report[key])
    floors = [_exposed_floor(r, sim) for r in top]
    report["exposed_comm_floor_us"] = (
        None if None in floors else float(sum(f for f in floors if f is not None))
    )
    report["num_comm_streams"] = sim.num_comm_streams
    report["overlap_slowdown"] = sim.overlap_slowdown
    if sim.launch_overhead_us:  # only when used: reports without it stay as they were
        report["launch_overhead_us"] = sim.launch_overhead_us
    report["costing"] = {
        "pass": costing_spec,
        **config.describe(),
        "num_comm_streams": sim.num_comm_streams,
        "overlap_slowdown": sim.overlap_slowdown,
    }
    report["functions"] = [
        {
            "name": r.function,
            "label": r.label,
            **r.summary.as_dict(),
            "exposed_comm_floor_us": None if f is None else float(f),
        }
        for r, f in zip(top, floors, strict=True)
    ]
    report["nested_blocks"] = [
        {"label": r.label, **r.summary.as_dict(), **_in_parent(r)}
        for r in results
        if not r.top_level
    ]
    report["cost_model"] = {"notes": [*notes, *(n for r in results for n in r.notes)]}
    report["pipeline"] = run.pipeline
    report["input"] = run.input
    return report


def _in_parent(result: BlockResult) -> dict:
    """For a body costed as part of its op (or call): that it is, and its runs per
    execution of the op (a loop's trips)."""
    return {"in_parent": True, "runs": result.runs} if result.in_parent else {}


FLOOR_MAX_OPS = 20_000
"""Largest block whose exposed-communication floor the report computes (its reachability
bitsets take V^2 / 8 bytes: 50 MB at this size); larger blocks report null."""

FLOOR_MAX_EDGES = 150_000
"""Largest overlap-capacity network the report solves: about 0.5 s (a 24-layer GPT-2 MoE has
about 106 000 edges; a 48-layer one 416 000, which took 4-6 s, more than half the run).
Beyond it the floor is that of the unhideable collectives alone (still a floor, only a
weaker one)."""


def _exposed_floor(result: BlockResult, sim: SimOptions) -> float | None:
    """The block's floor on exposed communication over every order (`sim/floor.py`)."""
    from lancet_mlir.sim.floor import exposed_comm_floor

    if len(result.durations) > FLOOR_MAX_OPS:
        return None
    return exposed_comm_floor(
        result.graph, result.durations, sim.num_comm_streams, sim.overlap_slowdown, FLOOR_MAX_EDGES
    ).floor_us


def gantt_picture(results: Sequence[BlockResult], run: Invocation, window: Window | None):  # noqa: ANN201
    """The Gantt figure of `results` (matplotlib Figure; save it with `sim.gantt.save_figure`)."""
    from lancet_mlir.sim.gantt import gantt_figure

    shown = shown_blocks(results)
    total = sum(r.timeline.makespan_us for r in shown if r.top_level)
    title = f"{_input_title(run)}: makespan {total:.1f} µs"
    return gantt_figure(gantt_blocks(shown), title, window)


def _input_title(run: Invocation) -> str:
    if run.input is None:
        return "simulated"
    return "stdin" if run.input == "-" else run.input


def compare_picture(
    before: Sequence[BlockResult],
    after: Sequence[BlockResult],
    run: Invocation,
    window: Window | None,
):  # noqa: ANN201
    """The figure of the input's (`before`) and the final (`after`) timelines."""
    from lancet_mlir.sim.gantt import compare_figure

    pipeline = run.pipeline or "no passes"
    title = f"{_input_title(run)}: input vs after {pipeline}"
    return compare_figure(gantt_blocks(shown_blocks(before)), gantt_blocks(shown_blocks(after)),
                          title, window, names=("input", "after " + pipeline))  # fmt: skip


def shown_blocks(results: Sequence[BlockResult]) -> list[BlockResult]:
    """The blocks the Gantt chart draws: the top-level ones and every body whose work is
    part of an op's time (one lane group each, in module order); all blocks if none."""
    return [r for r in results if r.top_level or r.in_parent] or list(results)


def gantt_blocks(results: Sequence[BlockResult]) -> list[GanttBlock]:
    """The drawable form of simulated blocks."""
    from lancet_mlir.sim.gantt import GanttBlock, op_categories
    from lancet_mlir.sim.trace import op_names

    return [GanttBlock(runs_label(r), r.timeline, op_categories(r.graph), op_names(r.graph),
                       nested=not r.top_level) for r in results]  # fmt: skip


def runs_label(result: BlockResult) -> str:
    """The block's label, with `(xN)` when it runs N times per execution of its op."""
    return result.label if result.runs == 1 else f"{result.label} (x{result.runs})"


__all__ = [
    "PARAMETERS",
    "PICTURE_FORMATS",
    "Invocation",
    "OutputRequest",
    "build_report",
    "check_output_request",
    "compare_picture",
    "current_invocation",
    "gantt_blocks",
    "gantt_picture",
    "how_costed",
    "invocation",
    "picture_format",
    "runs_label",
    "same_target",
    "shown_blocks",
    "timeline_trace",
    "window_warnings",
    "write_outputs",
]
