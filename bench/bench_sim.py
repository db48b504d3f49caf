"""Benchmark: timeline simulation of a large block against parsing it.

Generates one func.func of N ops with explicit `lancet.time_us` attributes (no profile or
roofline needed): a compute chain with a side branch per group whose result is all-reduced
and consumed by an update op, so both streams are busy and the list scheduler has choices.
In one process, one run per size, measures: parse, building the DataflowGraph, reading the
durations through the cost model, the fixed-order evaluation (slowdown 1.0, O(V+E)), the
event-driven fixed-order evaluation (slowdown 1.5), the list schedule (Lancet §5.1), the
launch order, summarize (critical path, exposed comm), the Chrome trace (with JSON
serialization), and the whole `lancet-schedule` decision (list schedule + two fixed-order
evaluations). Ratios are simulation time / parse time.

Usage: python bench/bench_sim.py [--sizes 10000 100000] [--out bench/results/sim.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench_common import comm_context, timed  # noqa: E402 - next to this script
from xdsl.parser import Parser

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.sim import evaluate_fixed_order, list_schedule, summarize
from lancet_mlir.sim.profiled_schedule import profiled_fifo_schedule
from lancet_mlir.sim.trace import chrome_trace

T = "tensor<256xf32>"
GROUP = 5


def make_module(n_ops: int) -> str:
    """Text of a func with about n_ops ops; per group of 5: chain a -> b, a side branch
    c (from a) whose result is all-reduced (r) and consumed by an update u."""
    lines = [f"func.func @step(%x: {T}) -> {T} {{"]
    prev = "%x"
    for g in range(n_ops // GROUP):
        ta, tb, tc = 1 + g % 3, 2 + (g * 7) % 5, 1 + (g * 3) % 4
        tr, tu = 3 + (g * 5) % 7, 1 + g % 2
        lines.append(
            f'  %a{g} = "test.op"({prev}) {{lancet.time_us = {ta}.0 : f64}} : ({T}) -> {T}'
        )
        lines.append(f'  %b{g} = "test.op"(%a{g}) {{lancet.time_us = {tb}.0 : f64}} : ({T}) -> {T}')
        lines.append(f'  %c{g} = "test.op"(%a{g}) {{lancet.time_us = {tc}.0 : f64}} : ({T}) -> {T}')
        lines.append(
            f"  %r{g} = comm.allreduce %c{g} {{lancet.time_us = {tr}.0 : f64}} : ({T}) -> {T}"
        )
        lines.append(f'  %u{g} = "test.op"(%r{g}) {{lancet.time_us = {tu}.0 : f64}} : ({T}) -> {T}')
        prev = f"%b{g}"
    lines.append(f"  func.return {prev} : {T}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def measure(n_ops: int) -> dict[str, float]:
    """Time parsing and every simulation step on an n_ops module."""
    text = make_module(n_ops)
    module, parse_s = timed(lambda: Parser(comm_context(), text, "bench.mlir").parse_module())
    block = module.body.block.first_op.body.block
    graph, graph_s = timed(lambda: DataflowGraph.from_block(block))
    durations, durations_s = timed(lambda: CostModel.from_config(CostConfig()).graph_times(graph))
    fixed, fixed_s = timed(lambda: evaluate_fixed_order(graph, durations))
    _, slow_s = timed(lambda: evaluate_fixed_order(graph, durations, overlap_slowdown=1.5))
    listed, list_s = timed(lambda: list_schedule(graph, durations))
    _, order_s = timed(lambda: listed.order)
    summary, summarize_s = timed(lambda: summarize(graph, durations, fixed))
    _, trace_s = timed(lambda: json.dumps(chrome_trace(graph, durations, fixed)))
    decision, decision_s = timed(lambda: profiled_fifo_schedule(graph, durations))
    return {
        "ops": len(graph),
        "parse_s": parse_s,
        "graph_build_s": graph_s,
        "durations_s": durations_s,
        "fixed_order_s": fixed_s,
        "fixed_order_slowdown_s": slow_s,
        "list_schedule_s": list_s,
        "launch_order_s": order_s,
        "summarize_s": summarize_s,
        "chrome_trace_s": trace_s,
        "lancet_schedule_decision_s": decision_s,
        "fixed_ratio": fixed_s / parse_s,
        "slowdown_ratio": slow_s / parse_s,
        "list_ratio": list_s / parse_s,
        "decision_ratio": decision_s / parse_s,
        "input_makespan_us": fixed.makespan_us,
        "list_makespan_us": listed.makespan_us,
        "scheduled_makespan_us": decision.output_makespan_us,
        "exposed_comm_us": summary.exposed_comm_us,
        "lower_bound_us": summary.lower_bound_us,
    }


def table(rows: list[dict[str, float]]) -> str:
    """The markdown table of the measurements."""
    out = [
        "| ops | parse s | graph s | durations s | fixed s | fixed / parse | fixed f=1.5 s "
        "| list s | list / parse | lancet-schedule s | decision / parse | summarize s | trace s |",
        "|" + "---|" * 13,
    ]
    for r in rows:
        out.append(
            f"| {r['ops']} | {r['parse_s']:.2f} | {r['graph_build_s']:.3f} "
            f"| {r['durations_s']:.3f} | {r['fixed_order_s']:.3f} "
            f"| {100 * r['fixed_ratio']:.2f}% | {r['fixed_order_slowdown_s']:.3f} "
            f"| {r['list_schedule_s']:.3f} | {100 * r['list_ratio']:.2f}% "
            f"| {r['lancet_schedule_decision_s']:.3f} | {100 * r['decision_ratio']:.2f}% "
            f"| {r['summarize_s']:.3f} | {r['chrome_trace_s']:.3f} |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--out", type=Path, default=Path("bench/results/sim.json"))
    args = parser.parse_args()
    rows = []
    for n in args.sizes:
        rows.append(measure(n))
        print(f"{n} ops done", file=sys.stderr)
    text = table(rows)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    header = (
        "# Timeline simulation vs parse (`python bench/bench_sim.py`)\n\n"
        f"Measured {time.strftime('%Y-%m-%d')}, one run per size, in one process. `graph` builds the "
        "DataflowGraph; `durations` reads `lancet.time_us` through the cost model; `fixed` is "
        "the O(V+E) fixed-order evaluation, `fixed f=1.5` the event-driven one with overlap "
        "slowdown; `list` is Lancet's list scheduler (without the launch-order sort); "
        "`lancet-schedule` is the whole decision (list schedule + launch order + two fixed-order "
        "evaluations); `trace` builds the Chrome trace and serializes it.\n\n"
    )
    args.out.with_suffix(".md").write_text(header + text + "\n")


if __name__ == "__main__":
    main()
