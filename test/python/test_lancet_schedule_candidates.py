"""lancet-schedule{partition=auto}: the partition candidate whose scheduled module is fastest."""

from __future__ import annotations

import logging
import re

import pytest
from helpers import run_pipeline, to_text
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir.cost.cost_model import CostModel
from lancet_mlir.cost.settings import module_cost_settings
from lancet_mlir.models.gpt2_moe import GPT2MoEConfig, build_gpt2_moe
from lancet_mlir.passes.candidate_run import Bar, Outcome, faster, to_beat, trial_order
from lancet_mlir.sim.blocks import simulate_module

DEGREES = (2, 4, 8)


def model(cluster: str, **kwargs: int) -> ModuleOp:
    """A generated GPT-2 MoE module costed on `cluster`."""
    module = build_gpt2_moe(GPT2MoEConfig(experts_per_rank=2, **kwargs))
    module.attributes["lancet.cluster"] = StringAttr(cluster)
    return module


def makespan(module: ModuleOp) -> float:
    """Simulated iteration time under the module's own cost settings (the cluster)."""
    cost_model = CostModel.from_config(module_cost_settings(module).config())
    return sum(r.summary.makespan_us for r in simulate_module(module, cost_model) if r.top_level)


def p3dn_model() -> ModuleOp:
    """One MoE layer on 2 p3dn nodes where Lancet's DP plan, once scheduled, is slower than
    splitting the expert FFN alone in 2 or 4 parts (4 is the faster), and token parts of the
    whole layer with the forward around it are faster still."""
    return model("p3dn", layers=2, hidden=384, heads=8, seq=256, batch=16, world_size=16, vocab=256)


def test_auto_keeps_the_fastest_scheduled_candidate(caplog) -> None:
    """Without search every candidate is scheduled exactly as its own pipeline would be, so
    auto's result is the fastest of them, byte for byte; here that is 8 token parts with the
    backward regions (18123.7 us), faster than 4 token parts (18167.3 us: the phased emission
    order of the pass, which the scheduling stages keep), 8 token parts (18203.6), the expert
    FFN in 4 parts (19985.5) or 2 (20031.7), the DP plan (20043.1) and no partition
    (21381.0). (Before reshapes were costed as views, their copies added 18724.4, 18774.6,
    18804.3, 20562.2, 20608.4, 20619.8 and 21957.7 us. Before splits into row blocks were
    views, the token parts and the DP plan
    each paid one copy of the [4096, 384] f32 activations they split by rows, 12.6 MB at 0.8
    x 900 GB/s = 17.5 us: 18792.2, 18821.9 and 20637.3 us; and before small GEMMs paid their
    serial K loop, cost/devices.py `matmul_k_step_us`, 8 token parts won, 18518.5 against
    18607.3 us.)"""
    base = p3dn_model()
    spans = {
        "none": makespan(
            run_pipeline(base.clone(), "lancet-schedule{partition=none max-seconds=0}")
        ),
        "dp": makespan(run_pipeline(base.clone(), "lancet-schedule{partition=dp max-seconds=0}")),
    }
    texts = {}
    for n in DEGREES:
        spec = f"tutel-pipeline{{degree={n}}},lancet-schedule{{partition=none max-seconds=0}}"
        scheduled = run_pipeline(base.clone(), spec)
        spans[f"expert-{n}"], texts[n] = makespan(scheduled), to_text(scheduled)
    for label, options in (("token-4", "parts=4"), ("token-8", "parts=8"),
                           ("token-8-all", "parts=8 extend=all")):  # fmt: skip
        spec = (
            f"moe-partition{{axis=token {options}}},lancet-schedule{{partition=none max-seconds=0}}"
        )
        scheduled = run_pipeline(base.clone(), spec)
        spans[label], texts[label] = makespan(scheduled), to_text(scheduled)
    with caplog.at_level(logging.INFO, logger="lancet_mlir.schedule"):
        auto = run_pipeline(base.clone(), "lancet-schedule{max-seconds=0}")
    assert round(spans["none"], 1) == 21381.0
    assert round(spans["dp"], 1) == 20043.1
    assert round(spans["expert-2"], 1) == 20031.7
    assert round(spans["expert-4"], 1) == 19985.5
    assert round(spans["token-4"], 1) == 18167.3
    assert round(spans["token-8"], 1) == 18203.6
    assert round(spans["token-8-all"], 1) == 18123.7
    assert makespan(auto) == min(spans.values()) == spans["token-8-all"]
    assert to_text(auto) == texts["token-8-all"]
    assert "kept partition candidate token-8-all (18123.7 us)" in caplog.text


