"""Equivalence checking: run two modules on the same inputs and compare every output.

Used to check that a transforming pass computed the same values as its input (DESIGN.md,
"Same computation"). The two functions must take the same argument types; outputs are
compared per rank and per result with `|a - b| <= atol + rtol * |b|` (numpy.isclose).

Tolerances default by dtype (`DEFAULT_TOLERANCES`: f64 1e-9/1e-12, f32 1e-4/1e-5, f16
1e-2/1e-3, integers and booleans exact); an explicit rtol/atol applies to every output.
The relative error is taken over the elements whose reference is not 0 (there `atol`
alone judges), so an exact 0 does not print as 1e+301.

A pass that takes sums in another order (token parts, fusion) changes float results by a
rounding error, which an optimizer update such as Adam amplifies. `promote="f64"` runs both
modules with every float type widened to f64 (`promoted_module`); `diagnose` does so by
itself when a float comparison fails: if the f64 runs agree, the result carries them as
`rounding` and is judged the same computation, sums in another order; a real bug differs in
f64 too.
"""

from __future__ import annotations

import io
import re
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
    nonfinite: int = 0
    """Elements that are NaN or infinite in the second run (the reference): they compare
    equal only by position (NaN to NaN), so such an output proves little."""


DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-12),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
}
"""(rtol, atol) by numpy dtype when none is given; other dtypes (integers, bool) compare exactly."""


