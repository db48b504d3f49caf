"""Virtual nodes (sim/engine.py "Virtual nodes"): the `trace.payload` in front of an imported
collective is bookkeeping, not GPU work: it takes no stream and no launch, so the collective
waits only for its own dependencies. Hand-computed times on every engine path, on Problems and
on imported traces (test/data/traces/comm_*.json)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.dialects.trace import PayloadOp
from lancet_mlir.graph.core import Problem
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.importers.traces import load_steps
from lancet_mlir.importers.traces.build import build_module
from lancet_mlir.sim.blocks import simulate_module
from lancet_mlir.sim.engine import (
    _fixed_order_events,
    _no_stream,
    evaluate_fixed_order,
    list_schedule,
)
from lancet_mlir.sim.model import HOST_STREAM
from lancet_mlir.sim.options import SimOptions

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"

# 0: kernel a (100 us), 1: a virtual node on nothing, 2: allreduce r (50 us) on it: the shape
# of comm_overlap.json's module (k1 on one stream, an NCCL all-reduce on another)
OVERLAP = Problem([[], [], [1]], [[], [2], []], [None, None, "allreduce"], [100.0, 0.0, 50.0])
VIRTUAL = [False, True, False]


def test_a_virtual_node_takes_no_stream_and_no_launch() -> None:
    tl = evaluate_fixed_order(OVERLAP, OVERLAP.durations, virtual=VIRTUAL)
    # a 0-100, the virtual node at 0 on no stream, r 0-50 alongside a
    assert (tl.start, tl.end) == ([0.0, 0.0, 0.0], [100.0, 0.0, 50.0])
    assert tl.stream == [0, HOST_STREAM, 1]
    assert tl.chains == [[0], [2]]
    assert tl.makespan_us == 100.0
    # as a zero-time compute op it waits for a on the compute stream: r 100-150
    assert evaluate_fixed_order(OVERLAP, OVERLAP.durations).makespan_us == 150.0
    # L = 5: a's launch ends at 5 (5-105), r is the second launch (10-60); as a compute op
    # the node would take the second launch and r the third
    late = evaluate_fixed_order(OVERLAP, OVERLAP.durations, virtual=VIRTUAL, launch_overhead_us=5)
    assert (late.start, late.end) == ([5.0, 0.0, 10.0], [105.0, 0.0, 60.0])


@pytest.mark.parametrize(("overhead", "expected"), [(0.0, 125.0), (5.0, 130.0)])
def test_the_event_path_honours_virtual_nodes(overhead: float, expected: float) -> None:
    # slowdown 2. L = 0: a runs at half speed while r runs (0-50: 25 us of work), the other
    # 75 at full speed: 125. L = 5: a 5-10 alone (5), 10-60 beside r (25), 70 left: 130
    tl = evaluate_fixed_order(
        OVERLAP, OVERLAP.durations, overlap_slowdown=2.0, launch_overhead_us=overhead,
        virtual=VIRTUAL,
    )  # fmt: skip
    assert tl.stream == [0, HOST_STREAM, 1]
    assert tl.start[2] == 2 * overhead
    assert tl.makespan_us == expected


@pytest.mark.parametrize(("overhead", "expected"), [(0.0, 100.0), (5.0, 105.0)])
def test_list_scheduling_passes_virtual_nodes_at_once(overhead: float, expected: float) -> None:
    tl = list_schedule(OVERLAP, OVERLAP.durations, launch_overhead_us=overhead, virtual=VIRTUAL)
    assert tl.start == [overhead, 0.0, 2 * overhead]
    assert tl.makespan_us == expected


def test_bad_virtual_flags_are_refused() -> None:
    with pytest.raises(ValueError, match="2 virtual-node flags for a graph of 3 ops"):
        evaluate_fixed_order(OVERLAP, OVERLAP.durations, virtual=[False, True])
    with pytest.raises(ValueError, match="node 2: a virtual node cannot be a collective"):
        evaluate_fixed_order(OVERLAP, OVERLAP.durations, virtual=[False, False, True])


def test_no_stream_flags_share_one_list() -> None:
    assert _no_stream(None, None) is None
    assert _no_stream([False, False], [False, False]) is None
    # 0 on a stream, 1 host sync (True in a host-sync list), 2 virtual; a sync wins
    assert _no_stream([False, True, True], [True, False, True]) == [2, 1, 1]


# ---- imported traces ---------------------------------------------------------------------------
def _graph(name: str, data_only: bool = False) -> DataflowGraph:
    module = build_module(load_steps([str(DATA / name)]), data_only=data_only)
    fn = next(iter(module.body.block.ops))
    return DataflowGraph.from_block(fn.regions[0].blocks[0])


def _simulate(name: str, overhead: float) -> float:
    module = build_module(load_steps([str(DATA / name)]))
    model = CostModel.from_config(CostConfig())
    (result,) = simulate_module(module, model, SimOptions(launch_overhead_us=overhead))
    return result.summary.makespan_us


def _measured(graph: DataflowGraph) -> list[float]:
    return [op.attributes["lancet.time_us"].value.data for op in graph.ops]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "overhead", "expected"),
    [
        # k1 (100 us, launched 1st) and an NCCL all-reduce (50 us, 2nd) on another stream
        ("comm_overlap.json", 0.0, 100.0),
        ("comm_overlap.json", 5.0, 105.0),  # k1 5-105, the all-reduce 10-60
        # an all-reduce (45 us), cudaStreamSynchronize on it, k2 (10 us): L = 0 45 + 10;
        # L = 5: all-reduce 5-50, the host waits until 50, k2's launch ends at 55: 55-65
        ("comm_sync.json", 0.0, 55.0),
        ("comm_sync.json", 5.0, 65.0),
        # k1 (40) and all-reduce 1 (60) side by side, cudaDeviceSynchronize, then k2 (10),
        # all-reduce 2 (30, on the sync) and k3 (20, after k2). L = 0: the sync at 60, k2
        # 60-70, all-reduce 2 60-90, k3 70-90. L = 5: k1 5-45, all-reduce 1 10-70; the host
        # waits until 70: k2 75-85, all-reduce 2 80-110, k3 85-105
        ("comm_sync_mix.json", 0.0, 90.0),
        ("comm_sync_mix.json", 5.0, 110.0),
    ],
)
def test_imported_collectives_wait_for_their_own_dependencies_only(
    name: str, overhead: float, expected: float
) -> None:
    assert _simulate(name, overhead) == expected


def test_the_import_has_one_payload_per_collective_and_no_join_kernel() -> None:
    graph = _graph("comm_sync_mix.json")
    # k1, payload, all-reduce 1, the sync, k2, payload (on the sync), all-reduce 2, k3
    assert [type(op).__name__ for op in graph.ops] == [
        "KernelOp", "PayloadOp", "AllReduceOp", "HostSyncOp", "KernelOp", "PayloadOp",
        "AllReduceOp", "KernelOp",
    ]  # fmt: skip
    assert graph.is_virtual == [isinstance(op, PayloadOp) for op in graph.ops]
    assert graph.preds[5] == [3]
    assert not any(graph.is_host_sync[i] for i, v in enumerate(graph.is_virtual) if v)


@pytest.mark.parametrize("overhead", [0.0, 5.0])
def test_every_engine_path_agrees_on_the_imported_mix(overhead: float) -> None:
    graph = _graph("comm_sync_mix.json")
    durations = _measured(graph)
    plain = evaluate_fixed_order(
        graph, durations, launch_overhead_us=overhead, host_syncs=graph.is_host_sync,
        virtual=graph.is_virtual,
    )  # fmt: skip
    nostream = _no_stream(graph.is_host_sync, graph.is_virtual)
    order = list(range(len(graph)))
    events = _fixed_order_events(graph, durations, order, 1, 1.0, overhead, None, nostream)
    assert (events.start, events.end, events.stream) == (plain.start, plain.end, plain.stream)
    # list scheduling finds the same times here (see the hand computation above)
    listed = list_schedule(
        graph, durations, launch_overhead_us=overhead, host_syncs=graph.is_host_sync,
        virtual=graph.is_virtual,
    )  # fmt: skip
    assert listed.end == plain.end
    expected_end = {0.0: [40, 0, 60, 60, 70, 60, 90, 90], 5.0: [45, 0, 70, 70, 85, 70, 110, 105]}
    assert plain.end == [float(x) for x in expected_end[overhead]]
