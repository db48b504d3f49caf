"""lancet-opt's cost-model flags (sugar for module attributes) and its outputs about the
final schedule.

`register_arguments` adds the flags; `check_flags` validates them before any input is read;
`set_module_attributes` writes them onto each parsed module as `lancet.*` attributes (so `-o`
and `--print-between-passes` show them and the output re-runs identically with plain
`xdsl-opt`) and loads the files they name, so a bad file fails before any pass runs;
`after_pipeline` writes `--timeline`, `--report` and `--gantt`.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute
from xdsl.passes import ModulePass

from lancet_mlir import attrs
from lancet_mlir.cost.clusters import cluster_names
from lancet_mlir.cost.devices import device_names
from lancet_mlir.dialects.comm import module_world_size
from lancet_mlir.passes.costing import CostOptions
from lancet_mlir.tools.cli import non_empty, positive_int
from lancet_mlir.tools.errors import UserError

if TYPE_CHECKING:
    from lancet_mlir.cost.cost_model import CostConfig, CostModel
    from lancet_mlir.sim.blocks import BlockResult
    from lancet_mlir.sim.options import SimOptions


def register_arguments(group: argparse._ArgumentGroup) -> None:
    """Add the cost-model and output flags of lancet-opt."""
    group.add_argument("--profile", action="append", default=[], metavar="FILE",
                       help="measured op timings (ProfileDB JSON or Lancet .profile); repeatable; "
                       "sets lancet.profile")
    group.add_argument("--comm-table", action="append", default=[], metavar="FILE",
                       help="measured collective times: lancet-mlir CSV, nccl-tests log or XLA "
                       "collective perf table (docs/formats.md); repeatable; sets lancet.comm_table")
    group.add_argument("--device", default=None, metavar="NAME", type=non_empty,
                       help=f"GPU of every rank, one of: {', '.join(device_names())} (default: "
                       "the cluster's, else h100); sets lancet.device")
    group.add_argument("--cluster", default=None, metavar="NAME",
                       help=f"cluster preset (device, GPUs per node, network), one of: "
                       f"{', '.join(cluster_names())}; sets lancet.cluster")
    group.add_argument("--gpus-per-node", type=positive_int, default=None, metavar="N",
                       help="GPUs per NVLink domain (default: the cluster's / device's); "
                       "sets lancet.gpus_per_node")
    group.add_argument("--network-gbps", type=float, default=None, metavar="F",
                       help="inter-node network Gb/s per GPU (default: the cluster's / device's); "
                       "sets lancet.network_gbps")
    group.add_argument("--world-size", type=positive_int, default=None, metavar="N",
                       help="set the module's lancet.world_size")
    group.add_argument("--overlap-slowdown", type=float, default=None, metavar="F",
                       help="compute slowdown while communication runs (default 1.0); "
                       "sets lancet.overlap_slowdown")
    group.add_argument("--launch-overhead-us", type=float, default=None, metavar="US",
                       help="host time per op launch: an op starts no earlier than launched "
                       "(default 0: free launches); sets lancet.launch_overhead_us")
    group.add_argument("--comm-streams", type=positive_int, default=None, metavar="N",
                       help="communication streams of the simulator (default 1, as in Lancet); "
                       "sets lancet.comm_streams")
    group.add_argument("--timeline", default=None, metavar="FILE",
                       help="write a Chrome/Perfetto trace of the simulated final schedule")
    group.add_argument("--report", default=None, metavar="FILE",
                       help="write a JSON report (makespan_us, compute_us, comm_us, exposed_comm_us, "
                       "how it was costed, ...)")
    group.add_argument("--gantt", default=None, metavar="FILE.png",
                       help="draw the simulated timeline with matplotlib (ops coloured by kind)")
    group.add_argument("--gantt-compare", default=None, metavar="FILE.png",
                       help="draw the input's and the output's timelines on one time axis")
    group.add_argument("--gantt-window", default=None, metavar="START:END",
                       help="zoom the Gantt pictures to a time range, e.g. 2ms:5ms or 300:900 "
                       "(µs); either side may be empty")
    group.add_argument("--mpi", action="store_true",
                       help="under mpiexec: optimize on rank 0 and broadcast the result")


OUTPUT_FLAGS = ("output_file", "timeline", "report", "gantt", "gantt_compare")
"""The destinations of lancet-opt's outputs (`args` attributes); `output_file` is `-o`."""


