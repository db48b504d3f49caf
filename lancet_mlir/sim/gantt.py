"""Gantt charts of simulated timelines that people can read.

Every op is one bar in its stream's row, coloured by what it is: forward, backward (dx),
weight-gradient (dW) and optimizer compute from the op's `lancet.role`, each collective kind
(all-to-all, all-reduce, all-gather, reduce-scatter) in its own colour. A legend names the
colours present; ops share a row without merging into one bar (thin white edges); ops wider
than `LABEL_FRACTION` of the window carry their name. The time axis is in µs, ms or s,
whichever suits the window, and a window (`Window`, from `--gantt-window START:END`) zooms in.
`compare_figure` stacks two timelines (before / after a pipeline) on one time axis.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lancet_mlir import attrs
from lancet_mlir.dialects.collectives import COLLECTIVES
from lancet_mlir.dialects.vocab import Role
from lancet_mlir.graph.core import Graph
from lancet_mlir.graph.dataflow import collective_kind
from lancet_mlir.sim.model import Timeline
from lancet_mlir.support.errors import ParameterError
from lancet_mlir.support.files import atomic_path

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CATEGORY_COLORS: dict[str, str] = {
    "forward": "#4C72B0",
    "backward": "#55A868",
    "dW": "#8172B3",
    "optimizer": "#937860",
    "compute": "#8C8C8C",
    # the collective registry's categories, the MoE exchanges first
    **{c.category: c.colour for c in sorted(COLLECTIVES.values(), key=lambda c: not c.exchange)},
    "collective": "#64B5CD",
}
"""Colour of each op category, in legend order."""

_ROLE_CATEGORY: dict[str, str] = {
    Role.FWD: "forward", Role.DX: "backward", Role.DW: "dW", Role.UPDATE: "optimizer",
}  # fmt: skip
_KIND_CATEGORY: dict[str, str] = {c.kind: c.category for c in COLLECTIVES.values()}
LABEL_FRACTION = 0.04
"""An op wider than this fraction of the window may get a text label (if the text fits)."""
_AXIS_PX = 1100.0  # drawing width of the time axis at the figure size and dpi used here
_CHAR_PX = 4.6  # width of one character at the label font size
MAX_LABELS = 80
EDGE_LIMIT = 4000
"""Above this many bars in view, edges would hide the bars: draw without them."""


@dataclass(frozen=True)
class Window:
    """A time range [start_us, end_us) to draw; `end_us` None means the makespan."""

    start_us: float = 0.0
    end_us: float | None = None


@dataclass(frozen=True)
class GanttBlock:
    """One timeline to draw: a label (e.g. `@main`), its timeline, per-node categories
    (CATEGORY_COLORS keys) and per-node display names. `nested`: the body of an op drawn as
    its own lane group (its time is already part of its op's, so it adds nothing to a
    panel's makespan)."""

    label: str
    timeline: Timeline
    categories: Sequence[str]
    names: Sequence[str]
    nested: bool = False


_TIME = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|µs|ms|s)?\s*$")
_UNIT_US = {None: 1.0, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}


def parse_window(text: str, parameter: str = "gantt-window") -> Window:
    """`START:END` with optional units (`us` default, `ms`, `s`); either side may be empty
    (`:2ms` = from 0 to 2 ms, `1.5ms:` = from 1.5 ms to the end). ParameterError naming
    `parameter` when malformed (a tool renders it under its flag)."""
    if text.count(":") != 1:
        raise ParameterError(parameter, text, "expected START:END, e.g. 2ms:5ms")
    left, right = text.split(":")
    start = _time_us(left, text, parameter) if left.strip() else 0.0
    end = _time_us(right, text, parameter) if right.strip() else None
    if end is not None and end <= start:
        raise ParameterError(parameter, text, "the end must be after the start")
    return Window(start, end)


def _time_us(part: str, text: str, parameter: str) -> float:
    m = _TIME.match(part)
    if m is None:
        raise ParameterError(parameter, text, f"{part.strip()!r} is not a time (a number "
                             "with an optional unit us, ms or s)")  # fmt: skip
    return float(m.group(1)) * _UNIT_US[m.group(2)]


def op_categories(graph: Graph) -> list[str]:
    """Category of every node: the collective kind for communication, else the compute
    phase from `lancet.role` ("compute" without one; graphs without IR: "compute" or
    "collective")."""
    ops = getattr(graph, "ops", None)
    if ops is None:
        return ["collective" if c else "compute" for c in graph.is_comm]
    found = []
    for op, comm in zip(ops, graph.is_comm, strict=True):
        if comm:
            found.append(_KIND_CATEGORY.get(collective_kind(op) or "", "collective"))
            continue
        role = op.attributes.get(attrs.ROLE)
        text = getattr(role, "data", None)
        found.append(_ROLE_CATEGORY.get(text, "compute") if isinstance(text, str) else "compute")
    return found


def time_unit(span_us: float) -> tuple[str, float]:
    """The axis unit for a window of `span_us` µs and the divisor from µs: below 2 ms in µs,
    below 2 s in ms, else in s."""
    if span_us >= 2e6:
        return "s", 1e6
    if span_us >= 2e3:
        return "ms", 1e3
    return "µs", 1.0


def _bounds(blocks: Sequence[GanttBlock], window: Window | None) -> tuple[float, float]:
    makespan = max((b.timeline.makespan_us for b in blocks), default=0.0)
    start = window.start_us if window is not None else 0.0
    end = window.end_us if window is not None and window.end_us is not None else makespan
    if end <= start:
        end = start + 1.0
    return start, end


def _stream_label(timeline: Timeline, s: int) -> str:
    return timeline.stream_label(s)


