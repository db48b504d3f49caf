"""Shared helpers for the pytest suite: parsing, running passes in-process, random graphs."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.parser import Parser
from xdsl.passes import PassPipeline
from xdsl.printer import Printer

from lancet_mlir.dialects import get_all_dialects
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.passes import get_all_passes

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def make_context() -> Context:
    """A context with xDSL's dialects and lancet-mlir's, as lancet-opt has."""
    from xdsl.universe import Universe

    ctx = Context(allow_unregistered=True)
    for name, factory in Universe.get_multiverse().all_dialects.items():
        if name not in ctx.registered_dialect_names:
            ctx.register_dialect(name, factory)
    for name, factory in get_all_dialects().items():
        if name not in ctx.registered_dialect_names:
            ctx.register_dialect(name, factory)
    return ctx


def parse(text: str, ctx: Context | None = None) -> ModuleOp:
    """Parse MLIR text into a verified module."""
    module = Parser(ctx or make_context(), text, "test.mlir").parse_module()
    module.verify()
    return module


def run_pipeline(module: ModuleOp, spec: str, ctx: Context | None = None) -> ModuleOp:
    """Apply a pass pipeline spec (e.g. 'comm-bucket-fusion{bucket-bytes=8}') in place."""
    passes = {name: factory for name, factory in get_all_passes().items()}
    PassPipeline.parse_spec(passes, spec).apply(ctx or make_context(), module)
    module.verify()
    return module


def to_text(module: ModuleOp) -> str:
    """Print a module in custom syntax."""
    buf = io.StringIO()
    Printer(stream=buf).print_op(module)
    return buf.getvalue()


def run_tool(
    argv: Sequence[str],
    *,
    stdin: str | None = None,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one of the console scripts (`lancet-opt`, ...) from the venv."""
    full_env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if env:
        full_env.update(env)
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )


# ---- partitioned model graphs ------------------------------------------------------------------
def body_ops(module: ModuleOp) -> list:
    """The ops of the module's first function, without its return."""
    from xdsl.dialects.func import FuncOp, ReturnOp

    fn = next(op for op in module.walk() if isinstance(op, FuncOp))
    return [op for op in fn.body.block.ops if not isinstance(op, ReturnOp)]


def part_of(op) -> int | None:
    """The op's `lancet.part` index, None on unpartitioned ops."""
    from xdsl.dialects.builtin import IntegerAttr

    attr = op.attributes.get("lancet.part")
    return attr.value.data if isinstance(attr, IntegerAttr) else None


def kernel_name(op) -> str | None:
    """The compute-registry name of `op`, None for ops outside the registry."""
    from lancet_mlir.dialects.comp import kernel_of

    k = kernel_of(op)
    return None if k is None else k.name


RESHAPES = """
builtin.module {
  func.func @f(%x: tensor<12x4xf32>) -> (tensor<6x8xf32>, tensor<12x2x2xf32>) {
    %a = comp.gelu %x : (tensor<12x4xf32>) -> tensor<12x4xf32>
    %m = comp.reshape %a {shape = array<i64: 6, 8>} : (tensor<12x4xf32>) -> tensor<6x8xf32>
    %s = comp.reshape %a {shape = array<i64: 12, 2, 2>} : (tensor<12x4xf32>) -> tensor<12x2x2xf32>
    func.return %m, %s : tensor<6x8xf32>, tensor<12x2x2xf32>
  }
}
"""
"""One row-merging reshape (12x4 -> 6x8) and one row-keeping reshape (12x4 -> 12x2x2) of a value."""


def closure(edges: list[list[int]], start: int) -> set[int]:
    """The nodes reached from `start` along `edges` by one edge or more (brute force: the
    reference the reachability bitsets are checked against)."""
    seen: set[int] = set()
    stack = list(edges[start])
    while stack:
        v = stack.pop()
        if v not in seen:
            seen.add(v)
            stack.extend(edges[v])
    return seen


def function_graph(module: ModuleOp) -> DataflowGraph:
    """The dataflow graph of the first function's body."""
    fn = next(op for op in module.walk() if isinstance(op, FuncOp))
    return DataflowGraph.from_block(fn.body.block)


def compare_under_mpiexec(tmp_path: Path, before: str, after: str, ranks: int = 4) -> None:
    """Write the two modules and run `lancet-run --compare` on them under `mpiexec -n
    ranks`; assert it says they compute the same values."""
    from lancet_mlir.support.mpi_util import mpiexec_argv

    (tmp_path / "a.mlir").write_text(before)
    (tmp_path / "b.mlir").write_text(after)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI_LOCAL"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    argv = [*mpiexec_argv(ranks), sys.executable, "-m", "lancet_mlir.tools.lancet_run",
            "--compare", "a.mlir", "b.mlir"]  # fmt: skip
    res = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("a.mlir vs b.mlir: same") == 1