def check_output_paths(args: argparse.Namespace) -> None:
    """Before any work: every output can be written, none is the input, at most one is `-`.

    `args.output_file` is `-` (stdout) when `-o` was not given."""
    from lancet_mlir.support.files import STDOUT, check_output_folder

    inputs = [args.input_file] if getattr(args, "input_file", None) else []
    given = [(flag, getattr(args, flag, None)) for flag in OUTPUT_FLAGS]
    given = [(flag, path) for flag, path in given if path]
    for flag, path in given:
        check_output_folder(path, _flag_name(flag), inputs)
    on_stdout = [_flag_name(flag) for flag, path in given if path == STDOUT]
    if len(on_stdout) > 1:
        what = "the IR (-o, default stdout)" if on_stdout[0] == "-o" else on_stdout[0]
        raise UserError(
            f"{on_stdout[1]} -: standard output already carries {what}; only one output can "
            "go there (e.g. add -o FILE or -o /dev/null)"
        )


def _flag_name(dest: str) -> str:
    return "-o" if dest == "output_file" else "--" + dest.replace("_", "-")


def check_flags(args: argparse.Namespace) -> None:
    """Validate the cost flags' names and numbers (one UserError naming the flag)."""
    from lancet_mlir.cost.clusters import get_cluster
    from lancet_mlir.cost.devices import get_device
    from lancet_mlir.sim.options import MAX_COMM_STREAMS

    for flag, lookup in (("device", get_device), ("cluster", get_cluster)):
        value = getattr(args, flag, None)
        if value is None:
            continue
        try:
            lookup(value)
        except UserError as exc:
            raise UserError(f"--{flag}: {exc}") from None
    streams = getattr(args, "comm_streams", None)
    if streams is not None and streams > MAX_COMM_STREAMS:
        raise UserError(f"--comm-streams: must be <= {MAX_COMM_STREAMS}, got {streams} (real "
                        "jobs use a handful; Lancet uses 1)")  # fmt: skip
    gbps = getattr(args, "network_gbps", None)
    if gbps is not None and not (math.isfinite(gbps) and gbps > 0):
        raise UserError(f"--network-gbps: must be a finite number > 0, got {gbps}")
    _checked_slowdown(getattr(args, "overlap_slowdown", None))
    overhead = getattr(args, "launch_overhead_us", None)
    if overhead is not None and not (math.isfinite(overhead) and overhead >= 0):
        raise UserError(f"--launch-overhead-us: must be finite and >= 0, got {overhead}")


def flag_attributes(args: argparse.Namespace) -> dict[str, Attribute]:
    """The module attributes the given flags set (flags not given set nothing)."""
    out: dict[str, Attribute] = {}
    for flag, name in (("device", attrs.DEVICE), ("cluster", attrs.CLUSTER)):
        text = getattr(args, flag, None)
        if text is not None:
            out[name] = StringAttr(str(text))
    for flag, name in (("profile", attrs.PROFILE), ("comm_table", attrs.COMM_TABLE)):
        files = [str(f) for f in getattr(args, flag, None) or []]
        if files:
            out[name] = StringAttr(files[0]) if len(files) == 1 else ArrayAttr(
                [StringAttr(f) for f in files])
    for flag, name in (("world_size", attrs.WORLD_SIZE), ("gpus_per_node", attrs.GPUS_PER_NODE),
                       ("comm_streams", attrs.COMM_STREAMS)):
        count = getattr(args, flag, None)
        if count is not None:
            out[name] = IntegerAttr(int(count), i64)
    for flag, name in (("network_gbps", attrs.NETWORK_GBPS),
                       ("overlap_slowdown", attrs.OVERLAP_SLOWDOWN),
                       ("launch_overhead_us", attrs.LAUNCH_OVERHEAD_US)):
        number = getattr(args, flag, None)
        if number is not None:
            out[name] = FloatAttr(float(number), Float64Type())
    return out


