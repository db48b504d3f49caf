"""Printing equivalence-check results as a table (rich)."""

from __future__ import annotations

from typing import IO

from lancet_mlir.runtime.compare import CompareResult


def print_compare(result: CompareResult, name_a: str, name_b: str, stream: IO[str] | None = None) -> None:
    """One row per output: rank, index, shape, dtype, max abs/rel error and a verdict."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=stream, highlight=False, soft_wrap=True)
    verdict = "same" if result.ok else "DIFFERENT"
    table = Table(
        title=f"{name_a} vs {name_b}: {verdict} (rtol={result.rtol:g}, atol={result.atol:g})",
        title_justify="left",
    )
    for name, justify in (("rank", "right"), ("result", "right"), ("shape", "left"),
                          ("dtype", "left"), ("max abs err", "right"), ("max rel err", "right"),
                          ("ok", "left")):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for d in result.diffs:
        shape = "x".join(map(str, d.shape)) or "scalar"
        ok = "yes" if d.ok else ("NO " + d.note).strip()
        table.add_row(str(d.rank), str(d.index), shape, d.dtype, f"{d.max_abs_err:.3g}",
                      f"{d.max_rel_err:.3g}", ok)
    console.print(table)
    for problem in result.problems:
        console.print(f"problem: {problem}")
