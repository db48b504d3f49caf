"""The schedulers' internal model sees copies, host syncs and virtual nodes as the simulator
does (review of #19, finding 1): copies on their copy-engine queues' chains, host syncs and
virtual nodes (`trace.payload`) on no stream at zero cost. Before, the inner search (chain
evaluator, list schedules, local search, exact search, fusion, tail deferral) saw every one
of them as a compute op, so it optimised the wrong objective on imported traces.

Hand-computed makespans for the repro (a memcpy feeding a kernel, two measured NCCL
all-reduces with their payloads), and the invariant as properties over random small graphs:
for any order, the chain evaluator's times are `evaluate_fixed_order`'s with the problem's
`node_flags` (one comm stream, no slowdown, no launch overhead), exactly."""

from __future__ import annotations

import pytest
from helpers import parse, run_pipeline
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.graph.core import Problem, node_flags, topological_order
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.optimize.chains import (
    _evaluate_streams,
    block_order,
    evaluate,
    evaluate_chains,
    reachability,
    resume_point,
    split_chains,
)
from lancet_mlir.optimize.contract import contract
from lancet_mlir.optimize.dw import dw_schedule
from lancet_mlir.optimize.exact import exact_schedule
from lancet_mlir.optimize.fusion import plan_noncritical_fusion
from lancet_mlir.optimize.local_search import improve
from lancet_mlir.optimize.pipeline import FusionHooks
from lancet_mlir.optimize.pipeline import run_pipeline as run_stages
from lancet_mlir.optimize.search import search_schedule
from lancet_mlir.optimize.tail import defer_to_tail
from lancet_mlir.passes.scheduling import block_problem
from lancet_mlir.sim import evaluate_fixed_order
from lancet_mlir.sim.blocks import simulate_module
from lancet_mlir.sim.model import HOST_STREAM
from lancet_mlir.sim.options import SimOptions


def engine(p: Problem, order: list[int]):
    """The simulator's fixed-order timeline of `order`, with the problem's flags."""
    return evaluate_fixed_order(p, p.durations, order=order, **node_flags(p))


# ---- the repro -------------------------------------------------------------------------------
# 0 m: memcpy HtoD (20 us) -> 1 km: kernel (10) -> 2 pm: payload -> 3 cm: all-reduce (100)
# 4 ka: kernel (15) -> 5 pa: payload -> 6 ca: all-reduce (10);  7 kb: kernel (50)
REPRO = """
func.func @step() {
  %m = trace.kernel {name = "Memcpy HtoD (Pinned -> Device)", lancet.time_us = 20.0 : f64, lancet.trace_kind = "memcpy"} : () -> !trace.token
  %km = trace.kernel %m {name = "km", lancet.time_us = 10.0 : f64, lancet.trace_kind = "kernel"} : (!trace.token) -> !trace.token
  %pm = trace.payload %km {lancet.time_us = 0.0 : f64} : (!trace.token) -> tensor<4096xi8>
  %cm = comm.allreduce %pm {lancet.time_us = 100.0 : f64} : (tensor<4096xi8>) -> tensor<4096xi8>
  %ka = trace.kernel {name = "ka", lancet.time_us = 15.0 : f64, lancet.trace_kind = "kernel"} : () -> !trace.token
  %pa = trace.payload %ka {lancet.time_us = 0.0 : f64} : (!trace.token) -> tensor<4096xi8>
  %ca = comm.allreduce %pa {lancet.time_us = 10.0 : f64} : (tensor<4096xi8>) -> tensor<4096xi8>
  %kb = trace.kernel {name = "kb", lancet.time_us = 50.0 : f64, lancet.trace_kind = "kernel"} : () -> !trace.token
  func.return
}
"""
REPRO_EDGES = [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6)]
REPRO_TIMES = [20.0, 10.0, 0.0, 100.0, 15.0, 0.0, 10.0, 50.0]
REPRO_COMM = {3: "allreduce", 6: "allreduce"}
# what the inner search saw before: every node compute or collective
BLIND = Problem.from_edges(REPRO_TIMES, REPRO_EDGES, REPRO_COMM)
FLAGGED = Problem.from_edges(
    REPRO_TIMES, REPRO_EDGES, REPRO_COMM, copies={0: 2}, virtual=[2, 5]
)  # queue 2: host to device
IDENTITY = list(range(8))
EARLY_CA = [4, 5, 6, 0, 1, 2, 3, 7]  # ka, pa, ca first