def set_module_attributes(module: ModuleOp, args: argparse.Namespace) -> None:
    """Write the flags onto `module` (overriding its attributes). When flags were given, build
    the module's cost model once now, so a bad file fails before any pass runs, with one line
    naming the file (the model is cached for the passes)."""
    given = flag_attributes(args)
    if not given:
        return
    module.attributes.update(given)
    from lancet_mlir.cost.cost_model import CostModel
    from lancet_mlir.cost.settings import module_cost_settings
    from lancet_mlir.sim.options import module_sim_options

    CostModel.from_config(module_cost_settings(module).config())
    module_sim_options(module)


@dataclass(frozen=True)
class _ModuleCosting(CostOptions):
    """The costing of a module with no pass options: its attributes and the defaults."""

    name = "lancet-opt"


def report_costing(passes: Sequence[ModulePass]) -> CostOptions:
    """The costing the outputs use: the last costing pass of the pipeline (its options and
    the module), else the module's attributes alone."""
    costing = [p for p in passes if isinstance(p, CostOptions)]
    return costing[-1] if costing else _ModuleCosting()


def before_pipeline(
    module: ModuleOp, args: argparse.Namespace, passes: Sequence[ModulePass] = ()
) -> list[BlockResult] | None:
    """With `--gantt-compare`, simulate the input module (before any pass, costed as the
    outputs will be: `report_costing(passes)`) and return it."""
    if not getattr(args, "gantt_compare", None):
        return None
    from lancet_mlir.sim.blocks import simulate_module

    _gantt_window(args)  # a bad window fails before any pass runs
    costing = report_costing(passes)
    return simulate_module(module, costing.cost_model(module), costing.sim_options(module))


def after_pipeline(
    ctx: Context,
    module: ModuleOp,
    args: argparse.Namespace,
    passes: Sequence[ModulePass] = (),
    before: list[BlockResult] | None = None,
) -> None:
    """Write the requested outputs about the final schedule.

    If `--timeline`, `--report` or `--gantt` is given, every block of the final module is
    simulated in its current order (fixed-order evaluation; the IR is not annotated) with the
    costing of the pipeline's last costing pass (`simulate`, `lancet-schedule`: its options
    over the module's `lancet.*` attributes), or of the module's attributes when the pipeline
    has none, and:
    * `--timeline FILE`: a Chrome/Perfetto trace; each simulated block is its own process
      (`pid` = block number in module order, named `@func`, `@func/<op>#k` for blocks nested
      in ops, `<module>` for bare top-level ops), each stream a thread;
    * `--report FILE`: JSON with the totals over function bodies (`makespan_us`,
      `compute_us`, `comm_us`, `exposed_comm_us`, `overlap_us`, `lower_bound_us`,
      `exposed_comm_floor_us`, ...; the
      functions are taken to run one after the other, so times add up), per-function and
      nested-block entries, how it was costed (`costing`: the pass and its options, device,
      cluster, network, files, simulator options; `provenance`: versions and file hashes;
      `time_sources`), the cost model's notes, the pipeline and the input file;
    * `--gantt FILE.png`: one group of stream rows per function body;
    * `--gantt-compare FILE.png`: `before` (the input's simulation, from before_pipeline)
      above the final schedule, on one time axis. `--gantt-window` zooms both pictures.
    Files are written atomically. With `--split-input-file` the last chunk's outputs win.
    Finally, if the passes or the outputs costed ops at 0 for lack of any timing information,
    one summary warning names them on stderr.
    """
    from lancet_mlir.cost.cost_model import CostModel

    costing = report_costing(passes)
    paths = {flag: getattr(args, flag, None) for flag in ("timeline", "report", "gantt")}
    if any(paths.values()):
        _write_outputs(module, args, paths, costing)
    if before is not None and getattr(args, "gantt_compare", None):
        _write_gantt_compare(args.gantt_compare, before, module, args, costing)
    configs = [p.cost_config(module) for p in passes if isinstance(p, CostOptions)]
    configs.append(costing.cost_config(module))
    for config in dict.fromkeys(configs):  # each model used, once, in pipeline order
        CostModel.from_config(config).warn_unknown("lancet-opt")