def test_auto_is_never_slower_than_tutel_with_search() -> None:
    """With the default (shared) search budget the result is still no slower than any Tutel
    degree, with or without the scheduling stages after it, and than the input."""
    base = p3dn_model()
    auto = makespan(run_pipeline(base.clone(), "lancet-schedule"))
    assert auto <= makespan(base)
    for n in DEGREES:
        assert auto <= makespan(run_pipeline(base.clone(), f"tutel-pipeline{{degree={n}}}"))
        spec = f"tutel-pipeline{{degree={n}}},lancet-schedule{{partition=none max-seconds=0}}"
        assert auto <= makespan(run_pipeline(base.clone(), spec))


def test_auto_without_moe_layers_is_partition_none() -> None:
    """No MoE layer (moe-every=0): every partitioned candidate is left out."""
    base = model("p4de", layers=2, hidden=32, heads=2, seq=16, batch=2, world_size=4, vocab=64,
                 moe_every=0)  # fmt: skip
    auto = run_pipeline(base.clone(), "lancet-schedule{max-seconds=0.2}")
    plain = run_pipeline(base.clone(), "lancet-schedule{partition=none max-seconds=0.2}")
    assert to_text(auto) == to_text(plain)
    assert "lancet.part" not in to_text(auto)


@settings(max_examples=5, deadline=None)
@given(
    st.sampled_from(["p3dn", "p4de"]),
    st.sampled_from([16, 32]),
    st.sampled_from([16, 32]),
    st.sampled_from([2, 4]),
    st.sampled_from([4, 8]),
)
def test_auto_never_slower_than_any_candidate_alone(
    cluster: str, hidden: int, seq: int, batch: int, world: int
) -> None:
    """On random small models: never slower than the input, than `tutel-pipeline` at any
    degree that applies, nor than scheduling without partitioning (no search, so every
    candidate runs exactly as its own pipeline)."""
    base = model(cluster, layers=1, moe_every=1, hidden=hidden, heads=2, seq=seq, batch=batch,
                 world_size=world, vocab=64)  # fmt: skip
    auto = makespan(run_pipeline(base.clone(), "lancet-schedule{max-seconds=0}"))
    assert auto <= makespan(base)
    assert auto <= makespan(
        run_pipeline(base.clone(), "lancet-schedule{partition=none max-seconds=0}")
    )
    assert auto <= makespan(
        run_pipeline(base.clone(), "lancet-schedule{partition=dp max-seconds=0}")
    )
    for n in DEGREES:
        try:
            tutel = run_pipeline(base.clone(), f"tutel-pipeline{{degree={n}}}")
        except PassFailedException:  # n does not divide the capacity: no such candidate
            continue
        assert auto <= makespan(tutel)


def test_a_candidate_whose_compute_alone_is_slower_is_not_scheduled(caplog) -> None:
    """On one DGX H100 node the all-to-alls are cheap: token parts add more compute than
    the best schedule so far takes in all (3171.0 us, Lancet's DP plan, whose rebuilds are
    written in place, whose weight-gradient sums are accumulated by their GEMMs and whose
    split of the [4096, 384] f32 activations into row blocks is a view: 12.6 MB at 0.8 x
    3.35 TB/s = 4.7 us less than the 3335.3 us it took as a copy; while they were copies
    and adds the 2-part expert split, now 3184.4 us, won with 3354.6 us; 3330.6 and 3344.0
    us before reshapes were costed as views), so they are skipped unscheduled; the result is
    still the fastest of all candidates run alone."""
    base = model("dgx-h100", layers=2, hidden=384, heads=8, seq=256, batch=16, world_size=16,
                 vocab=256)  # fmt: skip
    with caplog.at_level(logging.INFO, logger="lancet_mlir.schedule"):
        auto = run_pipeline(base.clone(), "lancet-schedule{max-seconds=0}")
    for label, options in (("token-4", "parts=4"), ("token-8", "parts=8"),
                           ("token-8-all", "parts=8 extend=all")):  # fmt: skip
        assert f"partition candidate {label} skipped" in caplog.text
        alone = run_pipeline(
            base.clone(),
            f"moe-partition{{axis=token {options}}},lancet-schedule{{partition=none max-seconds=0}}",
        )
        assert makespan(alone) > makespan(auto)
    expert = run_pipeline(
        base.clone(), "tutel-pipeline{degree=2},lancet-schedule{partition=none max-seconds=0}"
    )
    dp = run_pipeline(base.clone(), "lancet-schedule{partition=dp max-seconds=0}")
    assert makespan(auto) == makespan(dp) < makespan(expert)
    assert round(makespan(auto), 1) == 3171.0
    assert round(makespan(expert), 1) == 3184.4