def test_the_repro_module_gives_the_flagged_problem() -> None:
    module = parse(REPRO)
    fn = next(op for op in module.walk() if op.name == "func.func")
    graph = DataflowGraph.from_block(fn.regions[0].blocks[0])
    p = block_problem(graph, REPRO_TIMES)
    assert (p.preds, p.copy_queue, p.is_virtual) == (
        FLAGGED.preds,
        [2] + [0] * 7,
        FLAGGED.is_virtual,
    )
    assert p.stream == [2, 0, -1, 1, 0, -1, 1, 0]
    assert p.streamless == [2, 5]
    # copies on the compute stream (SimOptions.copy_stream=False): the copy is compute
    assert block_problem(graph, REPRO_TIMES, SimOptions(copy_stream=False)).stream[0] == 0


def test_repro_the_blind_model_rates_the_orders_the_wrong_way_round() -> None:
    # input order, simulated: m 0-20 on the copy engine, km 20-30, cm 30-130, ka 30-45,
    # ca waits for cm: 130-140, kb 45-95: 140. The blind model: m 0-20 on the compute
    # stream, the same times: 140
    assert engine(FLAGGED, IDENTITY).makespan_us == 140.0
    assert evaluate(BLIND, split_chains(BLIND, IDENTITY)).makespan_us == 140.0
    # ka, pa, ca first, simulated: ka 0-15, ca 15-25, m 0-20, km 20-30, cm 30-130, kb 30-80:
    # 130. The blind model charges the copy to the compute stream: ka 0-15, m 15-35,
    # km 35-45, cm 45-145: 145, so it kept the input order (140 simulated)
    assert engine(FLAGGED, EARLY_CA).makespan_us == 130.0
    assert evaluate(BLIND, split_chains(BLIND, EARLY_CA)).makespan_us == 145.0
    # the flagged model agrees with the simulator on both
    assert evaluate(FLAGGED, split_chains(FLAGGED, IDENTITY)).makespan_us == 140.0
    assert evaluate(FLAGGED, split_chains(FLAGGED, EARLY_CA)).makespan_us == 130.0
    # optimum of the blind model: 140 (cm needs m, km first on the compute stream, then ca
    # has to wait for it); the real optimum: 130 (cm cannot end before 20 + 10 + 100)
    assert exact_schedule(BLIND).makespan_us == 140.0
    best = exact_schedule(FLAGGED)
    assert best.makespan_us == 130.0
    assert engine(FLAGGED, best.order).makespan_us == 130.0


def test_repro_the_search_finds_the_simulated_optimum() -> None:
    outcome = search_schedule(FLAGGED, 2000)
    assert outcome.makespan_us == 130.0
    assert engine(FLAGGED, outcome.order).makespan_us == 130.0
    blind = search_schedule(BLIND, 2000)  # what lancet-schedule chose before
    assert blind.makespan_us == 140.0
    assert engine(FLAGGED, blind.order).makespan_us == 140.0


def test_repro_lancet_schedule_keeps_the_faster_order() -> None:
    model = CostModel.from_config(CostConfig())
    (before,) = simulate_module(parse(REPRO), model)
    assert before.summary.makespan_us == 140.0
    module = run_pipeline(parse(REPRO), "lancet-schedule{partition=none}")
    (after,) = simulate_module(module, model)
    assert after.summary.makespan_us == 130.0  # was 140: the input order kept
    names = [op.attributes["name"].data for op in after.graph.ops if "name" in op.attributes]
    assert names.index("ka") < names.index("km")  # ka (and ca) before km and cm


# A collective (20 us) on a payload without producers, a host sync on it, a payload on the
# sync and a second all-reduce (30) on it; a kernel k (60) beside them
#   0 p1, 1 c1, 2 s, 3 p2, 4 c2, 5 k
SYNC = Problem.from_edges(
    [0, 20, 0, 0, 30, 60],
    [(0, 1), (1, 2), (2, 3), (3, 4)],
    {1: "allreduce", 4: "allreduce"},
    host_syncs=[2],
    virtual=[0, 3],
)
SYNC_BLIND = Problem.from_edges([0, 20, 0, 0, 30, 60], [(0, 1), (1, 2), (2, 3), (3, 4)], [1, 4])


def test_a_sync_in_no_chain_does_not_block_compute() -> None:
    # simulated (L = 0): c1 0-20, the sync and p2 at 20, c2 20-50, k 0-60: 60 in either order.
    # The blind model puts p1, s and p2 on the compute stream: s and p2 before k wait for c1
    # and k runs 20-80; after k, c2 waits for k: 60-90
    for order in ([0, 1, 2, 3, 4, 5], [0, 5, 1, 2, 3, 4]):
        tl = engine(SYNC, order)
        assert (tl.makespan_us, tl.start[4], tl.stream[2]) == (60.0, 20.0, HOST_STREAM)
        assert evaluate(SYNC, split_chains(SYNC, order)).makespan_us == 60.0
    assert evaluate(SYNC_BLIND, split_chains(SYNC_BLIND, [0, 1, 2, 3, 4, 5])).makespan_us == 80.0
    assert evaluate(SYNC_BLIND, split_chains(SYNC_BLIND, [0, 5, 1, 2, 3, 4])).makespan_us == 90.0
    assert exact_schedule(SYNC_BLIND).makespan_us == 80.0
    assert exact_schedule(SYNC).makespan_us == 60.0
    assert split_chains(SYNC, range(6)) == [[5], [1, 4]]


