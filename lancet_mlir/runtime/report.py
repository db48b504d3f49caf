"""Printing equivalence-check results: a summary, and the per-output table on request."""

from __future__ import annotations

from typing import IO

from lancet_mlir.runtime.compare import CompareResult, OutputDiff

FAILURE_ROWS = 10
"""Rows of failing outputs shown without --verbose."""


def summary_line(result: CompareResult, name_a: str, name_b: str) -> str:
    """One line: verdict and tolerances, how many outputs on how many ranks, the worst
    error and where it is."""
    verdict = "same" if result.within_tolerance else "DIFFERENT"
    ranks = len({d.rank for d in result.diffs})
    computed = ", computed in f64" if result.promoted else ""
    line = (
        f"{name_a} vs {name_b}: {verdict} ({result.tolerance_text()}{computed}): "
        f"{len(result.diffs)} outputs compared on {ranks} rank{'s' if ranks != 1 else ''}"
    )
    if not result.diffs:
        return line
    failed = len(result.failures())
    if failed:
        line += f", {failed} beyond tolerance"
    worst = max(result.diffs, key=lambda d: (d.max_abs_err, -d.rank, -d.index))
    return (
        f"{line}; worst abs err {worst.max_abs_err:.3g} (rank {worst.rank} result "
        f"{worst.index}), worst rel err {result.max_rel_err:.3g}"
    )


def nonfinite_line(result: CompareResult) -> str | None:
    """A warning when outputs of the reference run hold NaN or infinities (None: none do):
    those elements match by position only, so a wrong computation that also overflows
    there compares as the same."""
    bad = result.nonfinite()
    if not bad:
        return None
    first = bad[0]
    ranks = len({d.rank for d in bad})
    return (
        f"warning: {len(bad)} of {len(result.diffs)} outputs hold NaN or infinite values on "
        f"{ranks} rank{'s' if ranks != 1 else ''} (first: rank {first.rank} result "
        f"{first.index}, {first.nonfinite} elements); there they match by position only, "
        "so the comparison proves less (the step overflows or divides by zero in its dtype)"
    )


def rounding_line(result: CompareResult) -> str:
    """What the f64 rerun of a failed comparison says (`compare.diagnose`)."""
    again = result.rounding
    assert again is not None
    if again.within_tolerance:
        return (
            f"in f64 the two agree ({again.tolerance_text()}; worst abs err "
            f"{again.max_abs_err:.3g}): the same operations, sums in another order; the "
            f"{len(result.failures())} differing outputs are rounding, not a different computation"
        )
    return (
        f"in f64 they differ too ({len(again.failures())} outputs beyond tolerance, worst abs "
        f"err {again.max_abs_err:.3g}): not only the order of sums"
    )


def print_compare(
    result: CompareResult,
    name_a: str,
    name_b: str,
    stream: IO[str] | None = None,
    *,
    verbose: bool = False,
) -> None:
    """The summary line; then every output's row with `verbose`, else only the first
    failing rows (at most FAILURE_ROWS); then any problems."""
    from rich.console import Console

    console = Console(file=stream, highlight=False, soft_wrap=True)
    console.print(summary_line(result, name_a, name_b), markup=False)
    if result.rounding is not None:
        console.print(rounding_line(result), markup=False)
    warning = nonfinite_line(result)
    if warning is not None:
        console.print(warning, markup=False)
    rows = result.diffs if verbose else result.failures()[:FAILURE_ROWS]
    if rows:
        console.print(_table(rows))
    hidden = len(result.failures()) - len(rows)
    if not verbose and hidden > 0:
        console.print(f"... and {hidden} more outputs beyond tolerance (--verbose lists all)")
    for problem in result.problems:
        console.print(f"problem: {problem}", markup=False)


def _table(rows: list[OutputDiff]):  # noqa: ANN202 - rich.table.Table, imported lazily
    from rich.table import Table

    table = Table()
    for name, justify in (("rank", "right"), ("result", "right"), ("shape", "left"),
                          ("dtype", "left"), ("max abs err", "right"), ("max rel err", "right"),
                          ("ok", "left")):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for d in rows:
        shape = "x".join(map(str, d.shape)) or "scalar"
        ok = "yes" if d.ok else ("NO " + d.note).strip()
        table.add_row(
            str(d.rank),
            str(d.index),
            shape,
            d.dtype,
            f"{d.max_abs_err:.3g}",
            f"{d.max_rel_err:.3g}",
            ok,
        )
    return table
