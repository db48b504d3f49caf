"""lancet-schedule: Lancet's whole optimization pipeline (§1.4), near-optimal, never worse."""

from __future__ import annotations

import gc
import logging
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir.cost.cost_model import TimeMemo
from lancet_mlir.graph.core import Problem, node_flags
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.optimize.dw import fifo_list_schedule
from lancet_mlir.optimize.pipeline import HEURISTICS, PipelineResult, Stage, run_pipeline
from lancet_mlir.partition import candidates
from lancet_mlir.partition.candidates import Stage as PartitionStage
from lancet_mlir.passes.candidate_run import (
    Bar,
    CandidateRun,
    Decision,
    refused,
    run_forked,
)
from lancet_mlir.passes.costing import CostOptions
from lancet_mlir.passes.moe_partition import MoePartitionPass
from lancet_mlir.passes.options import CheckedOptions, check_number
from lancet_mlir.passes.scheduling import (
    FusionPrices,
    apply_result,
    block_problem,
    fusion_hooks,
    simulated_makespan,
)
from lancet_mlir.passes.tutel_pipeline import TutelPipelinePass
from lancet_mlir.sim import evaluate_fixed_order, exposed_comm_us
from lancet_mlir.sim.blocks import ModuleSimulation
from lancet_mlir.sim.options import SimOptions
from lancet_mlir.sim.profiled_schedule import ScheduleDecision, profiled_fifo_schedule
from lancet_mlir.support.forked import can_fork

__all__ = [
    "LancetSchedulePass",
    "ScheduleDecision",
    "partition_candidates",
    "partition_stage",
    "profiled_fifo_schedule",
]

LOG = logging.getLogger("lancet_mlir.schedule")
"""Stage lines (INFO): `lancet-opt --verbose` shows them on stderr."""

PARTITIONS = ("auto", "none", "dp", "range")

TOKEN_PARTS = (4, 8)
"""Part counts of the token candidates of `partition=auto` (`moe-partition{axis=token}`):
each whole MoE layer and the forward around it in n token parts; the scheduling stages
then place the parts (the phased emission order of the pass is only a start)."""

TOKEN_PARTS_EXTENDED = (8,)
"""Part counts of the token candidates whose regions also cover the backward of the layers
around each MoE layer (`token-n-all`, `moe-partition{axis=token parts=n extend=all}`): the
dX chain after a backward all-to-all runs per part, overlapping the later parts' exchanges.
On the p3dn 32-rank configs this is the fastest candidate (12 layers: 740.2 against 743.8 ms
for token-8, 24 layers: 989.9 against 1004.6, at one candidate's budget, both with splits into
row blocks costed as views); with 4 parts it was never the fastest of the eight headline
configs, so it is not built."""

EXTENDED_MIN_IDLE = 0.03
"""A `token-n-all` candidate is built only when the best schedule so far leaves its compute
stream idle (makespan less its compute) for at least this share of its makespan: idle
compute is what hiding more communication can win back, and the extended candidate is the
largest graph of all (12.6k ops against token-8's 10.4k at 24 layers: ~35 % more pass time).
On the headline configs it is built on the two p3dn 32-rank ones (6.1 % and 4.8 % idle),
where it wins, and not on the others (0.4-2.0 %), where it loses. It is a trade: on the
48-layer 64-rank benchmark model (token-8 leaves 2.4 % idle) it is left out, though it would
win by 0.8 % (1836.2 against 1851.2 ms) at 233 against 183 MB of peak memory and about a
third more pass time. The `extend-min-idle` option sets it per run."""

TRIED_FIRST = (f"token-{max(TOKEN_PARTS)}",)
"""The stages `partition=auto` tries before the others (the rest follow in stage order):
the token candidate of the most parts. Where communication dominates (the p3dn testbeds)
it is near the fastest, so the floors of the others meet a fast schedule: those of Lancet's
DP plan and the expert splits count the compute their forward all-to-alls leave idle
(`sim.makespan_floor`, communication windows), within 0.01 % of their schedules on the
24-layer d=1024 32-rank p3dn model, and all four are skipped unscheduled. Where compute
dominates (one DGX H100 node), its compute alone exceeds the input's makespan, so it is
skipped at the cost of its build, and the DP plan is tried next as before. Only which
candidates are scheduled depends on this order, not the one kept (`candidate_run.to_beat`:
an earlier stage still wins a tie)."""