def test_problem_flags_are_checked_and_kept() -> None:
    with pytest.raises(ValueError, match="node 1: a collective cannot be a copy"):
        Problem.from_edges(3, [], [1], copies=[1])
    with pytest.raises(ValueError, match="node 0: a host sync cannot be a collective or a copy"):
        Problem.from_edges(3, [], copies=[0], host_syncs=[0])
    with pytest.raises(ValueError, match="2 copy queues for a problem of 3 nodes"):
        Problem([[], [], []], [[], [], []], [None] * 3, [0.0] * 3, copy_queue=[0, 1])
    with pytest.raises(ValueError, match="copy queue of node 0 must be a CopyQueue"):
        Problem([[]], [[]], [None], [1.0], copy_queue=[4])
    # no flag set is the same as no list; a stream-less node's duration counts as 0
    plain = Problem.from_edges([1.0, 2.0], [(0, 1)])
    assert (plain.copy_queue, plain.is_host_sync, plain.is_virtual) == (None, None, None)
    assert (plain.stream, plain.num_streams, plain.streamless) == ([0, 0], 2, [])
    synced = Problem.from_edges([1.0, 2.0, 3.0], [(0, 1)], copies={2: 3}, host_syncs=[1])
    assert synced.durations == [1.0, 0.0, 3.0]
    assert (synced.stream, synced.num_streams) == ([0, -1, 2], 3)
    # contraction (fusion) keeps every flag of the nodes it keeps
    fused, kept = contract(FLAGGED, [[3, 6]], [105.0])
    assert kept == [0, 1, 2, 4, 5, 6, 7]
    assert fused.copy_queue == [2, 0, 0, 0, 0, 0, 0]
    assert fused.is_virtual == [False, False, True, False, True, False, False]


# ---- the invariant ---------------------------------------------------------------------------
KINDS = (
    "compute",
    "compute",
    "allreduce",
    "all_to_all",
    "copy1",
    "copy2",
    "copy3",
    "sync",
    "virtual",
)


@st.composite
def flagged_problems(draw: st.DrawFn, max_nodes: int = 9) -> Problem:
    """A random DAG (edges from lower to higher index) with every kind of node; durations in
    tenths of a µs (stream-less nodes get one too: it is ignored)."""
    n = draw(st.integers(1, max_nodes))
    edges = [(i, j) for j in range(n) for i in range(j) if draw(st.integers(0, 2)) == 0]
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=n, max_size=n))
    durations = [draw(st.integers(0, 40)) * 0.1 for _ in range(n)]
    return Problem.from_edges(
        durations,
        edges,
        {v: k for v, k in enumerate(kinds) if k in ("allreduce", "all_to_all")},
        copies={v: int(k[-1]) for v, k in enumerate(kinds) if k.startswith("copy")},
        host_syncs=[v for v, k in enumerate(kinds) if k == "sync"],
        virtual=[v for v, k in enumerate(kinds) if k == "virtual"],
    )


@st.composite
def problems_and_orders(draw: st.DrawFn) -> tuple[Problem, list[int]]:
    p = draw(flagged_problems())
    key = draw(st.permutations(range(len(p))))
    return p, topological_order(p.preds, p.succs, key)


def chains_of(p: Problem, chains: list[list[int]]) -> bool:
    """Every chain holds the ops of its own stream only (no copy or stream-less node in the
    compute chain, ...), and together with the stream-less nodes they cover the graph."""
    placed = sorted(v for chain in chains for v in chain)
    return all(p.stream[v] == s for s, chain in enumerate(chains) for v in chain) and sorted(
        placed + p.streamless
    ) == list(range(len(p)))


@settings(max_examples=400, deadline=None)
@given(problems_and_orders())
def test_chain_times_are_the_simulators_exactly(case: tuple[Problem, list[int]]) -> None:
    p, order = case
    tl = engine(p, order)
    chains = split_chains(p, order)
    assert chains_of(p, chains)
    times = evaluate(p, chains)
    assert times is not None
    assert (times.start, times.end, times.makespan_us) == (tl.start, tl.end, tl.makespan_us)
    # the engine's own chains (its stream numbers with one comm stream) are the same
    assert tl.chains == chains
    # and the block order of the chains realises them, with the same times
    again = block_order(p, chains, times.start)
    assert split_chains(p, again) == chains
    assert engine(p, again).end == tl.end


