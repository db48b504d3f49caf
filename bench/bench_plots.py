"""PNG plots of bench/run_bench.py: iteration time and speedup per schedule, MoE-layer Gantt."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lancet_mlir.graph.dataflow import collective_kind
from lancet_mlir.sim.blocks import BlockResult
from lancet_mlir.support.files import atomic_path

COMPUTE_COLOR = "#4C72B0"
COMM_COLORS = {"all_to_all": "#C44E52", "all_to_allv": "#C44E52", "allreduce": "#DD8452"}
OTHER_COMM_COLOR = "#55A868"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    plt = _pyplot()
    try:
        with atomic_path(str(path)) as tmp:
            fig.savefig(tmp, format="png", dpi=90, bbox_inches="tight")
    finally:
        plt.close(fig)


def write_all(
    out: Path,
    runs: Sequence[dict],
    kept: dict[str, BlockResult],
    gantt_config: str | None,
    anchor_attr: str,
) -> list[str]:
    """Write every plot into `out`; returns the file names, in report order."""
    names: list[str] = []
    keys = list(dict.fromkeys((r["source"], r["device"]) for r in runs))
    for source, device in keys:
        group = [r for r in runs if r["source"] == source and r["device"] == device]
        for metric in ("makespan_us", "speedup_vs_program_order"):
            name = f"{'iteration_time' if metric == 'makespan_us' else 'speedup'}_{source}_{device}.png"
            bar_chart(out / name, group, metric, f"{source} on {device}")
            names.append(name)
    if gantt_config is not None and kept:
        name = f"gantt_moe_layer_{gantt_config}.png"
        if gantt_moe_layer(out / name, kept, gantt_config, anchor_attr):
            names.append(name)
    return names


def bar_chart(path: Path, runs: Sequence[dict], metric: str, title: str) -> None:
    """One subplot per model family; groups = world sizes; one bar per schedule."""
    plt = _pyplot()
    families = list(dict.fromkeys(r["family"] for r in runs))
    pipelines = list(dict.fromkeys(e["name"] for r in runs for e in r["pipelines"]))
    fig, axes = plt.subplots(
        1, len(families), figsize=(4.2 * len(families) + 1.5, 4.2), squeeze=False
    )
    cmap = plt.get_cmap("tab10")
    width = 0.8 / max(1, len(pipelines))
    for ax, family in zip(axes[0], families, strict=True):
        members = [r for r in runs if r["family"] == family]
        scale, unit = _scale(members, metric)
        for k, pipe in enumerate(pipelines):
            xs, ys = [], []
            for g, run in enumerate(members):
                entry = next((e for e in run["pipelines"] if e["name"] == pipe), None)
                if entry is not None and entry["status"] == "ok" and entry.get(metric) is not None:
                    xs.append(g + (k - (len(pipelines) - 1) / 2) * width)
                    ys.append(entry[metric] / scale)
            ax.bar(xs, ys, width=width, color=cmap(k % 10), label=pipe)
        ax.set_xticks(range(len(members)))
        ax.set_xticklabels([f"{r['world_size']} ranks" for r in members])
        ax.set_title(family, fontsize=9)
        if metric == "speedup_vs_program_order":
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_ylabel("speedup vs program order")
            _zoom(ax, members, metric)
        else:
            ax.set_ylabel(f"iteration time ({unit})")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle(f"{'iteration time' if metric == 'makespan_us' else 'speedup'}: {title}")
    fig.tight_layout()
    _save(fig, path)


def _scale(runs: Sequence[dict], metric: str) -> tuple[float, str]:
    if metric != "makespan_us":
        return 1.0, ""
    values = [e[metric] for r in runs for e in r["pipelines"] if e["status"] == "ok"]
    return (1000.0, "ms") if values and max(values) >= 1000 else (1.0, "µs")


def _zoom(ax, runs: Sequence[dict], metric: str) -> None:
    """Speedups differ by a few percent: show the range around 1.0 that holds them all."""
    values = [
        e[metric] for r in runs for e in r["pipelines"] if e["status"] == "ok" and e.get(metric)
    ]
    if not values:
        return
    low, high = min(min(values), 1.0), max(max(values), 1.0)
    pad = max(0.005, (high - low) * 0.15)
    ax.set_ylim(low - pad, high + pad)


def gantt_moe_layer(
    path: Path, kept: dict[str, BlockResult], config: str, anchor_attr: str
) -> bool:
    """Program order vs the fastest of our schedules, cropped to the backward pass of the last
    MoE layer (from its combine-gradient op to the end of its dispatch-gradient op, i.e. both
    backward all-to-alls and the expert gradients between them). False if not drawable."""
    before = kept.get("program order")
    ours = [(name, r) for name, r in kept.items() if name != "program order"]
    if before is None or not ours:
        return False
    name, after = min(ours, key=lambda item: item[1].summary.makespan_us)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(14, 3.4))
    labels: list[str] = []
    width = 0.0
    for row, (label, result) in enumerate((("program order", before), (name, after))):
        t0, t1 = _window(result, anchor_attr)
        width = max(width, t1 - t0)
        base = 2 * (1 - row)
        _draw(ax, result, t0, t1, base)
        labels += [f"{label}: comm", f"{label}: compute"]
    ax.set_yticks([y + 0.5 for y in range(4)])
    ax.set_yticklabels(list(reversed(labels)))
    ax.set_xlim(0, width if width > 0 else 1.0)
    ax.set_xlabel("µs from the start of the layer's backward pass")
    ax.set_title(
        f"{config}: backward pass of the last MoE layer (red: all-to-all, orange: all-reduce)"
    )
    fig.tight_layout()
    _save(fig, path)
    return True


def _window(result: BlockResult, anchor_attr: str) -> tuple[float, float]:
    tl = result.timeline
    begin = end = None
    for i, op in enumerate(result.graph.ops):
        tag = op.attributes.get(anchor_attr)
        if tag is not None and tag.data == "begin":
            begin = i
        elif tag is not None and tag.data == "end":
            end = i
    if begin is None or end is None:
        return 0.0, tl.makespan_us
    return tl.start[begin], max(tl.end[end], tl.start[begin])


def _draw(ax, result: BlockResult, t0: float, t1: float, base: int) -> None:
    tl = result.timeline
    spans: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for i in range(len(tl)):
        start, end = max(tl.start[i], t0), min(tl.end[i], t1)
        if end <= start:
            continue
        comm = result.graph.is_comm[i]
        color = (
            COMM_COLORS.get(collective_kind(result.graph.ops[i]) or "", OTHER_COMM_COLOR)
            if comm
            else COMPUTE_COLOR
        )
        spans.setdefault((1 if comm else 0, color), []).append((start - t0, end - start))
    for (row, color), items in sorted(spans.items()):
        ax.broken_barh(items, (base + row + 0.1, 0.8), facecolors=color, edgecolor="none")