EXPERT_DEGREES = (2, 4, 8)
"""Part counts of the expert-only (Tutel-like) candidates of `partition=auto`: Tutel's sweep,
so the pipeline is never slower than the best Tutel degree under its own cost model."""

EVAL_UNITS_PER_SECOND = 5_000_000
"""`max-seconds` → evaluation budget: one chain evaluation of a block costs about V + E
units (ops plus edges) at most (evaluations are incremental, most cost less), and this
fixed rate turns seconds into `max-seconds * EVAL_UNITS_PER_SECOND / (V + E)` evaluations:
the budget, hence the result, is the same on every machine; the wall time is about
`max-seconds` or less on one core of a 2020s CPU."""


def evaluation_budget(max_seconds: float, graph: DataflowGraph) -> int:
    """The evaluation budget of `max-seconds` for one block (see EVAL_UNITS_PER_SECOND)."""
    size = len(graph) + graph.num_edges + 1
    return int(max_seconds * EVAL_UNITS_PER_SECOND / size)


def partition_stage(
    partition: str, ctx: Context, module: ModuleOp, cost: CostOptions | None = None
) -> None:
    """The partition stage of §1.4, run on the module before the scheduling stages.

    `none` leaves the module alone; `dp` and `range` run `moe-partition{algo=...}` (Lancet
    §8, forward and backward MoE layers) with the same cost options as the calling pass, so
    both stages cost the module alike.
    """
    if partition == "none":
        return
    inherited = {} if cost is None else cost_options_of(cost)
    MoePartitionPass(algo=partition, **inherited).apply(ctx, module)


def partition_stages(ctx: Context, cost: CostOptions) -> list[tuple[str, PartitionStage]]:
    """The partition stages of `partition=auto`, in preference order, each with its label:
    Lancet's DP plan (`dp`), whole MoE layers in n token parts with the regions around them
    (`token-n`, `moe-partition{axis=token parts=n}`) for n in TOKEN_PARTS, the same with the
    backward regions (`token-n-all`, `extend=all`) for n in TOKEN_PARTS_EXTENDED, then the
    expert FFN alone split into n parts (`expert-n`, as `tutel-pipeline{degree=n}`) for n in
    EXPERT_DEGREES."""
    passes: list[tuple[str, ModulePass]] = [
        ("dp", MoePartitionPass(algo="dp", **cost_options_of(cost)))
    ]
    passes += [
        (f"token-{n}", MoePartitionPass(axis="token", parts=n, **cost_options_of(cost)))
        for n in TOKEN_PARTS
    ]
    passes += [
        (
            f"token-{n}-all",
            MoePartitionPass(axis="token", parts=n, extend="all", **cost_options_of(cost)),
        )
        for n in TOKEN_PARTS_EXTENDED
    ]
    passes += [(f"expert-{n}", TutelPipelinePass(degree=n)) for n in EXPERT_DEGREES]
    return [(label, partial(stage.apply, ctx)) for label, stage in passes]


def partition_candidates(
    ctx: Context, module: ModuleOp, cost: CostOptions
) -> list[tuple[str, ModuleOp]]:
    """The partitioned candidates of `partition=auto`, each a partitioned clone of `module`
    with its label, in the order of `partition_stages` (`partition/candidates.py` builds
    them; the pass itself builds them one at a time, `lazy_candidates`, and may leave
    `token-8-all` out, `extend-min-idle`: this builds every stage).

    A candidate that partitions nothing (no MoE layer, the DP's never-worse check kept the
    input) or cannot be built (n does not divide an expert block's capacity) is left out:
    it would only repeat the unpartitioned candidate.
    """
    return candidates.partition_candidates(module, partition_stages(ctx, cost), refused)


def _built_here(label: str) -> bool:
    """The stages this process runs with `jobs=2` (the worker runs the others): the token
    parts of the most parts, the largest candidates and the fastest on the p3dn testbeds, so
    the kept candidate is usually built where it is kept and needs no rebuilding."""
    most = max(TOKEN_PARTS + TOKEN_PARTS_EXTENDED)
    return label in (f"token-{most}", f"token-{most}-all")


def _take_body(module: ModuleOp, donor: ModuleOp) -> None:
    """Replace `module`'s body by `donor`'s (moved, not copied)."""
    body = donor.detach_region(donor.body)
    old = module.detach_region(module.body)
    module.add_region(body)
    old.drop_all_references()


