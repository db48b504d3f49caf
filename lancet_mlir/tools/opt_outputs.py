"""lancet-opt's cost-model flags (sugar for module attributes) and its outputs about the
final schedule.

`register_arguments` adds the flags; `check_flags` validates them before any input is read;
`set_module_attributes` writes them onto each parsed module as `lancet.*` attributes (so `-o`
and `--print-between-passes` show them and the output re-runs identically with plain
`xdsl-opt`) and loads the files they name, so a bad file fails before any pass runs.
`--report`, `--timeline` and `--gantt` are sugar for appending `simulate{annotate=false
report=... timeline=... gantt=...}` to the pipeline (`outputs_pass`: the pass writes them,
`sim/outputs.py`); `after_pipeline` writes `--gantt-compare`.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

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
from lancet_mlir.passes.costing import CostOptions
from lancet_mlir.passes.simulate import SimulatePass
from lancet_mlir.support.files import CLOSED_STDOUT, is_stdout, stdout_is_open
from lancet_mlir.tools.cli import non_empty, positive_int
from lancet_mlir.tools.errors import UserError

if TYPE_CHECKING:
    from lancet_mlir.sim.blocks import BlockResult


def register_arguments(group: argparse._ArgumentGroup) -> None:
    """Add the cost-model and output flags of lancet-opt."""
    group.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="FILE",
        help="measured op timings (ProfileDB JSON or Lancet .profile); repeatable; "
        "sets lancet.profile",
    )
    group.add_argument(
        "--comm-table",
        action="append",
        default=[],
        metavar="FILE",
        help="measured collective times: lancet-mlir CSV, nccl-tests log or XLA "
        "collective perf table (docs/formats.md); repeatable; sets lancet.comm_table",
    )
    group.add_argument(
        "--device",
        default=None,
        metavar="NAME",
        type=non_empty,
        help=f"GPU of every rank, one of: {', '.join(device_names())} (default: "
        "the cluster's, else h100); sets lancet.device",
    )
    group.add_argument(
        "--cluster",
        default=None,
        metavar="NAME",
        help=f"cluster preset (device, GPUs per node, network), one of: "
        f"{', '.join(cluster_names())}; sets lancet.cluster",
    )
    group.add_argument(
        "--gpus-per-node",
        type=positive_int,
        default=None,
        metavar="N",
        help="GPUs per NVLink domain (default: the cluster's / device's); "
        "sets lancet.gpus_per_node",
    )
    group.add_argument(
        "--network-gbps",
        type=float,
        default=None,
        metavar="F",
        help="inter-node network Gb/s per GPU (default: the cluster's / device's); "
        "sets lancet.network_gbps",
    )
    group.add_argument(
        "--world-size",
        type=positive_int,
        default=None,
        metavar="N",
        help="set the module's lancet.world_size",
    )
    group.add_argument(
        "--overlap-slowdown",
        type=float,
        default=None,
        metavar="F",
        help="compute slowdown while communication runs (default 1.0); "
        "sets lancet.overlap_slowdown",
    )
    group.add_argument(
        "--launch-overhead-us",
        type=float,
        default=None,
        metavar="US",
        help="host time per op launch: an op starts no earlier than launched "
        "(default 0: free launches); sets lancet.launch_overhead_us",
    )
    group.add_argument(
        "--comm-streams",
        type=positive_int,
        default=None,
        metavar="N",
        help="communication streams of the simulator (default 1, as in Lancet); "
        "sets lancet.comm_streams",
    )
    group.add_argument(
        "--timeline",
        default=None,
        metavar="FILE",
        help="write a Chrome/Perfetto trace of the simulated final schedule",
    )
    group.add_argument(
        "--report",
        default=None,
        metavar="FILE",
        help="write a JSON report (makespan_us, compute_us, comm_us, exposed_comm_us, "
        "how it was costed, ...)",
    )
    group.add_argument(
        "--gantt",
        default=None,
        metavar="FILE.png",
        help="draw the simulated timeline with matplotlib (ops coloured by kind); "
        ".png, .svg or .pdf by the suffix",
    )
    group.add_argument(
        "--gantt-compare",
        default=None,
        metavar="FILE.png",
        help="draw the input's and the output's timelines on one time axis (.png, .svg or .pdf)",
    )
    group.add_argument(
        "--gantt-window",
        default=None,
        metavar="START:END",
        help="zoom the Gantt pictures to a time range, e.g. 2ms:5ms or 300:900 "
        "(µs); either side may be empty",
    )
    group.add_argument(
        "--mpi",
        action="store_true",
        help="under mpiexec: optimize on rank 0 and broadcast the result",
    )


OUTPUT_FLAGS = ("output_file", "timeline", "report", "gantt", "gantt_compare")
"""The destinations of lancet-opt's outputs (`args` attributes); `output_file` is `-o`."""


