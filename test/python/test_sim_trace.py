"""Chrome trace and Gantt export of simulated timelines (lancet_mlir.sim.trace)."""

from __future__ import annotations

import json
import os
import time

from helpers import parse

from lancet_mlir.graph.core import Problem
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.sim import evaluate_fixed_order, list_schedule
from lancet_mlir.sim.trace import chrome_trace, gantt_png, gantt_png_blocks, merge_traces

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def x_events(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def test_one_event_per_timed_op() -> None:
    # a(3) -> r(5, comm) -> u(2), and z (0 µs) after u on the compute stream: z takes no
    # time and gets no event.
    g = Problem.from_edges(4, [(0, 1), (1, 2)], comm=[1])
    d = [3.0, 5.0, 2.0, 0.0]
    tl = evaluate_fixed_order(g, d)
    trace = json.loads(json.dumps(chrome_trace(g, d, tl)))
    events = x_events(trace)
    assert [e["args"]["node"] for e in events] == [0, 1, 2]
    assert [(e["tid"], e["ts"], e["dur"], e["cat"]) for e in events] == [
        (0, 0.0, 3.0, "compute"),
        (1, 3.0, 5.0, "comm"),
        (0, 8.0, 2.0, "compute"),
    ]
    assert [e["name"] for e in events] == ["op 0", "comm 1", "op 2"]
    assert all(e["pid"] == 0 for e in trace["traceEvents"])
    names = {
        e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"
    }
    assert names == {0: "compute", 1: "comm 1"}


def test_zero_duration_ops_have_no_event() -> None:
    g = Problem.from_edges(3, [(0, 1)], comm=[1])
    d = [2.0, 0.0, 1.0]
    trace = chrome_trace(g, d, evaluate_fixed_order(g, d))
    assert sorted(e["args"]["node"] for e in x_events(trace)) == [0, 2]


def test_trace_of_ir_block_names_keys_and_bytes() -> None:
    module = parse(
        """
        func.func @f(%x: tensor<64xf32>) -> tensor<64xf32> {
          %a = "test.op"(%x) : (tensor<64xf32>) -> tensor<64xf32>
          %r = comm.allreduce %a : (tensor<64xf32>) -> tensor<64xf32>
          func.return %r : tensor<64xf32>
        }
        """
    )
    func = module.body.block.first_op
    graph = DataflowGraph.from_block(func.body.block)
    d = [2.0, 4.0]
    trace = chrome_trace(graph, d, evaluate_fixed_order(graph, d), pid=3, process_name="@f")
    events = x_events(trace)
    assert [e["name"] for e in events] == ["test.op %a", "comm.allreduce %r"]
    assert events[0]["args"]["op_key"] == "test.op;T<64xf32>,|T<64xf32>"
    assert "bytes" not in events[0]["args"]
    assert events[1]["args"]["bytes"] == 64 * 4
    assert all(e["pid"] == 3 for e in trace["traceEvents"])
    process = [e for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert process[0]["args"]["name"] == "@f"
    merged = merge_traces([trace, chrome_trace(graph, d, evaluate_fixed_order(graph, d))])
    assert len(x_events(merged)) == 4


def test_trace_of_a_filled_collective_shows_the_bytes_it_is_costed_at() -> None:
    module = parse(
        """
        func.func @f(%x: tensor<64xf32>) -> tensor<64xf32> {
          %r = comm.allreduce %x {lancet.fill = 0.25 : f64} : (tensor<64xf32>) -> tensor<64xf32>
          func.return %r : tensor<64xf32>
        }
        """
    )
    graph = DataflowGraph.from_block(module.body.block.first_op.body.block)
    d = [4.0]
    (event,) = x_events(chrome_trace(graph, d, evaluate_fixed_order(graph, d)))
    assert event["args"]["bytes"] == 64 * 4  # the padded payload
    assert event["args"]["fill"] == 0.25
    assert event["args"]["filled_bytes"] == 64


def test_gantt_png_is_written_atomically(tmp_path) -> None:
    g = Problem.from_edges(4, [(0, 1), (1, 2)], comm=[1])
    d = [3.0, 5.0, 2.0, 4.0]
    out = tmp_path / "g.png"
    gantt_png(str(out), g, d, list_schedule(g, d), title="hand example")
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert os.listdir(tmp_path) == ["g.png"]


def test_gantt_draws_ten_thousand_ops_quickly(tmp_path) -> None:
    # a chain of 5000 compute ops, each feeding a collective
    n = 10_000
    edges = [(i, i + 1) for i in range(0, n - 2, 2)] + [(i, i + 1) for i in range(0, n, 2)]
    g = Problem.from_edges(n, edges, comm=range(1, n, 2))
    d = [1.0 + (i % 3) for i in range(n)]
    tl = evaluate_fixed_order(g, d)
    out = tmp_path / "big.png"
    t0 = time.perf_counter()
    gantt_png_blocks(str(out), [("@big", tl), ("@again", tl)], title="10k ops")
    assert time.perf_counter() - t0 < 30.0
    assert out.read_bytes()[:8] == PNG_MAGIC