def cost_options_of(cost: CostOptions) -> dict[str, Any]:
    """The `CostOptions` fields of a pass, to hand the same cost model to another pass."""
    return {f.name: getattr(cost, f.name) for f in fields(CostOptions)}


@dataclass(frozen=True)
class LancetSchedulePass(CostOptions, CheckedOptions, ModulePass):
    """Lancet's optimization pipeline (lancet-algorithms.md §1.4), near-optimal, never worse.

    Per block, innermost first, with the cost model of the pass's options and the module
    (`lancet.time_us` > profile > roofline/comm table; `passes/costing.py`); an op with
    regions (`scf.for`, `stablehlo.while`, `sdy.manual_computation`, ...) or a call costs its
    bodies' simulated makespan as already scheduled, times a static trip count
    (`sim.blocks.ModuleSimulation`):
    1. list schedule: Lancet's FIFO list schedule, weight-update ops delayed (§6.1);
    2. dW placement (`heuristic=dw`): dW ops into all-to-all windows, all-reduces into the
       communication gaps (§6.2-6.3, as `dw-schedule`);
    3. local search: critical-path moves from the pipeline's schedule, the input order, FIFO
       and the upward-rank list schedule, within the evaluation budget of `max-seconds`;
    4. fusion (`fusion=true`): all-reduces off the critical path merged when the makespan
       does not grow (§7.5, as `fuse-noncritical-comm`: never one with a measured
       `lancet.time_us`, such as an imported NCCL kernel), then a short local search.
    The partition stage (`partition=`) runs on the module before these. With `auto` (the
    default) it makes candidates: the module unpartitioned, Lancet's DP plan
    (`moe-partition`), whole MoE layers with the attention and FFN around them in 4 and 8
    token parts (`moe-partition{axis=token parts=n}`), in 8 parts through the backward too
    (`extend=all`; built only when the best schedule so far leaves compute idle for at least
    `EXTENDED_MIN_IDLE` of its makespan) and the expert FFN alone in 2, 4 and 8 parts (as
    `tutel-pipeline`);
    stages 1-4 run on each (the search budget split evenly among them) and the candidate
    whose scheduled module simulates fastest (summed over the top-level blocks, as
    `simulate` totals them) is kept, the earlier on a
    tie; a candidate whose compute alone takes no less than the best schedule so far is not
    scheduled (it cannot be faster). The DP costs each MoE layer in isolation, blind to what dW placement hides later,
    so its plan can lose to a plain expert split once scheduled; comparing scheduled
    results makes the pipeline never slower than `tutel-pipeline` at those degrees followed
    by the scheduling stages. The result replaces
    the block only if it simulates strictly faster than both the input order and FIFO of the
    input (under `comm-streams`/`overlap-slowdown`); otherwise the faster of those two is
    kept (the input when tied). Deterministic: the budget counts evaluations, not seconds.
    With `heuristic=fifo fusion=false max-seconds=0` this is Lancet's profiled FIFO list
    schedule alone. Stage lines (makespan, exposed communication) are logged to the
    `lancet_mlir.schedule` logger (`lancet-opt --verbose`); a progress bar is drawn on
    stderr when it is a terminal.

    Options:
      heuristic=fifo|dw    initial schedule (default dw)
      partition=auto|dp|range|none  partition stage (default auto: the best scheduled of
                           none, dp, token-4/8, token-8-all and expert-2/4/8); dp|range:
                           `moe-partition{algo=...}` on the module first; none: schedule only
      extend-min-idle=F    partition=auto builds token-8-all only when the best schedule so
                           far leaves compute idle >= F of its makespan (default 0.03; 0:
                           always, as far as its compute allows; > 1: never; refused with
                           another partition than auto)
      jobs=N               processes for the candidates of partition=auto (default 1; 2 or
                           more: one forked worker, the same result in less wall time;
                           refused with another partition)
      fusion=true|false    non-critical all-reduce fusion (default true)
      max-seconds=F        local-search budget, converted to evaluations (default 10; 0 = off;
                           with partition=auto shared evenly by the candidates)
      device=NAME, cluster=NAME, profile="FILE", comm-table="FILE",
      gpus-per-node=N, network-gbps=F   the cost model (each overrides the module attribute
                           of the same name, `lancet.device`, ...; see `CostOptions`)
      comm-streams=K       number of communication streams (default 1)
      overlap-slowdown=F   compute runs F times slower while a collective runs (default 1.0)
    Stages 2-4 optimize for one communication stream, no slowdown and no launch overhead, with
    the block's copies on their copy engines and its host syncs and virtual nodes on no stream,
    as the simulator sees them (`optimize.chains`); the final check uses `comm-streams`,
    `overlap-slowdown` and `launch-overhead-us`.
    """

    name = "lancet-schedule"

    heuristic: str = "dw"
    """Initial schedule: `fifo` (FIFO list schedule alone) or `dw` (followed by dW placement)."""
    partition: str = "auto"
    """Partition stage: `auto` (the fastest of none, the DP plan, 4/8 token parts, 8 token
    parts through the backward and 2/4/8 expert parts: `partition_stages`),
    `dp` or `range` (`moe-partition{algo=...}` first), or `none`."""
    fusion: bool = True
    """Fuse non-critical all-reduces at the end."""
    max_seconds: float | int = 10.0
    """Local-search budget in seconds (>= 0; shared by the candidates of `partition=auto`); 0
    turns the search off."""
    extend_min_idle: float | int = EXTENDED_MIN_IDLE
    """`partition=auto` builds `token-8-all` only when the best schedule so far leaves compute
    idle for at least this share of its makespan (>= 0; the default, `EXTENDED_MIN_IDLE`,
    spares the pass its largest candidate where it cannot win)."""
    jobs: int = 1
    """Processes that build and schedule the candidates of `partition=auto`: 1 (this one), or
    2 and more: one forked worker takes the stages other than `token-8`/`token-8-all`
    (`candidate_run.run_forked`; the same result, less wall time, more CPU and memory in
    all; only one worker is forked for now). Where this process cannot fork (no `os.fork`,
    or other Python threads are running) it runs them alone."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self._check_options()
        check_dominance(op)
        with fewer_collections():
            self._apply(ctx, op)

    def _apply(self, ctx: Context, op: ModuleOp) -> None:
        priced = FusionPrices()  # fused all-reduce prices, shared by the candidates
        memos: dict[int, TimeMemo] = {}  # op times shared by the candidates, per cost model
        if self.partition != "auto":
            partition_stage(self.partition, ctx, op, self)
            self._schedule(op, float(self.max_seconds), "", priced=priced, memos=memos)
            return
        stages = partition_stages(ctx, self)
        share = float(self.max_seconds) / (len(stages) + 1)
        # Each candidate is built from the unscheduled module, scheduled, and dropped unless
        # it is the best so far: one or two clones alive, not one per stage. So the
        # unpartitioned module is scheduled in place last; it is kept on a tie (it is the
        # simplest), a candidate replaces an earlier one only when strictly faster.
        # the unpartitioned schedule will be no slower than the input: a candidate whose
        # compute alone is slower cannot win (`_input_bound_us`), so it is not scheduled
        input_sim = self._simulation(op, memos)
        bar = Bar(_input_bound_us(input_sim), _compute_floor_us(input_sim))
        input_order_floor_us = _order_floor_us(input_sim)
        del input_sim  # not kept alive while the candidates are built
        run = CandidateRun(self, op, share, bar, priced, memos, TRIED_FIRST)
        if self.jobs > 1 and can_fork():
            kept = run_forked(run, stages, _built_here)
        else:
            if self.jobs > 1:
                LOG.info(
                    f"lancet-schedule: jobs={self.jobs}: the candidates run in this process "
                    "(it cannot fork: no os.fork, or other threads run)"
                )
            kept = run.sequential(stages)
        best_label, best_us, best, built = kept.label, kept.makespan_us, kept.module, kept.built
        if best is not None and input_order_floor_us > best_us:
            # no order of the unpartitioned module is as fast (a tie would keep it)
            LOG.info(
                f"lancet-schedule: partition candidate none skipped: its makespan floor "
                f"({input_order_floor_us:.1f} us) is more than the best so far ({best_us:.1f} us)"
            )
            LOG.info(f"lancet-schedule: kept partition candidate {best_label} ({best_us:.1f} us)")
            _take_body(op, best)
            return
        # the unpartitioned schedule takes the share of every stage that built nothing
        none_share = share if built == len(stages) else float(self.max_seconds) - built * share
        none_us = self._schedule(
            op, none_share, "none" if built else "", priced=priced, memos=memos
        )
        if best is None or none_us <= best_us:
            if built:
                LOG.info(f"lancet-schedule: kept partition candidate none ({none_us:.1f} us)")
            return
        LOG.info(f"lancet-schedule: kept partition candidate {best_label} ({best_us:.1f} us)")
        _take_body(op, best)

    def _candidate(
        self,
        trial: ModuleOp,
        label: str,
        share: float,
        best_us: float,
        priced: FusionPrices,
        memos: dict[int, TimeMemo],
        record: list[Decision] | None = None,
    ) -> tuple[float, float]:
        """`trial`'s scheduled makespan (`_schedule` with `share` of the budget; `record`
        receives its blocks' schedules), or inf unscheduled when its floor is no less than
        `best_us`: what the best so far takes, or what the unpartitioned schedule will take
        at most; with its compute floor."""
        sim = self._simulation(trial, memos)
        compute_us = _compute_floor_us(sim)
        floor_us = max(compute_us, _order_floor_us(sim))
        if floor_us >= best_us:
            # no order of it can be strictly faster than the best schedule so far, so it is
            # not scheduled (a tie keeps the earlier)
            what = "compute" if floor_us == compute_us else "makespan floor"
            LOG.info(
                f"lancet-schedule: partition candidate {label} skipped: its {what} "
                f"({floor_us:.1f} us) is no less than the best so far ({best_us:.1f} us: "
                "a schedule, or the unpartitioned input's makespan)"
            )
            return math.inf, compute_us
        return self._schedule(trial, share, label, sim, priced, memos, record), compute_us

    def _schedule(
        self,
        op: ModuleOp,
        max_seconds: float,
        label: str,
        sim: ModuleSimulation | None = None,
        priced: FusionPrices | None = None,
        memos: dict[int, TimeMemo] | None = None,
        record: list[Decision] | None = None,
    ) -> float:
        """Run the scheduling stages on every block of `op` of two ops or more, innermost
        first, each costed after the blocks nested in it were scheduled (an op with regions
        or a call costs its bodies' simulated makespan; `sim`: `module_simulation(op)`, if
        already made); the sum of the top-level blocks' final makespans under the pass's
        simulator options (what `simulate` and `--report` total); `priced`: fused all-reduce
        prices shared with the other candidates (`fusion_hooks`); `memos`: op times shared
        with them (`_simulation`); `record`: receives each scheduled block's `Decision`."""
        sim = sim or self._simulation(op, {} if memos is None else memos)
        options = sim.options
        cost_model = self.cost_model(op)
        prefix = f"[{label}] " if label else ""
        total_us = 0.0
        for item in sim.innermost_first():
            costed = sim.costed(item.block)
            graph = costed.graph
            for note in costed.notes:  # a loop without a static trip count, costed once
                LOG.info(f"{prefix}lancet-schedule {note}")
            if len(graph) < 2:
                result = sim.result(item.block)
                if item.top_level and result is not None:
                    total_us += result.summary.makespan_us
                continue
            problem = block_problem(graph, costed.durations, options)
            hooks = fusion_hooks(graph, cost_model, priced) if self.fusion else None
            budget = evaluation_budget(max_seconds, graph)
            with _progress_bar(budget, prefix + item.label) as progress:
                result = run_pipeline(problem, self.heuristic, budget, hooks, progress)
            searched = len(result.stages)  # the stages measured in the internal model
            result, makespan_us = _never_worse(problem, result, options)
            if item.top_level:
                total_us += makespan_us
            if LOG.isEnabledFor(logging.INFO):  # the stages are measured when read
                _log_stages(prefix, item.label, result, searched, options)
            apply_result(graph, result)
            if record is not None:
                record.append(Decision(len(graph), result.groups, result.old_index, result.order))
            sim.invalidate(item.block)
        return total_us

    def _simulation(self, module: ModuleOp, memos: dict[int, TimeMemo]) -> ModuleSimulation:
        """`module_simulation(module)` with its cost model's times memoised in `memos`
        (`cost_model.TimeMemo`, one per model, keyed by its id while the pass runs: the
        candidates are clones of one module, so they share one model and its memo)."""
        model = self.cost_model(module)
        memo = memos.get(id(model))
        if memo is None or memo.model is not model:
            memo = memos[id(model)] = TimeMemo(model)
        return ModuleSimulation(module, memo, self.sim_options(module))

    def _check_options(self) -> None:
        if self.heuristic not in HEURISTICS:
            raise PassFailedException(
                f"{self.name}: heuristic must be one of {', '.join(HEURISTICS)}, got {self.heuristic!r}"
            )
        if self.partition not in PARTITIONS:
            raise PassFailedException(
                f"{self.name}: partition must be one of {', '.join(PARTITIONS)}, got {self.partition!r}"
            )
        check_number(self.name, "max-seconds", self.max_seconds, 0.0)
        check_number(self.name, "extend-min-idle", self.extend_min_idle, 0.0)
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise PassFailedException(
                f"{self.name}: jobs must be an integer >= 1, got {self.jobs!r}"
            )
        # the options of the candidates are refused without them, not ignored
        ignored = [f"jobs={self.jobs}"] if self.jobs != 1 else []
        if self.extend_min_idle != EXTENDED_MIN_IDLE:
            ignored.append(f"extend-min-idle={self.extend_min_idle:g}")
        if self.partition != "auto" and ignored:
            raise PassFailedException(
                f"{self.name}: {'options' if len(ignored) > 1 else 'option'} "
                f"{' and '.join(ignored)} {'apply' if len(ignored) > 1 else 'applies'} to "
                "partition=auto only "
                f"(partition={self.partition} schedules one module); drop it"
            )