def test_candidates_are_built_one_at_a_time() -> None:
    """`lazy_candidates` runs a stage only when the next candidate is asked for, on a clone of
    the unchanged input, and keeps no reference to a candidate the caller dropped: with the
    collector run in between, no earlier clone is alive when the next one is built."""
    import gc
    import weakref

    from lancet_mlir import attrs
    from lancet_mlir.partition.candidates import lazy_candidates

    base = model("p3dn", layers=1, hidden=32, heads=2, seq=16, batch=2, world_size=4, vocab=64)
    ran: list[str] = []
    alive_at_build: list[int] = []
    refs: list[weakref.ref] = []

    def stage(label: str, partitions: bool):
        def run(trial: ModuleOp) -> None:
            gc.collect()
            alive_at_build.append(sum(r() is not None for r in refs))
            refs.append(weakref.ref(trial))
            ran.append(label)
            if label == "fails":
                raise PassFailedException("cannot")
            if partitions:  # tag one op as a part, as a partition stage does
                next(iter(trial.walk())).attributes[attrs.PART] = StringAttr("0")

        return run

    stages = [("a", stage("a", True)), ("fails", stage("fails", True)),
              ("nothing", stage("nothing", False)), ("b", stage("b", True))]  # fmt: skip
    refused: list[str] = []
    built = lazy_candidates(base, stages, lambda label, reason: refused.append(label))
    label, trial = next(built)
    assert (label, ran) == ("a", ["a"])
    assert trial is not None
    del trial
    seen = [(label, trial is not None) for label, trial in built]
    assert seen == [("fails", False), ("nothing", False), ("b", True)]
    assert ran == ["a", "fails", "nothing", "b"]
    assert refused == ["fails"]
    assert alive_at_build == [0, 0, 0, 0]
    assert attrs.PART not in to_text(base)  # every stage ran on a clone


def test_budget_shares_of_the_candidates(monkeypatch, caplog) -> None:
    """max-seconds=F: each partition stage that builds a candidate gets F / 8, scheduled in
    the trial order (token-8 first, then stage order); the unpartitioned module, scheduled
    last, gets F / 8 when all seven build and the rest of F otherwise (a top-2 gate takes no
    token parts), and is not scheduled at all when its makespan floor is above the best
    candidate's schedule. The DP plan and the expert splits build but are skipped: their
    floors are above the token candidates' schedules (their shares stay unused)."""
    from lancet_mlir.passes.lancet_schedule import LancetSchedulePass

    shares: list[tuple[str, float]] = []
    schedule = LancetSchedulePass._schedule

    def recorded(self, op, max_seconds, label, *args, **kwargs):
        shares.append((label, max_seconds))
        return schedule(self, op, max_seconds, label, *args, **kwargs)

    monkeypatch.setattr(LancetSchedulePass, "_schedule", recorded)
    with caplog.at_level(logging.INFO, logger="lancet_mlir.schedule"):
        run_pipeline(p3dn_model(), "lancet-schedule{max-seconds=0.08}")
    labels = ["token-8", "token-4", "token-8-all"]
    # the unpartitioned module is not scheduled: no order of it is as fast as the best
    # candidate's schedule
    assert shares == [(label, 0.01) for label in labels]
    skipped = re.findall(r"partition candidate (\S+) skipped", caplog.text)
    assert skipped == ["dp", "expert-2", "expert-4", "expert-8", "none"]
    assert (
        "partition candidate none skipped: its makespan floor (21061.6 us) is more than the "
        "best so far (17844.3 us)" in caplog.text
    )
    shares.clear()
    caplog.clear()
    top2 = model("p3dn", layers=2, hidden=64, heads=2, seq=32, batch=4, world_size=4, vocab=64,
                 gate="top2")  # fmt: skip
    with caplog.at_level(logging.INFO, logger="lancet_mlir.schedule"):
        run_pipeline(top2, "lancet-schedule{max-seconds=0.08}")
    scheduled = [label for label, _ in shares[:-1]]
    skipped = re.findall(r"partition candidate (\S+) skipped", caplog.text)
    # moe-partition refuses token parts of a top-2 gate; a candidate skipped unscheduled
    # (its compute alone is too slow) leaves its share unused; the unpartitioned schedule
    # takes the shares of the stages that built nothing
    built = scheduled + skipped
    assert not {"token-4", "token-8", "token-8-all"} & set(built)
    assert scheduled
    assert shares[:-1] == [(label, 0.01) for label in scheduled]
    assert shares[-1] == ("none", 0.08 - len(built) * 0.01)


