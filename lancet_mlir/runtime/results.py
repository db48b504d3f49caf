"""Reading and writing runtime values: npz files, cross-rank gathering, summaries.

npz layout: one file holds every rank's values under keys `rank<r>/<index>` (results of
`--save`, or argument values for `--inputs`). The keys are the same whether the ranks were
simulated in one process or were MPI processes (rank 0 gathers and writes).
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from typing import IO, Any

import numpy as np

from lancet_mlir.runtime.executor import ExecResult
from lancet_mlir.support.errors import UserError
from lancet_mlir.support.files import STDOUT, atomic_path, read_bytes

_KEY = re.compile(r"^rank(\d+)/(\d+)$")


def save_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Write `arrays` to `path` atomically (temporary file in the same folder + rename)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **dict(arrays))  # pyright: ignore[reportArgumentType] - names, not allow_pickle


def load_rank_arrays(path: str) -> dict[int, list[np.ndarray]]:
    """Read an npz with keys `rank<r>/<index>` into rank -> list of arrays (index order);
    `-` reads standard input."""
    source: Any = path
    if path == STDOUT:
        source, path = io.BytesIO(read_bytes(path)), "<stdin>"
    try:
        with np.load(source, allow_pickle=False) as data:
            items = {k: data[k] for k in data.files}
    except FileNotFoundError as exc:
        raise UserError(f"{path}: no such file") from exc
    except (OSError, ValueError, EOFError) as exc:  # EOFError: an empty file
        raise UserError(f"{path}: not a readable npz file ({exc})") from exc
    per_rank: dict[int, dict[int, np.ndarray]] = {}
    for key, value in items.items():
        m = _KEY.match(key)
        if m is None:
            raise UserError(f"{path}: key '{key}' is not of the form rank<r>/<index>")
        per_rank.setdefault(int(m.group(1)), {})[int(m.group(2))] = value
    out: dict[int, list[np.ndarray]] = {}
    for rank, by_index in sorted(per_rank.items()):
        if sorted(by_index) != list(range(len(by_index))):
            raise UserError(f"{path}: rank {rank} has indices {sorted(by_index)}, expected 0..n-1")
        out[rank] = [by_index[i] for i in range(len(by_index))]
    return out


def gather_results(result: ExecResult, comm: Any) -> ExecResult:
    """Collect every rank's outputs on rank 0 of `comm` (others get their own result back)."""
    gathered = comm.gather(result.outputs, root=0)
    if comm.Get_rank() != 0:
        return result
    merged: dict[int, list[np.ndarray]] = {}
    for part in gathered:
        merged.update(part)
    return ExecResult(result.func_name, result.world_size, dict(sorted(merged.items())))


def checksum(value: np.ndarray) -> tuple[float, float]:
    """(sum, sum of absolute values) in float64."""
    x = np.asarray(value, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # inf + -inf: the sum is nan, without a warning line
        return float(x.sum()), float(np.abs(x).sum())


def print_summary(result: ExecResult, seed: int, stream: IO[str] | None = None) -> None:
    """A table of every output: rank, index, shape, dtype, sum and abs-sum."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=stream, highlight=False, soft_wrap=True)
    table = Table(
        title=f"@{result.func_name}: {result.world_size} rank(s), seed {seed}", title_justify="left"
    )
    for name, justify in (("rank", "right"), ("result", "right"), ("shape", "left"),
                          ("dtype", "left"), ("sum", "right"), ("abs sum", "right")):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for rank in sorted(result.outputs):
        for i, value in enumerate(result.outputs[rank]):
            total, abs_total = checksum(value)
            shape = "x".join(map(str, value.shape)) or "scalar"
            table.add_row(
                str(rank), str(i), shape, str(value.dtype), f"{total:.6g}", f"{abs_total:.6g}"
            )
    console.print(table)
    bad = [(rank, i) for rank in sorted(result.outputs)
           for i, value in enumerate(result.outputs[rank]) if not _finite(value)]  # fmt: skip
    if bad:
        total = sum(len(outs) for outs in result.outputs.values())
        console.print(
            f"warning: {len(bad)} of {total} outputs hold NaN or infinite values (first: rank "
            f"{bad[0][0]} result {bad[0][1]}): the step overflows or divides by zero in its "
            "dtype",
            markup=False,
        )


def _finite(value: np.ndarray) -> bool:
    """Whether every element of an output is finite (integers and booleans always are)."""
    array = np.asarray(value)
    return array.dtype.kind not in "fc" or bool(np.isfinite(array).all())