def check_output_paths(args: argparse.Namespace) -> None:
    """Before any work: every output of the flags can be written, none is an input of the
    flags, each picture has a known suffix. `args.output_file` is `-` (stdout) when `-o` was
    not given. Two outputs on one file or on stdout are refused with the pipeline's own
    outputs, once the pipeline is known (`check_pipeline_outputs`)."""
    from lancet_mlir.support.files import check_output_folder

    inputs = _flag_inputs(args)
    given = [(flag, getattr(args, flag, None)) for flag in OUTPUT_FLAGS]
    given = [(flag, path) for flag, path in given if path is not None]  # "" is refused
    for flag, path in given:
        check_output_folder(path, _flag_name(flag), inputs)
    from lancet_mlir.sim.outputs import picture_format

    for flag in ("gantt", "gantt_compare"):
        path = getattr(args, flag, None)
        if path:
            picture_format(path, _flag_name(flag))


def check_pipeline_outputs(args: argparse.Namespace, passes: Sequence[ModulePass]) -> None:
    """Before any work: no output replaces an input (the flags' or a pass's `profile=` and
    `comm-table=`) or lies in a missing folder, and no two outputs name one file, nor two
    standard output, counting the `report=`, `timeline=` and `gantt=` of each `simulate` in
    the pipeline with the flags' (`simulate{report="k.json"}` with `--report k.json`: the
    pipeline's report would be lost; `simulate{report="-"}` with the IR on stdout: one
    would be lost or mixed in); an output on stdout needs an open stdout."""
    from lancet_mlir.support.files import check_output_folder

    named = named_outputs(args, passes)
    inputs = _flag_inputs(args)
    for stage in passes:
        if isinstance(stage, CostOptions):  # the tables a pass reads are inputs too
            inputs += [*(stage.profile or ()), *(stage.comm_table or ())]
    for what, path in named:
        check_output_folder(path, what, inputs)
        if what != "-o" and getattr(args, "print_between_passes", False) and is_stdout(path):
            raise UserError(f"{what} {path}: standard output carries the IR that "
                            "--print-between-passes prints; give this output a file")  # fmt: skip
    _refuse_clashes(named)
    if any(is_stdout(path) for _, path in named) and not stdout_is_open():
        raise UserError(CLOSED_STDOUT)  # before any work, not after some files were renamed


def named_outputs(args: argparse.Namespace, passes: Sequence[ModulePass]) -> list[tuple[str, str]]:
    """(what, path) of every output of the run: the flags' and the `report=`, `timeline=`
    and `gantt=` of each `simulate` in the pipeline (what names it, for messages)."""
    named = [
        (_flag_name(flag), path)
        for flag in OUTPUT_FLAGS
        if (path := getattr(args, flag, None)) is not None
    ]
    for k, stage in enumerate(passes):
        if not isinstance(stage, SimulatePass):
            continue
        for field in ("report", "timeline", "gantt"):
            path = getattr(stage, field)
            if path is not None:
                named.append((f"{stage.name}{{{field}=}} (pass {k + 1})", path))
    return named