GC_THRESHOLD = 500_000
"""Allocations between young-generation collections while the pass runs (Python's default
is 700): the candidates make and drop many small objects, and with the default the cyclic
collector took about 10 % of the pass (0.9 of 9 s, 12-layer d=1024 model) for little; at
10 000 the automatic collections still took 0.64 s of a 12 s 24-layer run, all but freeing
nothing (what a candidate leaves is freed by the collection after it,
`candidate_run.collect_dropped`). 500 000 tracked objects (tens of MB) bound the cyclic
garbage between collections; the 24-, 48- and 96-layer runs peak as high as with 10 000."""


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the body with the objects alive now frozen (the input module: never traversed by
    the collector again while the body runs) and `GC_THRESHOLD`; both restored after.
    Only when cyclic garbage is collected changes (refcounting still frees the rest at once;
    cycles among the frozen objects wait until the body ends), never a result."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def _input_bound_us(sim: ModuleSimulation) -> float:
    """An upper bound of what `_schedule` returns for the module of `sim`, unscheduled: its
    simulated makespan (summed over the top-level blocks) plus a relative 1e-9 for rounding,
    or inf where that is no bound. Each block's schedule is never slower than its input
    order with its bodies scheduled (`_never_worse`), and a scheduled body is never slower,
    so an op costed by it never longer; a fixed-order evaluation on one comm stream without
    overlap slowdown is max-plus in the durations, so no longer duration makes it shorter.
    With several comm streams or a slowdown that monotonicity fails (a collective may take
    another stream, a shorter op overlap differently), and the bound is not claimed."""
    options = sim.options
    if options.num_comm_streams != 1 or options.overlap_slowdown != 1.0:
        return math.inf
    total = 0.0
    for item in sim.innermost_first():
        result = sim.result(item.block)
        if item.top_level and result is not None:
            total += result.summary.makespan_us
    return total * (1 + 1e-9)


