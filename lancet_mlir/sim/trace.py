"""Export a simulated timeline: Chrome/Perfetto trace JSON and a Gantt chart (PNG).

Chrome trace (`chrome_trace`): one complete event (`"ph": "X"`) per op whose duration is
> 0 (ops of duration 0 take no time and would only clutter the view; they are left out).
`pid` is the block (0 by default; the driver gives each simulated block its own pid and a
`process_name`), `tid` is the stream: 0 = compute, 1..k = communication streams, named by
`thread_name` metadata events "compute", "comm 1", ... . `ts`/`dur` are µs, the trace
format's unit. `name` is the op name plus its first result's name (`comp.matmul %y`); `args`
hold the op key, the node index, the stream, for collectives the payload bytes (with a
`lancet.fill` below 1 also `fill` and `filled_bytes`, the bytes the op is costed at), and (from
lancet-opt) the `time_source` of the op's time (profile/time_source.py).
Open the file in https://ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

from collections.abc import Sequence

from lancet_mlir.graph.core import Graph
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.graph.fill import op_fill
from lancet_mlir.sim.gantt import GanttBlock, Window, gantt_figure, op_categories, save_figure
from lancet_mlir.sim.model import COMPUTE_STREAM, HOST_STREAM, Timeline


def stream_name(stream: int, copy_stream: int | None = None) -> str:
    """Display name of a stream id: "compute", "comm <k>" or (the copy engine) "copy"."""
    if stream == copy_stream:
        return "copy"
    return "compute" if stream == COMPUTE_STREAM else f"comm {stream}"


def op_names(graph: Graph) -> list[str]:
    """Display names per node: op name plus first result name, or "op <i>" without IR."""
    ops = getattr(graph, "ops", None)
    if ops is None:
        return [f"{'comm' if c else 'op'} {i}" for i, c in enumerate(graph.is_comm)]
    names = []
    for op in ops:
        name = op_display_name(op)
        hint = op.results[0].name_hint if op.results else None
        names.append(f"{name} %{hint}" if hint else name)
    return names


def _op_keys(graph: Graph) -> list[str] | None:
    ops = getattr(graph, "ops", None)
    if ops is None:
        return None
    from lancet_mlir.cost.keys import op_key

    return [op_key(op) for op in ops]


def chrome_trace(
    graph: Graph,
    durations: Sequence[float],
    timeline: Timeline,
    names: Sequence[str] | None = None,
    *,
    pid: int = 0,
    process_name: str | None = None,
    sources: Sequence[str] | None = None,
) -> dict:
    """The Chrome/Perfetto trace of `timeline` (see the module docstring for the layout);
    `sources` (per node) adds each event's `time_source` to its args."""
    n = len(timeline)
    if len(durations) != n or len(graph.preds) != n:
        raise ValueError("graph, durations and timeline sizes differ")
    labels = list(names) if names is not None else op_names(graph)
    keys = _op_keys(graph)
    payload = getattr(graph, "payload_bytes", None)
    ops = getattr(graph, "ops", None)
    events: list[dict] = []
    if process_name is not None:
        events.append(_meta("process_name", pid, 0, process_name))
        events.append(
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": pid,
                "tid": 0,
                "args": {"sort_index": pid},
            }
        )
    for s in range(len(timeline.chains)):
        events.append(_meta("thread_name", pid, s, timeline.stream_label(s)))
        events.append(
            {
                "name": "thread_sort_index",
                "ph": "M",
                "pid": pid,
                "tid": s,
                "args": {"sort_index": s},
            }
        )
    for i in timeline.order:
        if durations[i] <= 0 or timeline.stream[i] == HOST_STREAM:  # a host sync takes no time
            continue
        args: dict = {"node": i, "stream": timeline.stream[i]}
        if keys is not None:
            args["op_key"] = keys[i]
        if graph.is_comm[i] and payload is not None:
            args["bytes"] = payload[i]
            fill = 1.0 if ops is None else op_fill(ops[i])
            if fill < 1:  # costed at this share of the padded bytes (a token part's window)
                args["fill"] = fill
                args["filled_bytes"] = payload[i] * fill
        if sources is not None:
            args["time_source"] = sources[i]
        events.append(
            {
                "name": labels[i],
                "cat": "comm" if graph.is_comm[i] else "compute",
                "ph": "X",
                "pid": pid,
                "tid": timeline.stream[i],
                "ts": timeline.start[i],
                "dur": timeline.end[i] - timeline.start[i],
                "args": args,
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _meta(kind: str, pid: int, tid: int, name: str) -> dict:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def merge_traces(traces: Sequence[dict]) -> dict:
    """Concatenate the events of several traces (give each its own pid first)."""
    events = [e for t in traces for e in t["traceEvents"]]
    return {"traceEvents": events, "displayTimeUnit": "ms"}


# ---- Gantt chart (drawn by sim/gantt.py) ------------------------------------------------------
def gantt_png(
    path: str,
    graph: Graph,
    durations: Sequence[float],
    timeline: Timeline,
    title: str = "simulated timeline",
    window: Window | None = None,
) -> None:
    """Draw one row per stream, every op coloured by its category (see sim/gantt.py)."""
    if len(durations) != len(timeline):
        raise ValueError("durations and timeline sizes differ")
    block = GanttBlock("", timeline, op_categories(graph), op_names(graph))
    save_figure(gantt_figure([block], title, window), path)


def gantt_png_blocks(
    path: str,
    blocks: Sequence[tuple[str, Timeline] | GanttBlock],
    title: str = "simulated timeline",
    window: Window | None = None,
) -> None:
    """Draw several timelines as stacked groups of stream rows, written atomically.

    A bare (label, timeline) pair has no IR: its ops are drawn as "compute" or
    "collective" by stream and named "op <i>".
    """
    save_figure(gantt_figure([_as_block(b) for b in blocks], title, window), path)


def _as_block(block: tuple[str, Timeline] | GanttBlock) -> GanttBlock:
    if isinstance(block, GanttBlock):
        return block
    label, tl = block
    cats = ["collective" if 0 < s <= tl.num_comm_streams else "compute" for s in tl.stream]
    return GanttBlock(label, tl, cats, [f"op {i}" for i in range(len(tl))])