def check_module_inputs(
    module: ModuleOp, args: argparse.Namespace, passes: Sequence[ModulePass]
) -> None:
    """After parsing, before any pass: no output replaces a file that the module's own
    `lancet.profile` or `lancet.comm_table` names (read by the passes that take no file
    option; the flags' and the passes' files are checked before parsing)."""
    from lancet_mlir.support.files import check_output_folder

    inputs = [
        a.data
        for name in (attrs.PROFILE, attrs.COMM_TABLE)
        for a in _file_names(module.attributes.get(name))
    ]
    if not inputs:
        return
    for what, path in named_outputs(args, passes):
        check_output_folder(path, what, inputs)


def _file_names(attr: Attribute | None) -> list[StringAttr]:
    """The file names of a `lancet.profile` / `lancet.comm_table` value (a malformed one
    names none here: the pass that reads it says what is wrong, if one does)."""
    if isinstance(attr, StringAttr):
        return [attr]
    if isinstance(attr, ArrayAttr):
        return [a for a in attr.data if isinstance(a, StringAttr)]
    return []


def _flag_inputs(args: argparse.Namespace) -> list[str]:
    """The files lancet-opt's flags name to be read: the input and every `--profile` and
    `--comm-table` (no output may replace one)."""
    given = [getattr(args, "input_file", None)]
    given += [*(getattr(args, "profile", None) or ()), *(getattr(args, "comm_table", None) or ())]
    return [path for path in given if path]


def _refuse_clashes(named: Sequence[tuple[str, str]]) -> None:
    """UserError for the first output (what names it, its path) that writes a file an
    earlier one writes, or standard output when an earlier one does (`-o` is stdout by
    default)."""
    from lancet_mlir.sim.outputs import same_target

    for k, (what, path) in enumerate(named):
        for other, other_path in named[:k]:
            if is_stdout(path) and is_stdout(other_path):
                carried = "the IR (-o, default stdout)" if other == "-o" else other
                raise UserError(f"{what} {path}: standard output already carries {carried}; only "
                                "one output can go there (e.g. add -o FILE or -o /dev/null)")  # fmt: skip
            if not is_stdout(path) and same_target(path, other_path):
                raise UserError(f"{what} {path}: {other} writes that file too; give each "
                                "output its own file")  # fmt: skip


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
    _gantt_window(args)  # a bad window fails before any input is read


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
            out[name] = (
                StringAttr(files[0])
                if len(files) == 1
                else ArrayAttr([StringAttr(f) for f in files])
            )
    for flag, name in (
        ("world_size", attrs.WORLD_SIZE),
        ("gpus_per_node", attrs.GPUS_PER_NODE),
        ("comm_streams", attrs.COMM_STREAMS),
    ):
        count = getattr(args, flag, None)
        if count is not None:
            out[name] = IntegerAttr(int(count), i64)
    for flag, name in (
        ("network_gbps", attrs.NETWORK_GBPS),
        ("overlap_slowdown", attrs.OVERLAP_SLOWDOWN),
        ("launch_overhead_us", attrs.LAUNCH_OVERHEAD_US),
    ):
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


FLAG_NAMES: dict[str, str] = {
    "report": "--report", "timeline": "--timeline", "gantt": "--gantt",
    "gantt_window": "--gantt-window",
}  # fmt: skip
"""The flags that give the `simulate` pass's output options."""


@dataclass(frozen=True)
class OutputsPass(SimulatePass):
    """The `simulate` pass lancet-opt appends for `--report/--timeline/--gantt`: the same
    pass without annotating the IR; its errors and warnings name the flags."""

    PARAMETER_NAMES: ClassVar[Mapping[str, str]] = FLAG_NAMES
    WARNING_PREFIX: ClassVar[str] = "lancet-opt"

    def failure(self, exc: UserError) -> Exception:
        """lancet-opt's errors are one line naming the flag (already in the message)."""
        return exc


def outputs_pass(args: argparse.Namespace) -> OutputsPass | None:
    """The pass `--report/--timeline/--gantt` append to the pipeline, or None: `simulate`
    with those outputs, `annotate=false`, costed by the module's attributes (the flags)."""
    report, timeline, gantt = (getattr(args, f, None) for f in ("report", "timeline", "gantt"))
    if not (report or timeline or gantt):
        return None
    window = getattr(args, "gantt_window", None) if gantt else None
    return OutputsPass(report=report, timeline=timeline, gantt=gantt, gantt_window=window,
                       annotate=False)  # fmt: skip