def _compute_floor_us(sim: ModuleSimulation) -> float:
    """The summed compute floors of the top-level blocks (`ModuleSimulation.compute_floor_us`):
    a lower bound of what `_schedule` returns (each block's compute runs one op at a time,
    never faster under an overlap slowdown; an op with regions takes at least its bodies'
    compute, however they are scheduled)."""
    return sum(sim.compute_floor_us(item.block) for item in sim.items if item.top_level)


def _order_floor_us(sim: ModuleSimulation) -> float:
    """The summed makespan floors of the top-level blocks (`ModuleSimulation.order_floor_us`:
    the compute floor, the critical path and the head and tail bounds of the compute stream):
    a lower bound of what `_schedule` returns, for the reasons `_compute_floor_us` gives and
    because every order of a block respects its dependencies (fusion only adds some, and an
    all-reduce counts 0 there)."""
    return sum(sim.order_floor_us(item.block) for item in sim.items if item.top_level)


def _never_worse(
    problem: Problem, result: PipelineResult, options: SimOptions
) -> tuple[PipelineResult, float]:
    """The pipeline's result if it is strictly faster (under `options`) than the input order
    and than FIFO of the input; else the faster of those (the input when tied). With the
    kept result's makespan under `options`."""
    identity = list(range(len(problem)))
    fifo = result.fifo if result.fifo is not None else fifo_list_schedule(problem).order
    base = simulated_makespan(problem, identity, options)
    fifo_span = simulated_makespan(problem, fifo, options)
    final = simulated_makespan(result.problem, result.order, options)
    if final < min(base, fifo_span):
        return result, final
    fallback = fifo if fifo_span < base else identity
    streams = f" ({options.num_comm_streams} comm streams)" if options.num_comm_streams > 1 else ""
    stage = Stage(
        "never worse: kept " + ("fifo" if fallback is fifo else "input") + streams,
        *_measure(problem, fallback, options),  # the figure the decision used
    )
    kept = PipelineResult(
        problem, fallback, [], identity, [*result.stages, stage], result.evaluations
    )
    return kept, min(base, fifo_span)