def test_the_extended_token_candidate_is_built_only_where_compute_idles(caplog) -> None:
    """`token-8-all` is the largest candidate, so it is built only when the best schedule so
    far leaves compute idle for >= 3 % of its makespan (`EXTENDED_MIN_IDLE`). A batch-64
    p4de model is compute-bound: the best so far, 4 token parts, exposes 149.1 of 37993.0 us
    and its compute idles 0.4 %, so token-8-all is left out unbuilt, and it would have lost
    (scheduled alone it is slower). On the network-bound p3dn model it is built (and wins:
    test_auto_keeps_the_fastest_scheduled_candidate)."""
    base = model("p4de", layers=2, hidden=384, heads=8, seq=256, batch=64, world_size=16,
                 vocab=256)  # fmt: skip
    with caplog.at_level(logging.INFO, logger="lancet_mlir.schedule"):
        auto = run_pipeline(base.clone(), "lancet-schedule{max-seconds=0}")
    assert (
        "partition candidate token-8-all left out: the best schedule so far (token-4, "
        "37993.0 us) leaves compute idle 0.4 % of it (< 3 %: extend-min-idle)" in caplog.text
    )
    assert "kept partition candidate token-4 (37993.0 us)" in caplog.text
    alone = run_pipeline(
        base.clone(),
        "moe-partition{axis=token parts=8 extend=all},"
        "lancet-schedule{partition=none max-seconds=0}",
    )
    assert makespan(alone) > makespan(auto)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lancet_mlir.schedule"):
        run_pipeline(p3dn_model(), "lancet-schedule{max-seconds=0}")
    assert "token-8-all left out" not in caplog.text
    assert "[token-8-all] lancet-schedule" in caplog.text
    # extend-min-idle=0 builds it on the p4de model too (then its compute alone, above the
    # best schedule, gets it skipped unscheduled); the result is the same
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lancet_mlir.schedule"):
        always = run_pipeline(base.clone(), "lancet-schedule{max-seconds=0 extend-min-idle=0}")
    assert "token-8-all left out" not in caplog.text
    assert "partition candidate token-8-all skipped: its compute" in caplog.text
    assert to_text(always) == to_text(auto)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-0.1", "extend-min-idle must be finite and >= 0.0, got -0.1"),
        ('"x"', "option extend-min-idle expects a number, got 'x'"),
        ("inf", "option extend-min-idle expects a number, got 'inf'"),
    ],
)
def test_a_bad_extend_min_idle_is_one_error_line(value: str, message: str) -> None:
    with pytest.raises(PassFailedException) as failed:
        run_pipeline(p3dn_model(), f"lancet-schedule{{extend-min-idle={value}}}")
    assert str(failed.value) == f"lancet-schedule: {message}"


