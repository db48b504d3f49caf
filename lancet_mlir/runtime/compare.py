"""Equivalence checking: run two modules on the same inputs and compare every output.

Used to check that a transforming pass computed the same values as its input (DESIGN.md,
"Same computation"). The two functions must take the same argument types; outputs are
compared per rank and per result with `|a - b| <= atol + rtol * |b|` (numpy.isclose).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from lancet_mlir.runtime.executor import (
    ExecResult,
    Progress,
    all_rank_inputs,
    check_world_size,
    execute,
    select_function,
)
from lancet_mlir.runtime.loader import LoadedModule, load_module
from lancet_mlir.support.errors import UserError


@dataclass(frozen=True)
class OutputDiff:
    """How one output (rank, result index) of the two runs differs."""

    rank: int
    index: int
    shape: tuple[int, ...]
    dtype: str
    max_abs_err: float
    max_rel_err: float
    ok: bool
    note: str = ""


@dataclass
class CompareResult:
    """Per-output differences of two runs; `ok` when every output is within tolerance."""

    rtol: float
    atol: float
    diffs: list[OutputDiff] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when both runs produced the same outputs within tolerance."""
        return not self.problems and all(d.ok for d in self.diffs)

    @property
    def max_abs_err(self) -> float:
        """Largest absolute error over all outputs (0 when there are none)."""
        return max((d.max_abs_err for d in self.diffs), default=0.0)

    @property
    def max_rel_err(self) -> float:
        """Largest relative error over all outputs (0 when there are none)."""
        return max((d.max_rel_err for d in self.diffs), default=0.0)

    def failures(self) -> list[OutputDiff]:
        """The outputs beyond tolerance."""
        return [d for d in self.diffs if not d.ok]


def diff_arrays(
    a: np.ndarray, b: np.ndarray, *, rank: int, index: int, rtol: float, atol: float
) -> OutputDiff:
    """Compare output `index` of rank `rank`: `a` from the first run, `b` from the second."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return OutputDiff(
            rank, index, tuple(a.shape), str(a.dtype), float("inf"), float("inf"), False,
            f"{a.shape} {a.dtype} vs {b.shape} {b.dtype}",
        )  # fmt: skip
    if a.size == 0:
        return OutputDiff(rank, index, a.shape, str(a.dtype), 0.0, 0.0, True)
    x, y = a.astype(np.float64), b.astype(np.float64)
    err = np.abs(x - y)
    # equal infinities/NaNs count as equal, like numpy.isclose(equal_nan=True)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    err = np.where(same, 0.0, err)
    rel = np.where(err == 0, 0.0, err / np.maximum(np.abs(y), np.finfo(np.float64).tiny))
    ok = bool(np.all(same | (err <= atol + rtol * np.abs(y))))
    return OutputDiff(rank, index, a.shape, str(a.dtype), float(err.max()), float(rel.max()), ok)


def compare_results(
    a: ExecResult, b: ExecResult, *, rtol: float = 1e-4, atol: float = 1e-5
) -> CompareResult:
    """Compare two executions output by output."""
    result = CompareResult(rtol, atol)
    for rank in sorted(set(a.outputs) | set(b.outputs)):
        outs_a, outs_b = a.outputs.get(rank), b.outputs.get(rank)
        if outs_a is None or outs_b is None:
            result.problems.append(f"rank {rank} ran in only one of the two runs")
            continue
        if len(outs_a) != len(outs_b):
            result.problems.append(
                f"rank {rank}: the functions return {len(outs_a)} and {len(outs_b)} results"
            )
            continue
        for i, (x, y) in enumerate(zip(outs_a, outs_b, strict=True)):
            result.diffs.append(diff_arrays(x, y, rank=rank, index=i, rtol=rtol, atol=atol))
    return result


def _as_module(m: ModuleOp | LoadedModule | str) -> ModuleOp:
    if isinstance(m, ModuleOp):
        return m
    if isinstance(m, LoadedModule):
        return m.module
    return load_module(m).module


def _label(m: ModuleOp | LoadedModule | str, default: str) -> str:
    """How messages name a module: its file, else `default`."""
    if isinstance(m, LoadedModule):
        return m.source
    return m if isinstance(m, str) else default


def check_same_signature(
    a: ModuleOp, b: ModuleOp, func: str | None = None, labels: tuple[str, str] = ("A", "B")
) -> None:
    """UserError unless the two functions take the same argument types; the message names
    the first differing argument (not every type: model steps take hundreds)."""
    fa, fb = select_function(a, func), select_function(b, func)
    ta, tb = list(fa.function_type.inputs.data), list(fb.function_type.inputs.data)
    if ta == tb:
        return
    la, lb = labels
    head = (
        f"@{fa.sym_name.data} of {la} and @{fb.sym_name.data} of {lb} take different arguments, "
        "so they cannot run on the same inputs"
    )
    if len(ta) != len(tb):
        raise UserError(f"{head}: {len(ta)} arguments vs {len(tb)}")
    differ = [i for i, (x, y) in enumerate(zip(ta, tb, strict=True)) if x != y]
    i = differ[0]
    hint = fa.body.block.args[i].name_hint  # select_function never returns a declaration
    name = f" (%{hint})" if hint else ""
    raise UserError(
        f"{head}: argument #{i}{name} is {ta[i]} in {la} but {tb[i]} in {lb} "
        f"({len(differ)} of {len(ta)} arguments differ)"
    )


def compare_modules(
    a: ModuleOp | LoadedModule | str,
    b: ModuleOp | LoadedModule | str,
    *,
    ranks: int = 1,
    seed: int = 0,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    func: str | None = None,
    inputs: Mapping[int, Sequence[np.ndarray]] | None = None,
    comm: Any = None,
    progress: Progress | None = None,
) -> CompareResult:
    """Run `a` and `b` (modules or file paths) on the same inputs and compare the outputs.

    With an mpi4py `comm`, each process compares its own rank's outputs. `progress(done,
    total, op)` counts the ops of both runs.
    """
    ma, mb = _as_module(a), _as_module(b)
    check_same_signature(ma, mb, func, (_label(a, "the first module"), _label(b, "the second module")))
    if inputs is None and comm is None:
        # draw the inputs once for both runs (and replicated ones once for all ranks)
        check_world_size(ma, ranks)
        inputs = all_rank_inputs(select_function(ma, func), range(ranks), seed=seed)
    first: Progress | None = None
    second: Progress | None = None
    if progress is not None:
        report = progress
        total = sum(len(select_function(m, func).body.block.ops) for m in (ma, mb))
        offset = len(select_function(ma, func).body.block.ops)
        first = lambda done, _, op: report(done, total, op)  # noqa: E731 - counts run 1
        second = lambda done, _, op: report(offset + done, total, op)  # noqa: E731 - then run 2

    ra = execute(ma, ranks=ranks, seed=seed, func=func, inputs=inputs, comm=comm, progress=first)
    rb = execute(mb, ranks=ranks, seed=seed, func=func, inputs=inputs, comm=comm, progress=second)
    return compare_results(ra, rb, rtol=rtol, atol=atol)