def _measure(problem, order: list[int], options: SimOptions | None = None) -> tuple[float, float]:
    """(makespan, exposed comm) of `order`, under `options` when given (else one stream)."""
    flags = node_flags(problem)
    if options is None:
        timeline = evaluate_fixed_order(problem, problem.durations, order=order, **flags)
    else:
        timeline = evaluate_fixed_order(problem, problem.durations, order=order,
                                        num_comm_streams=options.num_comm_streams,
                                        overlap_slowdown=options.overlap_slowdown,
                                        launch_overhead_us=options.launch_overhead_us,
                                        **flags)  # fmt: skip
    return timeline.makespan_us, exposed_comm_us(timeline)


def _model_note(options: SimOptions, measured_under_options: bool) -> str:
    """How a stage line's makespan relates to `options` where they differ from the pipeline's
    internal model (optimize/pipeline.py: one comm stream, no overlap slowdown, no launch
    overhead), as a suffix ("" when the two agree): what the internal model leaves out
    (`measured_under_options` False: the stage lines, not what `simulate` gives) or what the
    line was measured with (True: the `kept` line)."""
    parts = []
    if options.launch_overhead_us > 0:
        parts.append(f"the {options.launch_overhead_us:g} us launch overhead")
    if options.num_comm_streams > 1:
        k = options.num_comm_streams
        parts.append(
            f"on {k} comm streams" if measured_under_options else f"on 1 comm stream, not {k}"
        )
    if options.overlap_slowdown != 1.0:
        parts.append(f"the {options.overlap_slowdown:g} overlap slowdown")
    if not parts:
        return ""
    word = "with" if measured_under_options else "without"
    worded = [x if x.startswith("on ") else f"{word} {x}" for x in parts]
    return f" ({', '.join(worded)})"


