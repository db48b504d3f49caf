"""The candidates of `lancet-schedule{partition=auto}`: each built, scheduled and compared,
one at a time in this process (`CandidateRun.sequential`) or split with a forked worker
(`run_forked`, option `jobs=2`). Both keep the same candidate, the same way.

Which candidate is kept depends only on the candidates' scheduled makespans: the fastest,
the earlier in stage order on a tie. A candidate is skipped without being scheduled when no
schedule of it can beat the best found so far. That only saves time. So the two processes
may each skip against the best they have seen, and the result is the one the sequential
run keeps. The one decision that changes what is built is `token-n-all`'s (built only where
the best schedule of the stages before it leaves compute idle: `extend-min-idle`). It is
taken on those stages' outcomes in both modes, the parallel run waiting for them. Each
candidate's log lines are held and written in stage order, so `--verbose` shows the same
sequence each time (in parallel mode some candidates are scheduled that the sequential run
skips, since each process only knows its own best).

A candidate scheduled by the worker and kept is built again here and given the worker's
schedule (`Decision`, per block: fusion groups and order), which is cheaper than sending
the module back as text.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from xdsl.dialects.builtin import ModuleOp

from lancet_mlir.cost.cost_model import TimeMemo
from lancet_mlir.partition import candidates
from lancet_mlir.partition.candidates import Stage
from lancet_mlir.passes.scheduling import FusionPrices, apply_result
from lancet_mlir.support.forked import END, ForkedWorker, WorkerFailed

if TYPE_CHECKING:
    from lancet_mlir.passes.lancet_schedule import LancetSchedulePass

LOG = logging.getLogger("lancet_mlir.schedule")


def refused(label: str, reason: str) -> None:
    """Log that candidate `label` was left out, and why."""
    LOG.info(f"lancet-schedule: partition candidate {label} left out: {reason}")


@dataclass(frozen=True)
class Bar:
    """What every candidate must beat: the unpartitioned input's makespan (an upper bound of
    its schedule, `_input_bound_us`) and its compute floor."""

    makespan_us: float
    floor_us: float


@dataclass(frozen=True)
class Decision:
    """One block's schedule as `apply_result` applies it: the block's node count (a check
    that the rebuilt block is the one scheduled), the collectives fused, the original node
    of each node after fusion, and their order."""

    nodes: int
    groups: list[list[int]]
    old_index: list[int]
    order: list[int]


@dataclass
class Outcome:
    """One stage's outcome: built (False: refused or partitioned nothing), its scheduled
    makespan (inf when not built or skipped), its compute floor, and its log lines."""

    index: int
    label: str
    built: bool
    makespan_us: float = math.inf
    floor_us: float = 0.0
    records: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Kept:
    """The candidate kept: its label, makespan and module (None: none scheduled faster than
    nothing), and how many stages built one (the unpartitioned schedule's budget share)."""

    label: str
    makespan_us: float
    module: ModuleOp | None
    built: int


@dataclass(frozen=True)
class _WorkerBest:
    """A worker's last message: its fastest candidate and that candidate's schedule."""

    index: int | None
    decisions: list[Decision] | None


def faster(outcome: Outcome, than: Outcome | None) -> bool:
    """Whether `outcome` is kept over `than` (None: nothing yet): scheduled, and faster, or
    as fast and of an earlier stage."""
    if not math.isfinite(outcome.makespan_us):
        return False
    if than is None:
        return True
    return (outcome.makespan_us, outcome.index) < (than.makespan_us, than.index)


def to_beat(best: Outcome | None, index: int, bar: Bar) -> float:
    """The least floor that spares stage `index` being scheduled (`_candidate` skips it when
    its floor is no less): the input's makespan bound (the unpartitioned schedule is kept on
    a tie) and the fastest outcome tried so far, `best`, which a later stage must beat
    strictly and an earlier stage only tie (the earlier stage is kept on a tie)."""
    if best is None:
        return bar.makespan_us
    span = best.makespan_us
    if index < best.index:
        span = math.nextafter(span, math.inf)  # a floor equal to it may still tie and win
    return min(span, bar.makespan_us)


def trial_order(labels: Sequence[str], first: Sequence[str]) -> list[int]:
    """The stages' indices in the order they are tried: those labelled `first` (in that
    order), then the others in stage order. Only which stages are skipped unscheduled depends
    on it, never the one kept (`faster`, `to_beat`); `first` holds no `token-n-all` stage,
    whose build decision waits for every stage before it (`extend_skip`)."""
    early = [labels.index(label) for label in first if label in labels]
    if any(labels[k].endswith("-all") for k in early):
        raise ValueError("a token-n-all stage cannot be tried first")
    return early + [k for k in range(len(labels)) if k not in early]


def best_of(outcomes: Sequence[Outcome]) -> Outcome | None:
    """The fastest scheduled outcome, the earliest stage on a tie (None: none scheduled)."""
    best: Outcome | None = None
    for outcome in sorted(outcomes, key=lambda o: o.index):
        if outcome.makespan_us < (math.inf if best is None else best.makespan_us):
            best = outcome
    return best


class CandidateRun:
    """The candidates' common inputs (the pass, the module, the budget share of each, the
    input's `Bar`, the shared fusion prices and op-time memos) and how one is tried."""

    def __init__(
        self,
        schedule_pass: LancetSchedulePass,
        module: ModuleOp,
        share: float,
        bar: Bar,
        priced: FusionPrices,
        memos: dict[int, TimeMemo],
        first: Sequence[str] = (),
    ) -> None:
        """`first`: the labels of the stages tried before the others (`trial_order`)."""
        self.schedule_pass = schedule_pass
        self.first = tuple(first)
        self.module = module
        self.share = share
        self.bar = bar
        self.priced = priced
        self.memos = memos
        self.parts_before = candidates.count_parts(module)

    def extend_skip(self, label: str, best: Outcome | None) -> str | None:
        """Why `token-n-all` stage `label` is not built after the stages whose fastest
        outcome is `best` (None: the unpartitioned input is the schedule to beat): that
        schedule leaves compute idle less than `extend-min-idle` of its makespan. None for
        any other stage, or when it is built."""
        if not label.endswith("-all"):
            return None
        what, span, floor = (
            (f"the best schedule so far ({best.label}, ", best.makespan_us, best.floor_us)
            if best is not None
            else ("the unpartitioned input (", self.bar.makespan_us, self.bar.floor_us)
        )
        if span <= 0 or not math.isfinite(span):
            return None
        idle = (span - floor) / span
        threshold = self.schedule_pass.extend_min_idle
        if idle >= threshold:
            return None
        return (
            f"{what}{span:.1f} us) leaves compute idle {100 * idle:.1f} % of it "
            f"(< {100 * threshold:g} %: extend-min-idle)"
        )

    def attempt(
        self,
        index: int,
        label: str,
        stage: Stage,
        beat_us: float,
        record: list[Decision] | None = None,
    ) -> tuple[Outcome, ModuleOp | None]:
        """Build stage `index`'s candidate and schedule it unless its floor is no less than
        `beat_us` (`LancetSchedulePass._candidate`); `record` receives its blocks' schedules."""
        trial = candidates.build_candidate(self.module, label, stage, refused, self.parts_before)
        if trial is None:
            return Outcome(index, label, built=False), None
        p = self.schedule_pass
        makespan_us, floor_us = p._candidate(  # noqa: SLF001 - the pass's own helper
            trial, label, self.share, beat_us, self.priced, self.memos, record
        )
        return Outcome(index, label, True, makespan_us, floor_us), trial

    def order(self, stages: Sequence[tuple[str, Stage]]) -> list[int]:
        """The indices of `stages` in the order they are tried (`trial_order`)."""
        return trial_order([label for label, _ in stages], self.first)

    def sequential(self, stages: Sequence[tuple[str, Stage]]) -> Kept:
        """Every stage, in this process, in `order`: each candidate built from the
        unscheduled module, scheduled and dropped unless it is the fastest so far (one or
        two clones alive, not one per stage)."""
        best: Outcome | None = None
        kept: ModuleOp | None = None
        tried: list[Outcome] = []
        built = 0
        for index in self.order(stages):
            label, stage = stages[index]
            reason = self.extend_skip(label, best_of([o for o in tried if o.index < index]))
            if reason is not None:
                refused(label, reason)
                continue
            outcome, trial = self.attempt(index, label, stage, to_beat(best, index, self.bar))
            if trial is None:
                continue
            built += 1
            tried.append(outcome)
            replaced = faster(outcome, best)
            dropped_best = replaced and kept is not None
            if replaced:
                best, kept = outcome, trial
            trial = None  # one that lost is garbage before the next is built
            collect_dropped(dropped_best)
        if best is None:
            return Kept("none", math.inf, None, built)
        return Kept(best.label, best.makespan_us, kept, built)

    def replay(self, index: int, stage: Stage, decisions: Sequence[Decision]) -> ModuleOp | None:
        """Stage `index`'s candidate built again here with the schedules `decisions` (its
        blocks of two ops or more, innermost first, as `_schedule` visited them); None when
        the rebuilt candidate is not the one scheduled (a block's size differs)."""
        label = f"#{index}"
        trial = candidates.build_candidate(self.module, label, stage, before=self.parts_before)
        if trial is None:
            return None
        sim = self.schedule_pass._simulation(trial, self.memos)  # noqa: SLF001
        pending = iter(decisions)
        for item in sim.innermost_first():
            graph = sim.costed(item.block).graph
            if len(graph) < 2:
                continue
            decision = next(pending, None)
            if decision is None or decision.nodes != len(graph):
                return None
            apply_result(graph, decision)
            sim.invalidate(item.block)
        return trial if next(pending, None) is None else None


def collect_dropped(dropped_best: bool) -> None:
    """Free the candidate just dropped (its ops form cycles, parent links, which only the
    cyclic collector frees), then freeze what is still alive (`gc.freeze`: the best
    candidate so far), so that the collections after the next candidates need not traverse
    it again (after a 2.4k-op expert split at 24 layers: 0.18 -> 0.02 s). `dropped_best`:
    the candidate kept until now was dropped for a faster one; it was frozen, and a frozen
    cycle is never freed, so everything is unfrozen first (that collection traverses it all,
    as every collection did before). Only when garbage is freed changes, never a result;
    `lancet_schedule.fewer_collections` unfreezes everything when the pass ends."""
    if dropped_best:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


@contextmanager
def held_log() -> Iterator[list[tuple[int, str]]]:
    """Hold the lines logged to `LOG` (not written) in the list yielded; restored after."""
    held: list[tuple[int, str]] = []

    class _Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append((record.levelno, record.getMessage()))

    handlers, propagate = LOG.handlers, LOG.propagate
    LOG.handlers, LOG.propagate = [_Hold()], False
    try:
        yield held
    finally:
        LOG.handlers, LOG.propagate = handlers, propagate


def _take(held: list[tuple[int, str]]) -> list[tuple[int, str]]:
    lines = list(held)
    held.clear()
    return lines


def run_forked(
    run: CandidateRun, stages: Sequence[tuple[str, Stage]], here: Callable[[str], bool]
) -> Kept:
    """`run.sequential(stages)`'s result, with the stages whose label `here` accepts run in
    this process and the others in one forked worker at the same time (module doc). A worker
    that fails or dies is reported (one log line) and its stages run here after all."""
    tried = run.order(stages)
    mine = [k for k in tried if here(stages[k][0])]
    theirs = [k for k in tried if k not in mine]
    if not mine or not theirs:
        return run.sequential(stages)
    outcomes: dict[int, Outcome] = {}
    local: dict[int, ModuleOp] = {}  # the fastest candidate scheduled here, by stage
    state: dict[str, Any] = {"worker_best": None, "ended": False}
    assigned = [(k, *stages[k]) for k in theirs]
    try:
        worker = ForkedWorker(partial(_worker, run, assigned))
    except OSError as exc:  # no memory or processes left for it
        LOG.warning(
            f"lancet-schedule: the candidate worker cannot be forked ({exc}); "
            "the candidates run in this process"
        )
        return run.sequential(stages)
    LOG.info(
        "lancet-schedule: partition candidates "
        + ", ".join(stages[k][0] for k in sorted(theirs))
        + " run in a forked worker"
    )
    with worker, held_log() as held:

        def collect(needed: set[int]) -> None:
            """Receive until the outcomes of `needed` are in, or the worker ended; a worker
            that ended without all of its outcomes has its stages run here."""
            while not state["ended"] and not needed <= outcomes.keys():
                message = worker.receive()
                if isinstance(message, Outcome):
                    outcomes[message.index] = message
                elif isinstance(message, _WorkerBest):
                    state["worker_best"] = message
                else:
                    state["ended"] = True
                    if message is not END or state["worker_best"] is None:
                        why = message.reason if isinstance(message, WorkerFailed) else "it died"
                        _fall_back(run, stages, theirs, outcomes, local, held, why)

        for k in mine:
            label = stages[k][0]
            if label.endswith("-all"):
                collect({j for j in theirs if j < k})
                reason = run.extend_skip(label, best_of([o for j, o in outcomes.items() if j < k]))
                if reason is not None:
                    refused(label, reason)
                    outcomes[k] = Outcome(k, label, False, records=_take(held))
                    continue
            _attempt_here(run, stages[k], k, outcomes, local, [], held)
        collect(set(range(len(stages))) | {-1})  # until the worker ends
    for k in sorted(outcomes):
        for level, line in outcomes[k].records:
            LOG.log(level, line)
    built = sum(1 for o in outcomes.values() if o.built)
    best = best_of(list(outcomes.values()))
    if best is None:
        return Kept("none", math.inf, None, built)
    module = local.get(best.index)
    if module is None:
        module = _worker_module(run, stages, best, state["worker_best"])
    return Kept(best.label, best.makespan_us, module, built)


def _worker_module(
    run: CandidateRun, stages: Sequence[tuple[str, Stage]], best: Outcome, worker: Any
) -> ModuleOp:
    """The worker's kept candidate, built here with its schedule (or, should the rebuilt
    candidate differ, built and scheduled here again: the same result, slower)."""
    label, stage = stages[best.index]
    if isinstance(worker, _WorkerBest) and worker.index == best.index and worker.decisions:
        module = run.replay(best.index, stage, worker.decisions)
        if module is not None:
            return module
    LOG.info(f"lancet-schedule: partition candidate {label} scheduled again in this process")
    outcome, module = run.attempt(best.index, label, stage, math.inf)
    if module is None or outcome.makespan_us != best.makespan_us:
        raise RuntimeError(f"lancet-schedule: candidate {label} did not repeat its schedule")
    return module


def _fall_back(
    run: CandidateRun,
    stages: Sequence[tuple[str, Stage]],
    theirs: Sequence[int],
    outcomes: dict[int, Outcome],
    local: dict[int, ModuleOp],
    held: list[tuple[int, str]],
    why: str,
) -> None:
    """Run the worker's stages here: its outcomes are dropped (their schedules are lost)."""
    LOG.warning(f"lancet-schedule: the candidate worker failed ({why}); its candidates run here")
    warned = _take(held)
    for k in theirs:
        outcomes.pop(k, None)
    for k in theirs:
        _attempt_here(run, stages[k], k, outcomes, local, warned, held)
        warned = []


def _attempt_here(
    run: CandidateRun,
    stage: tuple[str, Stage],
    k: int,
    outcomes: dict[int, Outcome],
    local: dict[int, ModuleOp],
    before: list[tuple[int, str]],
    held: list[tuple[int, str]],
) -> None:
    """Stage `k` built and scheduled in this process, against the fastest candidate kept
    here (`local`, which then holds whichever of the two is faster) and the bar; its outcome
    goes into `outcomes` with the log lines `before`, then those held while it ran."""
    own = best_of([outcomes[j] for j in local])
    outcome, trial = run.attempt(k, stage[0], stage[1], to_beat(own, k, run.bar))
    outcome.records = before + _take(held)
    outcomes[k] = outcome
    dropped_best = False
    if trial is not None and faster(outcome, own):
        dropped_best = bool(local)
        local.clear()
        local[k] = trial
    trial = None
    collect_dropped(dropped_best)


def _worker(run: CandidateRun, assigned: Sequence[tuple[int, str, Stage]], send: Any) -> None:
    """The worker: its stages in order, each outcome sent when known, then its fastest
    candidate's schedule (`_WorkerBest`)."""
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - no progress bars from here
    best: Outcome | None = None
    best_decisions: list[Decision] | None = None
    with held_log() as held:
        for k, label, stage in assigned:
            record: list[Decision] = []
            beat_us = to_beat(best, k, run.bar)
            outcome = run.attempt(k, label, stage, beat_us, record)[0]  # the module dropped
            outcome.records = _take(held)
            send(outcome)
            if faster(outcome, best):
                best, best_decisions = outcome, record
            gc.collect()  # the candidate (dropped above) forms cycles
    send(_WorkerBest(None if best is None else best.index, best_decisions))