def window_flag_warning(args: argparse.Namespace) -> None:
    """`--gantt-window` without a picture to zoom: one warning line on stderr."""
    if getattr(args, "gantt_window", None) is not None and not (
        getattr(args, "gantt", None) or getattr(args, "gantt_compare", None)
    ):
        sys.stderr.write("lancet-opt: warning: --gantt-window has no effect without --gantt "
                         "or --gantt-compare\n")  # fmt: skip


def mpi_flag_warning(args: argparse.Namespace) -> None:
    """Under mpiexec without `--mpi` every rank runs the whole pipeline and writes every
    output (the IR on stdout once per rank): one warning line, from rank 0."""
    from lancet_mlir.support.launcher import in_mpi_job, launcher_rank, launcher_world_size

    if getattr(args, "mpi", False) or not in_mpi_job() or launcher_rank() != 0:
        return
    sys.stderr.write(f"lancet-opt: warning: {launcher_world_size()} MPI ranks each run the "
                     "whole pipeline and write every output; add --mpi to optimize on rank 0 "
                     "and write once\n")  # fmt: skip


def before_pipeline(module: ModuleOp, args: argparse.Namespace) -> list[BlockResult] | None:
    """With `--gantt-compare`, simulate the input module (before any pass, costed by the
    module's attributes, as the outputs are) and return it."""
    if not getattr(args, "gantt_compare", None):
        return None
    from lancet_mlir.sim.blocks import simulate_module

    costing = _ModuleCosting()
    return simulate_module(module, costing.cost_model(module), costing.sim_options(module))


def after_pipeline(
    ctx: Context,
    module: ModuleOp,
    args: argparse.Namespace,
    passes: Sequence[ModulePass] = (),
    before: list[BlockResult] | None = None,
) -> None:
    """After the pipeline (the appended `simulate` pass wrote `--report/--timeline/--gantt`):
    `--gantt-compare FILE`: `before` (the input's simulation, from `before_pipeline`) above
    the final schedule, on one time axis, zoomed by `--gantt-window`. Finally, if the passes
    or the outputs costed ops at 0 for lack of any timing information, one summary warning
    names them on stderr."""
    from lancet_mlir.cost.cost_model import CostModel

    costing = _ModuleCosting()
    if before is not None and getattr(args, "gantt_compare", None):
        _write_gantt_compare(args.gantt_compare, before, module, args)
    configs = [p.cost_config(module) for p in passes if isinstance(p, CostOptions)]
    configs.append(costing.cost_config(module))
    for config in dict.fromkeys(configs):  # each model used, once, in pipeline order
        CostModel.from_config(config).warn_unknown("lancet-opt")


def _checked_slowdown(value: float | None) -> float | None:
    if value is None:
        return None
    if not (math.isfinite(value) and value >= 1.0):
        raise UserError(f"--overlap-slowdown: must be finite and >= 1.0, got {value}")
    return value


def _write_gantt_compare(
    path: str, before: Sequence[BlockResult], module: ModuleOp, args: argparse.Namespace
) -> None:
    from lancet_mlir.sim.blocks import simulate_module
    from lancet_mlir.sim.gantt import save_figure
    from lancet_mlir.sim.outputs import compare_picture, current_invocation, picture_format

    costing = _ModuleCosting()
    after = simulate_module(module, costing.cost_model(module), costing.sim_options(module))
    fig = compare_picture(before, after, current_invocation(), _gantt_window(args))
    save_figure(fig, path, picture_format(path, "--gantt-compare"))


def _gantt_window(args: argparse.Namespace):  # noqa: ANN202 - sim.gantt.Window | None
    text = getattr(args, "gantt_window", None)
    if text is None:
        return None
    from lancet_mlir.sim.gantt import parse_window
    from lancet_mlir.support.errors import ParameterError

    try:
        return parse_window(text)
    except ParameterError as exc:
        raise exc.as_flag("--gantt-window") from None