def tolerances(dtype: str, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """The (rtol, atol) an output of `dtype` is compared with."""
    default = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
    return (default[0] if rtol is None else rtol, default[1] if atol is None else atol)


@dataclass
class CompareResult:
    """Per-output differences of two runs; `ok` when every output is within tolerance.

    `rtol`/`atol` None: by dtype (DEFAULT_TOLERANCES). `promoted`: the runs computed in f64.
    `rounding`: the f64 comparison that `diagnose` ran after this one failed; when it is ok,
    the modules are the same computation with sums in another order, and `ok` is True."""

    rtol: float | None = None
    atol: float | None = None
    diffs: list[OutputDiff] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    promoted: bool = False
    rounding: CompareResult | None = None

    @property
    def within_tolerance(self) -> bool:
        """Every output within tolerance in these runs themselves."""
        return not self.problems and all(d.ok for d in self.diffs)

    @property
    def reordered_sums(self) -> bool:
        """These runs differ, but the f64 runs agree: rounding of sums in another order."""
        return (
            not self.within_tolerance
            and self.rounding is not None
            and self.rounding.within_tolerance
        )

    @property
    def ok(self) -> bool:
        """True when both runs produced the same outputs within tolerance (or differ only by
        the rounding of reordered sums, see `rounding`)."""
        return self.within_tolerance or self.reordered_sums

    def tolerance_text(self) -> str:
        """How outputs were compared: `rtol=.., atol=..`, or the dtype defaults used."""
        if self.rtol is not None and self.atol is not None:
            return f"rtol={self.rtol:g}, atol={self.atol:g}"
        dtypes = sorted({d.dtype for d in self.diffs})
        parts = []
        for dtype in dtypes:
            r, a = tolerances(dtype, self.rtol, self.atol)
            parts.append(f"{dtype} exact" if r == a == 0 else f"{dtype} rtol={r:g} atol={a:g}")
        return "tolerances by dtype: " + ("; ".join(parts) or "none compared")

    @property
    def max_abs_err(self) -> float:
        """Largest absolute error over all outputs (0 when there are none)."""
        return max((d.max_abs_err for d in self.diffs), default=0.0)

    @property
    def max_rel_err(self) -> float:
        """Largest relative error over all outputs (0 when there are none)."""
        return max((d.max_rel_err for d in self.diffs), default=0.0)

    def nonfinite(self) -> list[OutputDiff]:
        """The outputs whose reference holds NaN or infinite elements (`OutputDiff.nonfinite`)."""
        return [d for d in self.diffs if d.nonfinite]

    def failures(self) -> list[OutputDiff]:
        """The outputs beyond tolerance."""
        return [d for d in self.diffs if not d.ok]


def diff_arrays(
    a: np.ndarray,
    b: np.ndarray,
    *,
    rank: int,
    index: int,
    rtol: float | None = None,
    atol: float | None = None,
) -> OutputDiff:
    """Compare output `index` of rank `rank`: `a` from the first run, `b` from the second
    (tolerances None: by dtype)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return OutputDiff(
            rank, index, tuple(a.shape), str(a.dtype), float("inf"), float("inf"), False,
            f"{a.shape} {a.dtype} vs {b.shape} {b.dtype}",
        )  # fmt: skip
    if a.size == 0:
        return OutputDiff(rank, index, a.shape, str(a.dtype), 0.0, 0.0, True)
    rtol, atol = tolerances(str(a.dtype), rtol, atol)
    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, judged below (no numpy warning line)
        err = np.abs(x - y)
    # equal infinities/NaNs count as equal, like numpy.isclose(equal_nan=True); integers
    # compare as themselves (int64 beyond 2**53 is not exact in float64), and two that
    # differ are at least 1 apart
    if a.dtype.kind in "iub":
        same = np.asarray(a == b)
        err = np.where(same, 0.0, np.maximum(err, 1.0))
    else:
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        # NaN against a number is infinitely off (a NaN error made `max` depend on order)
        err = np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))
    # relative to a nonzero finite reference only: at an exact 0, atol alone judges; an
    # element that differs from an infinite (or NaN) reference is infinitely off
    nonzero = y != 0
    finite_ref = np.isfinite(y)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(
            (err == 0) | ~nonzero, 0.0, err / np.where(nonzero & finite_ref, np.abs(y), 1.0)
        )
    rel = np.where(same | finite_ref, rel, np.inf)
    # not `inf <= atol + rtol * inf`: a finite element against an infinite one is no match
    ok = bool(np.all(same | (np.isfinite(err) & (err <= atol + rtol * np.abs(y)))))
    nonfinite = int(y.size - np.count_nonzero(np.isfinite(y)))
    return OutputDiff(
        rank, index, a.shape, str(a.dtype), float(err.max()), float(rel.max()), ok, "", nonfinite
    )


def compare_results(
    a: ExecResult, b: ExecResult, *, rtol: float | None = None, atol: float | None = None
) -> CompareResult:
    """Compare two executions output by output (tolerances None: by dtype)."""
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
    rtol: float | None = None,
    atol: float | None = None,
    func: str | None = None,
    inputs: Mapping[int, Sequence[np.ndarray]] | None = None,
    comm: Any = None,
    progress: Progress | None = None,
    promote: str | None = None,
) -> CompareResult:
    """Run `a` and `b` (modules or file paths) on the same inputs and compare the outputs.

    With an mpi4py `comm`, each process compares its own rank's outputs. `progress(done,
    total, op)` counts the ops of both runs. `promote="f64"`: both run with every float
    type widened to f64 (given `inputs` are widened too).
    """
    ma, mb = _as_module(a), _as_module(b)
    if promote is not None:
        if promote != "f64":
            raise UserError(f"promote: only f64 is supported, got {promote!r}")
        ma, mb = promoted_module(ma), promoted_module(mb)
        if inputs is not None:
            inputs = {r: [_widen(x) for x in xs] for r, xs in inputs.items()}
    check_same_signature(
        ma, mb, func, (_label(a, "the first module"), _label(b, "the second module"))
    )
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
    result = compare_results(ra, rb, rtol=rtol, atol=atol)
    result.promoted = promote is not None
    return result


def wants_f64_rerun(result: CompareResult) -> bool:
    """Whether `diagnose` compares again in f64: `result` (not promoted, no problems) failed,
    and only on float outputs (an integer or boolean output that differs is no rounding)."""
    if result.within_tolerance or result.promoted or result.problems:
        return False
    return all(np.dtype(d.dtype).kind == "f" for d in result.failures())


def diagnose(
    result: CompareResult,
    a: ModuleOp | LoadedModule | str,
    b: ModuleOp | LoadedModule | str,
    **options: Any,
) -> CompareResult:
    """When `result` (not promoted) failed only on float outputs, compare again in f64
    (`compare_modules(..., promote="f64")` with the f64 default tolerances, `options` as for
    the first run) and keep that as `result.rounding` (see the module doc)."""
    if not wants_f64_rerun(result):
        return result
    options = {k: v for k, v in options.items() if k not in ("rtol", "atol", "progress")}
    result.rounding = compare_modules(a, b, promote="f64", **options)
    return result


_FLOAT_TYPE = re.compile(r"(?<=[<x\s(,:])(bf16|f16|f32)(?=[>\s,)\]}]|$)")
"""A float element type in printed IR: `tensor<4x8xf32>`, `: f32`, `(f16, ...`."""


def promoted_module(module: ModuleOp | LoadedModule | str) -> ModuleOp:
    """A copy of `module` with every bf16/f16/f32 type widened to f64 (the printed IR with the
    types replaced, parsed again)."""
    from xdsl.printer import Printer

    from lancet_mlir.runtime.loader import parse_module_text

    if isinstance(module, LoadedModule):
        text, source = module.text, module.source
    elif isinstance(module, str):
        loaded = load_module(module)
        text, source = loaded.text, loaded.source
    else:
        stream = io.StringIO()
        Printer(stream=stream).print_op(module)
        text, source = stream.getvalue(), "<module>"
    return parse_module_text(_FLOAT_TYPE.sub("f64", text), f"{source} (promoted to f64)").module


def _widen(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) if np.asarray(x).dtype.kind == "f" else x
