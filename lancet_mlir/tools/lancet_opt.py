"""lancet-opt: an xdsl-opt style driver with lancet-mlir's dialects, passes and cost options.

Every xdsl-opt flag works (`-p`, `-o`, `--print-op-generic`, `--split-input-file`,
`--verify-diagnostics`, `--allow-unregistered-dialect`, ...). On top of them:

* `--data-parallel-schedule` (alias for `-p data-parallel-schedule`, run first);
* `--profile FILE`, `--comm-table FILE`, `--device NAME`, `--cluster NAME`, `--gpus-per-node N`,
  `--network-gbps F`, `--world-size N`, `--comm-streams N`, `--overlap-slowdown F`: sugar
  for the module attributes `lancet.profile`, `lancet.comm_table`, ... that configure every
  costing pass (a pass's own options override them; `passes/costing.py`). They are written
  onto the module before the pipeline runs, so the output re-runs identically with `xdsl-opt`;
* `--timeline FILE`, `--report FILE`, `--gantt FILE.png|.svg|.pdf`: outputs about the final
  schedule, sugar for appending `simulate{annotate=false report=... timeline=... gantt=...}`
  to the pipeline (`opt_outputs.outputs_pass`; the pass writes them);
* `--mpi`: under mpiexec, optimize on rank 0 and broadcast the result to every rank;
* `--verbose`: optimizing passes print one line per stage on stderr (the INFO records of the
  `lancet_mlir` loggers, e.g. lancet-schedule's makespan and exposed communication).

`-` as the input reads stdin; `-` as any output (`-o`, `--report`, ...) writes stdout (at
most one of them). The outputs of a run are all-or-nothing: nothing is written unless every
chunk and every output succeeded (`support.files.OutputSet`). `--time-passes` reports the
wall time of parsing, verification, each pass, printing and writing on stderr.
Errors end with one line on stderr and exit code 1.

What this driver still does to xDSL 0.74 (docs/design.md "Outputs as a pass"):
* `arg_parser.error` is replaced on the parser instance (`register_all_arguments`): xDSL
  builds its ArgumentParser inside `xDSLOptMain.__init__` with no factory hook, and
  argparse's `error` prints the usage and exits 2, where lancet-opt gives one line and 1;
* `prepare_output` returns a `_KeepOpen` StringIO: `xDSLOptMain.run` closes every output
  stream but stdout, with no hook between the last write and the close, and the text must
  survive to be written only when every chunk and output succeeded.
The pipeline is built by `setup_pipeline` with the public `PassPipeline.parse_spec` and this
driver's callback (no more replacing the pipeline xDSL had built).
"""

from __future__ import annotations

import argparse
import io
import logging
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import IO, NoReturn

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.utils.exceptions import DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from lancet_mlir.dialects import get_all_dialects
from lancet_mlir.dialects.checks import check_module
from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.passes import get_all_passes
from lancet_mlir.sim import outputs
from lancet_mlir.support.errors import one_line, op_of
from lancet_mlir.support.files import STDOUT, OutputSet, decode_text, write_atomic
from lancet_mlir.support.locations import LocatingParser, tool_message
from lancet_mlir.support.printing import FastMLIRTarget, FastPrinter
from lancet_mlir.support.provenance import lancet_mlir_version
from lancet_mlir.tools import diagnostics, opt_outputs
from lancet_mlir.tools.cli import show_defaults
from lancet_mlir.tools.errors import UserError, run_cli
from lancet_mlir.tools.pass_timing import StageTimer

OUTPUTS_STAGE = "schedule outputs (--timeline, --report, --gantt)"
"""The --time-passes line of the appended outputs pass and of --gantt-compare."""

PIPELINE_ALIASES: dict[str, str] = {
    "data_parallel_schedule": "data-parallel-schedule",
}


_NOTHING = re.compile(r"(\s|//[^\n]*)*")
"""Text without an op: whitespace and `//` comments only."""


CUSTOM_FORM = "does not have a custom format"
CUSTOM_FORM_HINT = (
    "(an op of a dialect lancet-opt does not register, written in its custom form: print "
    "the module in generic form, e.g. JAX's `lowered.compiler_ir('stablehlo').operation"
    ".get_asm(print_generic_op_form=True)`, and pass --allow-unregistered-dialect)"
)
"""What a parse error of an unregistered op in custom form adds (StableHLO as JAX prints it)."""


