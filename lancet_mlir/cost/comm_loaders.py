"""Loaders of measured collective times into a `CommTable` (µs, bytes; units converted here).

* our comm-table CSV: header `kind,group_size,bytes,time_us`, `#` comment lines allowed;
* nccl-tests stdout (`all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`,
  `alltoall_perf`): the in-place time of every result row;
* Lancet's supplement CSV (lancet-algorithms.md §4.4): `size,time` without header, size in
  32-bit words (bytes = 4 * size), time in µs; it names neither kind nor group size;
* XLA's collective perf table (`gpu,opcode,dtype,elements,bytes,num_groups,group_size,
  throughput_Bps,est_time_us`), filtered to one GPU.

`load_comm_table(path, device_gpu=...)` recognizes the first, second and fourth by content.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re

from lancet_mlir.cost.comm_model import KINDS, CommTable, canonical_kind
from lancet_mlir.cost.fileio import read_text, write_atomic
from lancet_mlir.support.errors import UserError

TABLE_HEADER = ("kind", "group_size", "bytes", "time_us")
XLA_HEADER = (
    "gpu",
    "opcode",
    "dtype",
    "elements",
    "bytes",
    "num_groups",
    "group_size",
    "throughput_Bps",
    "est_time_us",
)

NCCL_PROGRAMS: dict[str, str] = {
    "all_reduce_perf": "allreduce",
    "all_gather_perf": "allgather",
    "reduce_scatter_perf": "reduce_scatter",
    "alltoall_perf": "all_to_all",
}


def _number(source: str, line: int, text: str, what: str, integer: bool = False) -> float:
    """`text` as a finite number >= 0; with `integer`, a whole number (`1e3` is 1000)."""
    try:
        value: float = float(text)
    except ValueError:
        raise UserError(f"{source}:{line}: {what} must be a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise UserError(f"{source}:{line}: {what} must be finite and >= 0, got {text!r}")
    if not integer:
        return value
    if not value.is_integer():
        raise UserError(f"{source}:{line}: {what} must be a whole number, got {text!r}")
    try:
        return int(text)  # exact for long digit strings
    except ValueError:
        return int(value)  # e.g. 1e3


def _content_lines(text: str) -> list[tuple[int, str]]:
    """(line number, stripped text) of non-empty, non-comment lines."""
    return [
        (n, s) for n, raw in enumerate(text.splitlines(), 1) if (s := raw.strip()) and s[0] != "#"
    ]


# ---- our own CSV -------------------------------------------------------------------------------
def parse_table_csv(text: str, source: str = "<comm table>") -> CommTable:
    """Parse our comm-table CSV (header `kind,group_size,bytes,time_us`)."""
    lines = _content_lines(text)
    if not lines:
        raise UserError(f"{source}: empty comm table")
    header = tuple(c.strip() for c in lines[0][1].split(","))
    if header != TABLE_HEADER:
        raise UserError(f"{source}:{lines[0][0]}: expected header {','.join(TABLE_HEADER)}")
    table = CommTable()
    for n, row in lines[1:]:
        cells = [c.strip() for c in row.split(",")]
        if len(cells) != 4:
            raise UserError(f"{source}:{n}: expected 4 columns, got {len(cells)}")
        kind = canonical_kind(cells[0])
        if kind is None:
            raise UserError(
                f"{source}:{n}: unknown collective kind {cells[0]!r} (known: {', '.join(KINDS)})"
            )
        group = int(_number(source, n, cells[1], "group_size", integer=True))
        if group < 1:
            raise UserError(f"{source}:{n}: group_size must be >= 1")
        nbytes = int(_number(source, n, cells[2], "bytes", integer=True))
        table.add(kind, group, nbytes, _number(source, n, cells[3], "time_us"))
    if not len(table):
        raise UserError(f"{source}: comm table has a header but no rows")
    return table


def table_csv_text(table: CommTable, comments: tuple[str, ...] = ()) -> str:
    """Render `table` in our CSV format (sorted rows, optional leading `#` comments)."""
    out = [f"# {c}" for c in comments]
    out.append(",".join(TABLE_HEADER))
    out.extend(f"{k},{g},{b},{t!r}" for k, g, b, t in table.rows())
    return "\n".join(out) + "\n"


def save_table_csv(table: CommTable, path: str, comments: tuple[str, ...] = ()) -> None:
    """Write `table` atomically in our CSV format."""
    write_atomic(path, table_csv_text(table, comments))


# ---- nccl-tests --------------------------------------------------------------------------------
_TEST_START = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_RANK_LINE = re.compile(r"#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\b")
_NRANKS = re.compile(r"\bnranks\s*[=:]?\s*(\d+)", re.IGNORECASE)
_NGPUS = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")


def kind_from_name(name: str) -> str | None:
    """Collective kind named in a file name (`alltoall_perf_2x8.log` -> all_to_all)."""
    base = os.path.basename(name).lower()
    for program, kind in NCCL_PROGRAMS.items():
        if program in base:
            return kind
    for alias in (
        "all_reduce",
        "allreduce",
        "all_gather",
        "allgather",
        "reduce_scatter",
        "reducescatter",
        "all_to_all",
        "alltoall",
    ):
        if alias in base:
            return canonical_kind(alias)
    return None


def looks_like_nccl_tests(text: str) -> bool:
    """True for nccl-tests output (its column header or test banner)."""
    return bool(_TEST_START.search(text)) or bool(
        re.search(r"#\s+size\s+count\s+type\s+redop", text)
    )


def parse_nccl_tests(
    text: str,
    source: str = "<nccl-tests log>",
    kind: str | None = None,
    group_size: int | None = None,
) -> CommTable:
    """Parse nccl-tests stdout: every result row `size count type redop root  time algbw
    busbw #wrong  time algbw busbw #wrong` gives (size bytes, in-place time µs).

    Kind: `kind`, else the `# Collective test starting: <prog>` banner, else the file name.
    Group size: `group_size`, else the number of distinct `#  Rank N Group ...` lines of the
    run, else an `nranks` value, else nThread x nGpus of the header.
    """
    table = CommTable()
    current_kind = canonical_kind(kind) if kind else None
    if kind and current_kind is None:
        raise UserError(f"unknown collective kind {kind!r} (known: {', '.join(KINDS)})")
    fallback_kind = current_kind or kind_from_name(source)
    ranks: set[int] = set()
    nranks: int | None = None
    threads_gpus: int | None = None
    pending: list[tuple[int, int, float]] = []  # rows of the current run: (line, bytes, time)

    def flush() -> None:
        run_kind = current_kind or fallback_kind
        if not pending:
            return
        if run_kind is None:
            raise UserError(
                f"{source}: cannot tell the collective (no '# Collective test starting' line, "
                "no program in the file name); pass --kind"
            )
        size = group_size or (len(ranks) if ranks else None) or nranks or threads_gpus
        if size is None:
            raise UserError(
                f"{source}: cannot tell the group size (no '#  Rank' lines); pass --group-size"
            )
        for _, nbytes, t in pending:
            table.add(run_kind, size, nbytes, t)
        pending.clear()

    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            started = _TEST_START.search(line)
            if started:
                flush()
                ranks.clear()
                nranks = threads_gpus = None
                program = started.group(1)
                current_kind = (
                    (canonical_kind(kind) if kind else None)
                    or NCCL_PROGRAMS.get(program)
                    or kind_from_name(program)
                )
                continue
            rank = _RANK_LINE.search(line)
            if rank:
                ranks.add(int(rank.group(1)))
            gpus = _NGPUS.search(line)
            if gpus:
                threads_gpus = int(gpus.group(1)) * int(gpus.group(2))
            found = _NRANKS.search(line)
            if found:
                nranks = int(found.group(1))
            continue
        row = _parse_row(source, n, line)
        if row is not None:
            pending.append((n, *row))
    flush()
    if not len(table):
        raise UserError(f"{source}: no nccl-tests result rows found")
    return table


def _parse_row(source: str, n: int, line: str) -> tuple[int, float] | None:
    """(bytes, in-place µs) of a result row, None for other non-comment lines."""
    cells = line.split()
    if len(cells) < 12 or not cells[0].isdigit() or not cells[1].isdigit():
        return None
    # the in-place block is the last 4 columns: time algbw busbw #wrong (Lancet: column -4)
    nbytes = int(cells[0])
    time_text = cells[-4]
    try:
        t = float(time_text)
    except ValueError:
        raise UserError(f"{source}:{n}: in-place time {time_text!r} is not a number") from None
    if not math.isfinite(t) or t < 0:
        raise UserError(f"{source}:{n}: in-place time must be finite and >= 0, got {time_text}")
    return nbytes, t


# ---- Lancet supplement CSV ---------------------------------------------------------------------
def parse_lancet_supplement(
    text: str, kind: str, group_size: int, source: str = "<supplement csv>"
) -> CommTable:
    """Lancet's `size,time` lines: size = number of 32-bit words (bytes = 4 * size), time µs."""
    canon = canonical_kind(kind)
    if canon is None:
        raise UserError(f"unknown collective kind {kind!r} (known: {', '.join(KINDS)})")
    table = CommTable()
    for n, line in _content_lines(text):
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 2:
            raise UserError(f"{source}:{n}: expected 'size,time', got {line!r}")
        words = int(_number(source, n, cells[0], "size (32-bit words)", integer=True))
        table.add(canon, group_size, 4 * words, _number(source, n, cells[1], "time (us)"))
    if not len(table):
        raise UserError(f"{source}: no samples")
    return table