def _write_outputs(
    module: ModuleOp,
    args: argparse.Namespace,
    paths: dict[str, str | None],
    costing: CostOptions,
) -> None:
    """Simulate the final module and write the requested files."""
    from lancet_mlir.sim.blocks import simulate_module

    cost_model = costing.cost_model(module)
    sim = costing.sim_options(module)
    results = simulate_module(module, cost_model, sim)
    if paths["timeline"]:
        _write_json(paths["timeline"], _timeline_trace(results, cost_model), indent=None)
    if paths["report"]:
        config = cost_model.config
        if config.world_size is None:  # say which world size the collectives were costed at
            config = replace(config, world_size=module_world_size(module))
        report = _report(results, cost_model.notes, args, costing, config, sim)
        report.update(_how_costed(results, cost_model))
        _write_json(paths["report"], report, indent=2)
    if paths["gantt"]:
        _write_gantt(paths["gantt"], results, args)




def _checked_slowdown(value: float | None) -> float | None:
    if value is None:
        return None
    if not (math.isfinite(value) and value >= 1.0):
        raise UserError(f"--overlap-slowdown: must be finite and >= 1.0, got {value}")
    return value


def _timeline_trace(results: Sequence[BlockResult], cost_model: CostModel) -> dict:
    """One trace process per simulated block (pid = its position in module order); each
    event's args name where its time came from (`time_source`)."""
    from lancet_mlir.cost.time_source import time_source
    from lancet_mlir.sim.trace import chrome_trace, merge_traces

    return merge_traces([
        chrome_trace(r.graph, r.durations, r.timeline, pid=k, process_name=_runs_label(r),
                     sources=[time_source(cost_model, op) for op in r.graph.ops])
        for k, r in enumerate(results)
    ])


def _shipped_table(cost_model: CostModel) -> list[str]:
    """The comm table shipped for the device (lancet_mlir/data), if it has one."""
    from lancet_mlir.cost.fileio import data_path

    name = cost_model.device.comm_table
    return [str(data_path(name))] if name else []


def _how_costed(results: Sequence[BlockResult], cost_model: CostModel) -> dict:
    """The report's account of how it was costed: tool versions, the cost model's input
    files with their content hashes, and per time source how many ops of the function
    bodies took their time from it."""
    from lancet_mlir.cost.time_source import count_sources
    from lancet_mlir.support.provenance import (
        describe_files,
        lancet_mlir_version,
        xdsl_version,
    )

    cfg = cost_model.config
    top = [r for r in results if r.top_level or r.in_parent]  # with the bodies costed in ops
    return {
        "provenance": {
            "lancet_mlir_version": lancet_mlir_version(),
            "xdsl_version": xdsl_version(),
            "device": cost_model.device.name,
            "device_comm_table": describe_files(_shipped_table(cost_model)),
            "profiles": describe_files(cfg.profiles),
            "comm_tables": describe_files(cfg.comm_tables),
        },
        "time_sources": count_sources(cost_model, [op for r in top for op in r.graph.ops]),
    }