def _log_stages(
    prefix: str, label: str, result: PipelineResult, searched: int, options: SimOptions
) -> None:
    """The `--verbose` lines (after `prefix`) of block `label`'s stages (`searched`: how
    many of `result.stages` the pipeline measured in its internal model; the rest,
    `_never_worse`'s, under `options`), and when the pipeline's result was kept and `options` differ from the
    internal model, what it takes under them (what `simulate` gives for the output)."""
    note = _model_note(options, measured_under_options=False)
    for k, stage in enumerate(result.stages):
        LOG.info(prefix + _stage_line(label, stage, note if k < searched else ""))
    if note and len(result.stages) == searched:
        kept = Stage("kept", *_measure(result.problem, result.order, options))
        note = _model_note(options, measured_under_options=True)
        LOG.info(prefix + _stage_line(label, kept, note))


def _stage_line(label: str, stage: Stage, note: str = "") -> str:
    """One `--verbose` stage line; `note` says which model measured it when it is not the
    one the block is rated on."""
    return (
        f"lancet-schedule {label}: {stage.name}: makespan {stage.makespan_us:.1f} us, "
        f"exposed comm {stage.exposed_comm_us:.1f} us{note}"
    )


@contextmanager
def _progress_bar(total: int, label: str) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr when it is a terminal and there is a budget to show."""
    if total <= 0 or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(file=sys.stderr), transient=True) as bar:
        task = bar.add_task(f"lancet-schedule {label}", total=total)
        yield lambda k: bar.advance(task, k)