class LancetOptMain(xDSLOptMain):
    """xDSLOptMain with lancet-mlir registered, cost-model options and safe output."""

    version_format = (
        f"lancet-opt (lancet-mlir {lancet_mlir_version()}) built on xdsl {{xdsl_version}}"
    )

    def __init__(self, args: Sequence[str] | None = None):
        self._pending_output: io.StringIO | None = None
        self.current_module: ModuleOp | None = None
        """The module being verified and transformed (errors are placed at its ops)."""
        self._outputs_pass: ModulePass | None = None
        self._chunk_offset = 0
        """Lines of the input above the chunk being parsed (`--split-input-file`)."""
        self.timer = StageTimer()
        self._pass_start = 0.0
        super().__init__(description="lancet-mlir optimizer driver", args=args)

    # ---- registration ------------------------------------------------------------------------
    def register_all_targets(self) -> None:
        super().register_all_targets()
        self.available_targets["mlir"] = lambda: FastMLIRTarget  # the same text, faster

    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        registered = set(self.ctx.registered_dialect_names)
        for name, factory in get_all_dialects().items():
            if name not in registered:  # the xdsl.universe entry point may have added them
                self.ctx.register_dialect(name, factory)

    def register_all_frontends(self) -> None:
        super().register_all_frontends()

        def parse_mlir(chunk: IO[bytes]) -> ModuleOp:
            # not UTF-8 text is one line, as lancet-run says it; ops remember their spans, so
            # verifier and pass errors name file:line:col (support/locations.py)
            name = self.get_input_name()
            text = decode_text(chunk.read(), name)
            if self._holds_nothing(text):
                return ModuleOp([])  # as mlir-opt reads an empty file
            parser = LocatingParser(self.ctx, text, name, self._chunk_offset)
            try:
                return parser.parse_module(not self.args.no_implicit_module)
            except ParseError as exc:
                if CUSTOM_FORM not in str(exc):
                    raise
                # JAX's `as_text()` prints StableHLO in its custom form, which xDSL cannot read
                raise UserError(f"{one_line(exc)} {CUSTOM_FORM_HINT}") from None

        self.available_frontends["mlir"] = parse_mlir

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in get_all_passes().items():
            self.register_pass(name, factory)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        # xDSL 0.74 builds a plain argparse parser in __init__ with no factory hook; make its
        # usage errors one line and exit code 1 (a documented remaining workaround)
        arg_parser.error = _usage_error  # type: ignore[method-assign]
        super().register_all_arguments(arg_parser)
        group = arg_parser.add_argument_group("lancet-mlir")
        for dest, pipeline in PIPELINE_ALIASES.items():
            group.add_argument(
                "--" + dest.replace("_", "-"),
                action="store_true",
                help=f"run '{pipeline}' (before any -p passes)",
            )
        opt_outputs.register_arguments(group)
        group.add_argument(
            "--verbose",
            action="store_true",
            help="print one line per optimization stage (makespan, exposed communication) on stderr",
        )
        show_defaults(arg_parser)

    # ---- pipeline ------------------------------------------------------------------------------
    def setup_pipeline(self) -> None:
        extra = [p for dest, p in PIPELINE_ALIASES.items() if getattr(self.args, dest, False)]
        if extra:
            self.args.passes = ",".join(x for x in (*extra, self.args.passes) if x)
        if self.args.input_file == STDOUT:  # `lancet-opt -` reads stdin, as mlir-opt does
            self.args.input_file = None
        if self.args.output_file is None:
            self.args.output_file = STDOUT
        opt_outputs.check_output_paths(self.args)
        opt_outputs.check_flags(self.args)
        opt_outputs.window_flag_warning(self.args)
        opt_outputs.mpi_flag_warning(self.args)
        # built as xDSL's setup_pipeline does, with our callback (xDSL's prints --time-passes
        # lines to stdout, ahead of the IR) and the outputs' `simulate` pass appended
        pipeline = PassPipeline.parse_spec(self.available_passes, self.args.passes)
        opt_outputs.check_pipeline_outputs(self.args, pipeline.passes)
        self._outputs_pass = opt_outputs.outputs_pass(self.args)
        appended = (self._outputs_pass,) if self._outputs_pass is not None else ()
        self.pipeline = PassPipeline((*pipeline.passes, *appended), self._between_passes)

    def _between_passes(
        self, previous: ModulePass | None, module: ModuleOp, following: ModulePass | None
    ) -> None:
        """Time the pass that just ran, verify, and print the IR if asked (as xDSL does; the
        appended outputs pass is not one of the user's passes)."""
        if previous is not None:
            name = OUTPUTS_STAGE if previous is self._outputs_pass else previous.name
            self.timer.add(name, time.perf_counter() - self._pass_start)
        if following is not None and following is self._outputs_pass:
            following = None
        if not self.args.disable_verify:
            with self.timer.stage("verify"):
                module.verify()
        if previous is not None and following is not None and self.args.print_between_passes:
            print(f"IR after {previous.name}:")
            FastPrinter(stream=sys.stdout).print_op(module)
            print("\n\n\n")
        self._pass_start = time.perf_counter()

    def parse_chunk(
        self, chunk: IO[bytes], file_extension: str, start_offset: int = 0
    ) -> ModuleOp | None:
        self._chunk_offset = start_offset  # the frontend places the chunk's ops in the file
        with self.timer.stage("parse"):
            module = super().parse_chunk(chunk, file_extension, start_offset)
        self.current_module = module
        if module is None:
            return None
        opt_outputs.set_module_attributes(module, self.args)
        opt_outputs.check_module_inputs(module, self.args, self.pipeline.passes)
        if not self.args.verify_diagnostics:
            with self.timer.stage("verify"):
                check_module(module)
                check_dominance(module)
        return module

    def apply_passes(self, prog: ModuleOp) -> None:
        before = opt_outputs.before_pipeline(prog, self.args)
        with outputs.invocation(self.args.input_file, self.args.passes):
            try:
                super().apply_passes(prog)
            except BaseException:
                from lancet_mlir.cost.cost_model import forget_unknown_ops

                forget_unknown_ops()  # the failed run warns of nothing, nor does the next one
                raise
            with self.timer.stage(OUTPUTS_STAGE):
                opt_outputs.after_pipeline(self.ctx, prog, self.args, self.pipeline.passes, before)

    def output_resulting_program(self, prog: ModuleOp) -> str:
        with self.timer.stage("print"):
            try:
                return super().output_resulting_program(prog)
            except (UserError, OSError):
                raise
            except Exception as exc:
                target = getattr(self.args, "target", "mlir")
                if target == "mlir":
                    raise
                # xDSL's backends fail on ops they do not print with their repr (many lines)
                raise UserError(
                    f"-t {target}: the {target} target cannot print this module "
                    f"({type(exc).__name__} in xDSL's printer: it prints IR lowered to that "
                    "target only)"
                ) from exc

    # ---- output: nothing is written unless everything succeeded --------------------------------
    def prepare_output(self) -> IO[str]:
        self._pending_output = _KeepOpen()  # stdout too: all chunks, or nothing
        return self._pending_output

    def run(self) -> None:
        with (
            _stage_logging(getattr(self.args, "verbose", False)),
            OutputSet([self.args.input_file] if self.args.input_file else []) as outputs,
        ):
            if getattr(self.args, "mpi", False):
                from lancet_mlir.runtime.mpi_opt import run_on_rank0_and_broadcast

                run_on_rank0_and_broadcast(self)
            elif self.args.verify_diagnostics:
                self.run_verify_diagnostics()
                self.commit_output()
            else:
                super().run()
                self.commit_output()
            with self.timer.stage("write"):
                outputs.commit()
        if self.args.time_passes:
            self.timer.report(sys.stderr)

    # ---- --verify-diagnostics: MLIR's meaning ------------------------------------------------
    def run_verify_diagnostics(self) -> None:
        """Check every chunk's diagnostics against its `expected-*` annotations.

        The IR of chunks that produce no diagnostic is printed as usual. Mismatches are
        printed one per line on stderr and end the run with exit code 1 (nothing written
        to `-o`)."""
        chunks, _ = self.prepare_input()
        output = self.prepare_output()
        problems: list[str] = []
        name = self.get_input_name()
        for i, (chunk, offset) in enumerate(chunks):
            text = chunk.read().decode("utf-8", errors="replace")
            chunk.close()
            if i > 0:
                output.write("// -----\n")
            produced, module = self._diagnose(text, name, offset)
            if module is not None:
                output.write(self.output_resulting_program(module))
            try:
                expected = diagnostics.parse_expectations(text, offset)
            except diagnostics.BadAnnotation as exc:
                raise UserError(f"{name}: {exc}") from None
            problems += diagnostics.match(expected, produced, name)
        if problems:
            self._pending_output = None  # nothing is written to -o on a mismatch
            for line in problems:
                sys.stderr.write(f"lancet-opt: error: {line}\n")
            raise SystemExit(1)

    def _diagnose(
        self, text: str, name: str, offset: int
    ) -> tuple[list[diagnostics.Diagnostic], ModuleOp | None]:
        """Parse, verify and transform one chunk; its diagnostics, and the module when
        there were none."""
        parser = diagnostics.LocatingParser(self.ctx, text, name)
        try:
            if self._holds_nothing(text):
                module = ModuleOp([])  # as without --verify-diagnostics
            else:
                module = parser.parse_module(not self.args.no_implicit_module)
        except ParseError as exc:
            return [diagnostics.parse_error_diagnostic(exc, offset)], None
        except (DiagnosticException, ValueError) as exc:  # an attribute rejected while parsing
            return [diagnostics.parser_position_diagnostic(parser, exc, offset)], None
        lines = diagnostics.OpLines(parser.op_spans, offset)
        opt_outputs.set_module_attributes(module, self.args)
        opt_outputs.check_module_inputs(module, self.args, self.pipeline.passes)
        found = diagnostics.verifier_diagnostics(module, lines)
        if found:
            return found, None
        try:
            check_module(module)
            check_dominance(module)
            self.apply_passes(module)
        except (UserError, DiagnosticException, ValueError) as exc:
            return [diagnostics.exception_diagnostic(exc, lines)], None
        return [], module

    def _holds_nothing(self, text: str) -> bool:
        """Whether `text` (a file or a `--split-input-file` chunk) is read as an empty
        module: no op, only whitespace and comments, and the implicit module allowed."""
        return not self.args.no_implicit_module and _NOTHING.fullmatch(text) is not None

    def error_line(self, exc: BaseException) -> str:
        """The one line of an error raised while reading, verifying or transforming the
        input: placed at the op it is about (`file:line:col: %name = op: ...`) when that op
        came from the input file (support/locations.py)."""
        return tool_message(exc, self.args.input_file or "<stdin>", self.current_module)

    def commit_output(self) -> None:
        """Stage the buffered module text as the primary output (`-o`, default stdout)."""
        if self._pending_output is None:
            return
        write_atomic(self.args.output_file, self._pending_output.getvalue(), primary=True)