_TOTAL_KEYS = (
    "makespan_us", "compute_us", "comm_us", "exposed_comm_us", "overlap_us", "lower_bound_us",
    "num_ops", "num_collectives",
)


def _report(
    results: Sequence[BlockResult],
    notes: Sequence[str],
    args: argparse.Namespace,
    costing: CostOptions,
    config: CostConfig,
    sim: SimOptions,
) -> dict:
    """The whole `--report` document: totals over the function bodies, how they were costed,
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
        "pass": costing.costing_spec() if not isinstance(costing, _ModuleCosting) else None,
        **config.describe(),
        "num_comm_streams": sim.num_comm_streams,
        "overlap_slowdown": sim.overlap_slowdown,
    }
    report["functions"] = [
        {"name": r.function, "label": r.label, **r.summary.as_dict(),
         "exposed_comm_floor_us": None if f is None else float(f)}
        for r, f in zip(top, floors, strict=True)
    ]
    report["nested_blocks"] = [
        {"label": r.label, **r.summary.as_dict(), **_in_parent(r)}
        for r in results if not r.top_level
    ]
    report["cost_model"] = {"notes": [*notes, *(n for r in results for n in r.notes)]}
    report["pipeline"] = getattr(args, "passes", "") or ""
    report["input"] = getattr(args, "input_file", None) or "-"
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


def _write_gantt(path: str, results: Sequence[BlockResult], args: argparse.Namespace) -> None:
    from lancet_mlir.sim.gantt import gantt_figure, save_figure

    shown = _shown(results)
    total = sum(r.timeline.makespan_us for r in shown if r.top_level)
    title = f"{getattr(args, 'input_file', None) or 'stdin'}: makespan {total:.1f} µs"
    save_figure(gantt_figure(_gantt_blocks(shown), title, _gantt_window(args)), path)


def _write_gantt_compare(
    path: str,
    before: Sequence[BlockResult],
    module: ModuleOp,
    args: argparse.Namespace,
    costing: CostOptions,
) -> None:
    from lancet_mlir.sim.blocks import simulate_module
    from lancet_mlir.sim.gantt import compare_figure, save_figure

    after = simulate_module(module, costing.cost_model(module), costing.sim_options(module))
    pipeline = getattr(args, "passes", "") or "no passes"
    title = f"{getattr(args, 'input_file', None) or 'stdin'}: input vs after {pipeline}"
    fig = compare_figure(_gantt_blocks(_shown(before)), _gantt_blocks(_shown(after)), title,
                         _gantt_window(args), names=("input", "after " + pipeline))  # fmt: skip
    save_figure(fig, path)


def _shown(results: Sequence[BlockResult]) -> list[BlockResult]:
    """The blocks the Gantt chart draws: the top-level ones and every body whose work is
    part of an op's time (one lane group each, in module order); all blocks if none."""
    return [r for r in results if r.top_level or r.in_parent] or list(results)


def _gantt_blocks(results: Sequence[BlockResult]) -> list:
    from lancet_mlir.sim.gantt import GanttBlock, op_categories
    from lancet_mlir.sim.trace import op_names

    return [GanttBlock(_runs_label(r), r.timeline, op_categories(r.graph), op_names(r.graph),
                       nested=not r.top_level) for r in results]  # fmt: skip


def _runs_label(result: BlockResult) -> str:
    """The block's label, with `(xN)` when it runs N times per execution of its op."""
    return result.label if result.runs == 1 else f"{result.label} (x{result.runs})"


def _gantt_window(args: argparse.Namespace):  # noqa: ANN202 - sim.gantt.Window | None
    text = getattr(args, "gantt_window", None)
    if text is None:
        return None
    from lancet_mlir.sim.gantt import parse_window

    return parse_window(text)


def _write_json(path: str, data: dict, indent: int | None) -> None:
    """Serialize first, then write through a temporary file and a rename."""
    from lancet_mlir.support.files import atomic_path

    text = json.dumps(data, indent=indent) + "\n"
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