@settings(max_examples=200, deadline=None)
@given(problems_and_orders(), st.data())
def test_resumed_and_bounded_evaluations_are_exact(case, data: st.DataObject) -> None:
    p, order = case
    chains = split_chains(p, order)
    base = evaluate(p, chains)
    assert base is not None
    # move one op of one chain elsewhere in it: resumed from the earliest start it changes
    s = data.draw(st.integers(0, p.num_streams - 1))
    if len(chains[s]) >= 2:
        k = data.draw(st.integers(0, len(chains[s]) - 1))
        q = data.draw(st.integers(0, len(chains[s]) - 1))
        moved = [list(c) for c in chains]
        v = moved[s].pop(k)
        moved[s].insert(q, v)
        changed = min(base.start[chains[s][k]], base.start[chains[s][q]])
        full = evaluate(p, moved)
        again = evaluate(p, moved, resume_point(base, chains, changed))
        assert (again is None) == (full is None)
        if full is not None:
            assert (again.start, again.end, again.makespan_us) == (
                full.start,
                full.end,
                full.makespan_us,
            )
    limit = data.draw(st.integers(0, 200)) * 0.1
    work = tuple(sum(p.durations[v] for v in c) for c in chains)
    bounded = evaluate(p, chains, None, (limit, work))
    if base.makespan_us < limit:
        assert bounded is not None
    if bounded is not None:
        assert (bounded.end, bounded.makespan_us) == (base.end, base.makespan_us)


@settings(max_examples=150, deadline=None)
@given(problems_and_orders())
def test_the_general_evaluator_equals_the_two_chain_one(case) -> None:
    # on a graph without flags the general loop (any chains) gives the fast loop's times
    p, order = case
    plain = Problem(p.preds, p.succs, p.comm_kind, p.durations)
    chains = split_chains(plain, order)
    fast = evaluate_chains(plain.preds, plain.durations, chains)
    general = _evaluate_streams(plain.preds, plain.durations, chains, None, None, ())
    assert fast is not None
    assert general is not None
    assert (general.start, general.end, general.makespan_us) == (
        fast.start,
        fast.end,
        fast.makespan_us,
    )


@settings(max_examples=60, deadline=None)
@given(flagged_problems(max_nodes=8))
def test_every_optimizer_reports_the_simulated_makespan(p: Problem) -> None:
    # the searches optimise what the simulator measures: each result's makespan is the
    # simulation of its order, its chains keep every op on its stream, and it is never
    # worse than its starts
    reach = reachability(p)
    start = split_chains(p, range(len(p)))
    base = evaluate(p, start)
    assert base is not None
    local = improve(p, start, 200, None, reach)
    assert chains_of(p, local.chains)
    assert local.times.makespan_us <= base.makespan_us
    assert engine(p, block_order(p, local.chains, local.times.start)).makespan_us == (
        local.times.makespan_us
    )
    outcome = search_schedule(p, 300, reach=reach)
    assert engine(p, outcome.order).makespan_us == outcome.makespan_us
    assert outcome.makespan_us <= base.makespan_us
    dw = dw_schedule(p)
    assert engine(p, dw.order).makespan_us == dw.makespan_us
    tail = defer_to_tail(p, start, 100, None, reach)
    if tail.times is not None:
        assert chains_of(p, tail.chains)
        order = block_order(p, tail.chains, tail.times.start)
        assert engine(p, order).makespan_us == tail.times.makespan_us
    if len(p) <= 7:
        exact = exact_schedule(p)
        assert engine(p, exact.order).makespan_us == exact.makespan_us
        # optimal up to rounding: two equal schedules may sum their durations in different
        # orders (0 + 3.3 + 3.9 + 0.2 gave 7.400000000000001 against 7.4)
        assert exact.makespan_us <= outcome.makespan_us * (1 + 1e-12) + 1e-12


@settings(max_examples=60, deadline=None)
@given(flagged_problems(max_nodes=8))
def test_fusion_and_the_pipeline_agree_with_the_simulator(p: Problem) -> None:
    hooks = FusionHooks(lambda group: sum(p.durations[m] for m in group) * 0.5, lambda a, b: True)
    chains = split_chains(p, range(len(p)))
    plan = plan_noncritical_fusion(p, chains, hooks.fused_time, hooks.compatible)
    fused, old = contract(p, plan.groups, [hooks.fused_time(g) for g in plan.groups])
    new = {o: k for k, o in enumerate(old)}
    order = block_order(
        fused, [[new[v] for v in c] for c in plan.chains], [plan.times.start[v] for v in old]
    )
    assert engine(fused, order).makespan_us == plan.times.makespan_us
    result = run_stages(p, "dw", 200, hooks)
    spans = {stage.name: stage.makespan_us for stage in result.stages}
    # the stages are simulated; the search starts from the earlier ones and is exact
    assert spans["local search"] <= min(
        spans["input"], spans["list schedule"], spans["dw placement"]
    )