def looks_like_supplement(text: str) -> bool:
    """True when every content line is two numbers `size,time` (a Lancet supplement CSV)."""
    lines = _content_lines(text)
    return bool(lines) and all(re.fullmatch(r"\d+\s*,\s*[\d.eE+-]+", s) for _, s in lines)


# ---- XLA perf table ----------------------------------------------------------------------------
def parse_xla_table(text: str, gpu: str, source: str = "<xla table>") -> CommTable:
    """Rows of XLA's collective perf table for `gpu` (e.g. `sm_90`): bytes -> est_time_us per
    (opcode, group_size). collective-permute rows (no kind of ours) are skipped."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(c.strip() for c in header) != XLA_HEADER:
        raise UserError(f"{source}: expected XLA header {','.join(XLA_HEADER)}")
    table = CommTable()
    gpus: set[str] = set()
    for n, cells in enumerate(reader, 2):
        if not cells:
            continue
        if len(cells) != len(XLA_HEADER):
            raise UserError(f"{source}:{n}: expected {len(XLA_HEADER)} columns, got {len(cells)}")
        gpus.add(cells[0])
        kind = canonical_kind(cells[1])
        if cells[0] != gpu or kind is None:
            continue
        group = int(_number(source, n, cells[6], "group_size", integer=True))
        nbytes = int(_number(source, n, cells[4], "bytes", integer=True))
        table.add(kind, group, nbytes, _number(source, n, cells[8], "est_time_us"))
    if not len(table):
        raise UserError(
            f"{source}: no rows for gpu {gpu!r} (present: {', '.join(sorted(gpus)) or 'none'})"
        )
    return table


# ---- dispatch ----------------------------------------------------------------------------------
def load_comm_table(path: str, xla_gpu: str | None = None) -> CommTable:
    """Load a comm table file, recognizing our CSV, nccl-tests logs and XLA's perf table."""
    text = read_text(path)
    lines = _content_lines(text)
    first = lines[0][1] if lines else ""
    if first.replace(" ", "").startswith(",".join(TABLE_HEADER)):
        return parse_table_csv(text, path)
    if first.replace(" ", "") == ",".join(XLA_HEADER):
        if xla_gpu is None:
            raise UserError(f"{path}: XLA perf table needs a device with XLA data (--device)")
        return parse_xla_table(text, xla_gpu, path)
    if looks_like_nccl_tests(text):
        return parse_nccl_tests(text, path)
    if looks_like_supplement(text):
        raise UserError(
            f"{path}: looks like a Lancet supplement CSV (size,time without kind or group "
            "size); convert it with 'lancet-profile from-lancet-csv FILE --kind K "
            "--group-size G -o table.csv'"
        )
    raise UserError(
        f"{path}: unrecognized comm table (expected a CSV with header "
        f"{','.join(TABLE_HEADER)}, an nccl-tests log or XLA's perf table)"
    )