def gantt_figure(blocks: Sequence[GanttBlock], title: str, window: Window | None = None) -> Figure:
    """A figure with one row per stream of every block, on one time axis."""
    plt = _pyplot()
    rows = sum(len(b.timeline.chains) for b in blocks)
    fig, ax = plt.subplots(figsize=(14, 1.6 + 0.5 * rows))
    t0, t1 = _bounds(blocks, window)
    unit, scale = time_unit(t1 - t0)
    labels: list[str] = []
    y = rows
    present: set[str] = set()
    budget = [MAX_LABELS]
    for block in blocks:
        for s in range(len(block.timeline.chains)):
            y -= 1
            present |= _draw_row(ax, block, s, y, (t0, t1), scale, budget)
            stream = _stream_label(block.timeline, s)
            labels.append(f"{block.label}: {stream}" if block.label else stream)
    ax.set_yticks([rows - 1 - k + 0.5 for k in range(rows)])
    ax.set_yticklabels(labels)
    ax.set_ylim(0, max(1, rows))
    ax.set_xlim(0, (t1 - t0) / scale)
    offset = f" from {_fmt(t0)}" if t0 > 0 else ""
    ax.set_xlabel(f"time ({unit}){offset}")
    ax.set_title(title)
    _legend(ax, present)
    fig.tight_layout()
    return fig


def compare_figure(
    before: Sequence[GanttBlock],
    after: Sequence[GanttBlock],
    title: str,
    window: Window | None = None,
    names: tuple[str, str] = ("before", "after"),
) -> Figure:
    """Two stacked panels (before / after) sharing one time axis, one legend."""
    plt = _pyplot()
    rows = [sum(len(b.timeline.chains) for b in part) for part in (before, after)]
    fig, axes = plt.subplots(2, 1, sharex=True, figsize=(14, 2.2 + 0.5 * sum(rows)),
                             gridspec_kw={"height_ratios": [max(1, r) for r in rows]})  # fmt: skip
    t0, t1 = _bounds([*before, *after], window)
    unit, scale = time_unit(t1 - t0)
    present: set[str] = set()
    budget = [MAX_LABELS]
    for ax, part, name, n in zip(axes, (before, after), names, rows, strict=True):
        labels: list[str] = []
        y = n
        for block in part:
            for s in range(len(block.timeline.chains)):
                y -= 1
                present |= _draw_row(ax, block, s, y, (t0, t1), scale, budget)
                stream = _stream_label(block.timeline, s)
                labels.append(f"{block.label}: {stream}" if block.label else stream)
        makespan = sum(b.timeline.makespan_us for b in part if not b.nested)
        ax.set_title(f"{name}: makespan {_fmt(makespan)}", loc="left", fontsize=10)
        ax.set_yticks([n - 1 - k + 0.5 for k in range(n)])
        ax.set_yticklabels(labels)
        ax.set_ylim(0, max(1, n))
    axes[1].set_xlim(0, (t1 - t0) / scale)
    offset = f" from {_fmt(t0)}" if t0 > 0 else ""
    axes[1].set_xlabel(f"time ({unit}){offset}")
    fig.suptitle(title)
    _legend(axes[0], present)
    fig.tight_layout()
    return fig


_METADATA = {"png": {}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}
"""No creation dates: the same schedule gives the same bytes."""


def save_figure(fig: Figure, path: str, fmt: str = "png") -> None:
    """Write `fig` atomically as `fmt` (`png`, `svg` or `pdf`) and release it."""
    plt = _pyplot()
    try:
        with atomic_path(path) as tmp, plt.rc_context({"svg.hashsalt": "lancet"}):
            fig.savefig(tmp, format=fmt, dpi=100, metadata=_METADATA[fmt])
    finally:
        plt.close(fig)


def _draw_row(
    ax: Any,
    block: GanttBlock,
    stream: int,
    y: int,
    bounds: tuple[float, float],
    scale: float,
    label_budget: list[int],
) -> set[str]:
    """Draw one stream's ops clipped to the window; the categories drawn."""
    t0, t1 = bounds
    tl = block.timeline
    spans: dict[str, list[tuple[float, float]]] = {}
    long_ops: list[tuple[float, float, int]] = []
    for i in tl.chains[stream]:
        start, end = max(tl.start[i], t0), min(tl.end[i], t1)
        if end <= start:
            continue
        spans.setdefault(block.categories[i], []).append(
            ((start - t0) / scale, (end - start) / scale)
        )
        if end - start >= LABEL_FRACTION * (t1 - t0):
            long_ops.append((start, end, i))
    shown = sum(len(v) for v in spans.values())
    edge = "white" if shown <= EDGE_LIMIT else "none"
    for category in CATEGORY_COLORS:
        if category in spans:
            ax.broken_barh(spans[category], (y + 0.1, 0.8), facecolors=CATEGORY_COLORS[category],
                           edgecolor=edge, linewidth=0.6, label=category)  # fmt: skip
    for start, end, i in long_ops:
        text = block.names[i].split(".", 1)[-1]  # "comm.allreduce %g" -> "allreduce %g"
        if (end - start) / (t1 - t0) * _AXIS_PX < _CHAR_PX * len(text) + 4:
            continue  # would spill over its neighbours
        if label_budget[0] <= 0:
            break
        label_budget[0] -= 1
        ax.text(((start + end) / 2 - t0) / scale, y + 0.5, text, ha="center",
                va="center", fontsize=7, clip_on=True)  # fmt: skip
    return set(spans)


def _legend(ax: Any, present: set[str]) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=c, label=k) for k, c in CATEGORY_COLORS.items() if k in present]
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
                  frameon=False)  # fmt: skip


def _fmt(us: float) -> str:
    unit, scale = time_unit(us)
    return f"{us / scale:.4g} {unit}"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