def test_with_no_candidate_kept_the_gate_reads_the_unpartitioned_input(caplog) -> None:
    """On a small p3dn model the DP plan builds nothing and the token candidates' compute
    alone exceeds the input's makespan, so no candidate is kept when token-8-all's turn
    comes: the gate then reads the input, 677.2 us of which compute takes 476.5 (29.6 %
    idle, `simulate`'s report). It builds (29.6 % >= 3 %; then skipped on its compute), and
    with extend-min-idle=1 it is left out unbuilt, naming the input."""
    base = model("p3dn", layers=2, hidden=32, heads=2, seq=16, batch=4, world_size=8, vocab=64)
    with caplog.at_level(logging.INFO, logger="lancet_mlir.schedule"):
        run_pipeline(base.clone(), "lancet-schedule{max-seconds=0}")
    assert "partition candidate token-8-all skipped: its compute (1025.2 us)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lancet_mlir.schedule"):
        run_pipeline(base.clone(), "lancet-schedule{max-seconds=0 extend-min-idle=1}")
    assert (
        "partition candidate token-8-all left out: the unpartitioned input (677.2 us) leaves "
        "compute idle 29.6 % of it (< 100 %: extend-min-idle)" in caplog.text
    )
    assert "token-8-all skipped" not in caplog.text


def test_the_floors_that_skip_candidates_are_below_their_schedules(caplog) -> None:
    """token-8 is tried first (18203.6 us), so Lancet's DP plan and the expert splits meet a
    fast schedule: their makespan floors count the compute their forward all-to-alls leave
    idle (`comm_window_floor_us`) and exceed it, so they are skipped unscheduled; each floor
    is below what the candidate takes scheduled alone, and auto keeps the fastest as before."""
    base = p3dn_model()
    with caplog.at_level(logging.INFO, logger="lancet_mlir.schedule"):
        auto = makespan(run_pipeline(base.clone(), "lancet-schedule{max-seconds=0}"))
    found = re.finditer(
        r"partition candidate (\S+) skipped: its makespan floor \(([\d.]+) us\)", caplog.text
    )
    floors = {m[1]: float(m[2]) for m in found}
    assert set(floors) == {"none", "dp", "expert-2", "expert-4", "expert-8"}
    alone = {
        "none": "lancet-schedule{partition=none max-seconds=0}",
        "dp": "lancet-schedule{partition=dp max-seconds=0}",
        **{
            f"expert-{n}": f"tutel-pipeline{{degree={n}}},lancet-schedule{{partition=none max-seconds=0}}"
            for n in DEGREES
        },
    }
    for label, spec in alone.items():
        scheduled = makespan(run_pipeline(base.clone(), spec))
        assert floors[label] <= round(scheduled, 1)
        assert scheduled > auto
    assert caplog.text.index("[token-8] ") < caplog.text.index("candidate dp skipped")
    assert (
        round(auto, 1) == 18123.7
    )  # token-8-all, as test_auto_keeps_the_fastest_scheduled_candidate


def test_an_earlier_stage_tried_later_may_still_tie() -> None:
    """`to_beat`: a stage tried after a faster later one is skipped only when its floor is
    above that schedule (it would win a tie); one after an earlier one when it is no less;
    the input's bound caps both. `faster` breaks ties by stage; `trial_order` puts `first`
    ahead and refuses a token-n-all stage there."""
    bar = Bar(makespan_us=100.0, floor_us=50.0)
    best = Outcome(2, "token-8", True, 80.0)
    assert to_beat(None, 0, bar) == 100.0
    assert to_beat(best, 3, bar) == 80.0
    assert 80.0 < to_beat(best, 0, bar) < 80.0 + 1e-9
    assert to_beat(Outcome(2, "token-8", True, 120.0), 0, bar) == 100.0
    assert faster(Outcome(0, "dp", True, 80.0), best)
    assert not faster(Outcome(3, "token-8-all", True, 80.0), best)
    assert not faster(Outcome(0, "dp", True), None)  # skipped: inf
    labels = ["dp", "token-4", "token-8", "token-8-all", "expert-2"]
    assert trial_order(labels, ["token-8"]) == [2, 0, 1, 3, 4]
    assert trial_order(labels, ["token-16"]) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="token-n-all"):
        trial_order(labels, ["token-8-all"])