@contextmanager
def _stage_logging(verbose: bool) -> Iterator[None]:
    """With `--verbose`, show the `lancet_mlir` loggers' INFO lines on stderr meanwhile."""
    if not verbose:
        yield
        return
    logger = logging.getLogger("lancet_mlir")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def _usage_error(message: str) -> NoReturn:
    raise UserError(message)


class _KeepOpen(io.StringIO):
    """A StringIO whose close() keeps the text: xDSL 0.74's `run` closes every output stream
    but stdout and offers no hook before that close (a documented remaining workaround)."""

    def close(self) -> None:  # noqa: D102 - keeps the buffer readable after close
        pass


def main(args: Sequence[str] | None = None) -> None:
    """Console entry point of `lancet-opt`."""

    def body() -> int:
        from lancet_mlir.support.mpi_job import agree_on_setup, args_fingerprint

        # under mpiexec every rank checks its command line before any rank communicates
        driver = agree_on_setup(
            lambda: LancetOptMain(args=args), lambda d: args_fingerprint(d.args)
        )
        try:
            driver.run()
        except (ParseError, OSError):
            raise
        except Exception as exc:
            if isinstance(exc, UserError) and op_of(exc) is None:
                raise  # AgreedError too: every MPI rank knows of it
            # place verifier and pass errors at their op (file:line:col and SSA name)
            raise UserError(driver.error_line(exc)) from exc
        return 0

    run_cli("lancet-opt", body)


if __name__ == "__main__":
    main()
