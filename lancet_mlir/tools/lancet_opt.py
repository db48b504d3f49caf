"""lancet-opt: an xdsl-opt style driver with lancet-mlir's dialects, passes and cost options.

Every xdsl-opt flag works (`-p`, `-o`, `--print-op-generic`, `--split-input-file`,
`--verify-diagnostics`, `--allow-unregistered-dialect`, ...). On top of them:

* `--data-parallel-schedule` (alias for `-p data-parallel-schedule`, run first);
* `--profile FILE`, `--comm-table FILE`, `--device NAME`, `--cluster NAME`, `--gpus-per-node N`,
  `--network-gbps F`, `--world-size N`, `--comm-streams N`, `--overlap-slowdown F`: sugar
  for the module attributes `lancet.profile`, `lancet.comm_table`, ... that configure every
  costing pass (a pass's own options override them; `passes/costing.py`). They are written
  onto the module before the pipeline runs, so the output re-runs identically with `xdsl-opt`;
* `--timeline FILE`, `--report FILE`, `--gantt FILE.png`: outputs about the final schedule;
* `--mpi`: under mpiexec, optimize on rank 0 and broadcast the result to every rank;
* `--verbose`: optimizing passes print one line per stage on stderr (the INFO records of the
  `lancet_mlir` loggers, e.g. lancet-schedule's makespan and exposed communication).

Errors end with one line on stderr and exit code 1; `-o FILE` is written only on success.
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import IO, NoReturn

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from lancet_mlir.dialects import get_all_dialects
from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.passes import get_all_passes
from lancet_mlir.support.files import write_atomic
from lancet_mlir.tools import opt_outputs
from lancet_mlir.tools.cli import show_defaults
from lancet_mlir.tools.errors import UserError, one_line, run_cli

PIPELINE_ALIASES: dict[str, str] = {
    "data_parallel_schedule": "data-parallel-schedule",
}


class LancetOptMain(xDSLOptMain):
    """xDSLOptMain with lancet-mlir registered, cost-model options and safe output."""

    version_format = "lancet-opt (lancet-mlir) built on xdsl {xdsl_version}"

    def __init__(self, args: Sequence[str] | None = None):
        self._pending_output: io.StringIO | None = None
        super().__init__(description="lancet-mlir optimizer driver", args=args)

    # ---- registration ------------------------------------------------------------------------
    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        registered = set(self.ctx.registered_dialect_names)
        for name, factory in get_all_dialects().items():
            if name not in registered:  # the xdsl.universe entry point may have added them
                self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in get_all_passes().items():
            self.register_pass(name, factory)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        # xDSL builds a plain argparse parser; make its usage errors one line and exit code 1
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
        group.add_argument("--verbose", action="store_true",
                           help="print one line per optimization stage (makespan, exposed communication) on stderr")
        show_defaults(arg_parser)

    # ---- pipeline ------------------------------------------------------------------------------
    def setup_pipeline(self) -> None:
        extra = [p for dest, p in PIPELINE_ALIASES.items() if getattr(self.args, dest, False)]
        if extra:
            self.args.passes = ",".join(x for x in (*extra, self.args.passes) if x)
        opt_outputs.check_flags(self.args)
        super().setup_pipeline()

    def parse_chunk(
        self, chunk: IO[bytes], file_extension: str, start_offset: int = 0
    ) -> ModuleOp | None:
        module = super().parse_chunk(chunk, file_extension, start_offset)
        if module is None:
            return None
        opt_outputs.set_module_attributes(module, self.args)
        if not self.args.verify_diagnostics:
            check_dominance(module)
        return module

    def apply_passes(self, prog: ModuleOp) -> None:
        super().apply_passes(prog)
        opt_outputs.after_pipeline(self.ctx, prog, self.args, self.pipeline.passes)

    # ---- output: nothing is written to -o unless everything succeeded ------------------------
    def prepare_output(self) -> IO[str]:
        if self.args.output_file is None:
            return super().prepare_output()
        self._pending_output = _KeepOpen()
        return self._pending_output

    def run(self) -> None:
        with _stage_logging(getattr(self.args, "verbose", False)):
            if getattr(self.args, "mpi", False):
                from lancet_mlir.runtime.mpi_opt import run_on_rank0_and_broadcast

                run_on_rank0_and_broadcast(self)
                return
            super().run()
            self.commit_output()

    def commit_output(self) -> None:
        """Atomically write the buffered `-o` output (temp file + rename)."""
        if self._pending_output is None:
            return
        write_atomic(self.args.output_file, self._pending_output.getvalue())


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
    """A StringIO whose close() keeps the text (xDSL closes the output stream)."""

    def close(self) -> None:  # noqa: D102 - keeps the buffer readable after close
        pass


def main(args: Sequence[str] | None = None) -> None:
    """Console entry point of `lancet-opt`."""

    def body() -> int:
        driver = LancetOptMain(args=args)
        try:
            driver.run()
        except (ParseError, OSError, UserError):
            raise
        except Exception as exc:
            # name the input for errors that carry no location (verifier, passes)
            source = driver.args.input_file or "<stdin>"
            raise UserError(f"{source}: {one_line(exc)}") from exc
        return 0

    run_cli("lancet-opt", body)


if __name__ == "__main__":
    main()
