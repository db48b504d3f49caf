"""Comm cost models: interpolation, monotone fit, alpha-beta, group sizes, table loaders."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.cost.comm_loaders import (
    load_comm_table,
    parse_lancet_supplement,
    parse_nccl_tests,
    parse_table_csv,
    parse_xla_table,
    table_csv_text,
)
from lancet_mlir.cost.comm_model import (
    AlphaBeta,
    CommModel,
    CommTable,
    InterNode,
    PiecewiseLinear,
    canonical_kind,
    isotonic_fit,
)
from lancet_mlir.cost.fileio import data_path
from lancet_mlir.tools.errors import UserError

DATA = Path(__file__).resolve().parents[1] / "data" / "profile"


# ---- interpolation -------------------------------------------------------------------------------
def test_interpolation_at_between_below_above() -> None:
    curve = PiecewiseLinear.fit([(1000, 10.0), (2000, 20.0), (4000, 30.0)])
    assert curve(1000) == 10.0  # at a sample
    assert curve(4000) == 30.0
    assert curve(1500) == 15.0  # between: segment (1000, 2000)
    assert curve(3000) == 25.0  # between: segment (2000, 4000), not Lancet's next segment
    assert curve(500) == 5.0  # below: first slope 0.01 us/B
    assert curve(0) == 0.0
    assert curve(6000) == 40.0  # above: last slope 0.005 us/B


def test_extrapolation_is_clamped_at_zero() -> None:
    curve = PiecewiseLinear.fit([(1000, 5.0), (2000, 20.0)])
    assert curve(500) == 0.0  # 5 - 0.015 * 500 < 0


def test_single_sample_is_latency_floor_then_proportional() -> None:
    curve = PiecewiseLinear.fit([(1000, 8.0)])
    assert curve(10) == 8.0
    assert curve(1000) == 8.0
    assert curve(4000) == 32.0


def test_duplicate_sizes_are_averaged() -> None:
    curve = PiecewiseLinear.fit([(1000, 10.0), (1000, 14.0), (2000, 20.0)])
    assert curve.xs == (1000.0, 2000.0)
    assert curve(1000) == 12.0


def test_monotone_fix_pools_violators() -> None:
    curve = PiecewiseLinear.fit([(1, 10.0), (2, 30.0), (3, 20.0), (4, 40.0)])
    assert curve.ys == (10.0, 25.0, 25.0, 40.0)
    assert curve(2.5) == 25.0
    raw = PiecewiseLinear.fit([(1, 10.0), (2, 30.0), (3, 20.0), (4, 40.0)], monotone=False)
    assert raw.ys == (10.0, 30.0, 20.0, 40.0)


def test_isotonic_fit_is_weighted() -> None:
    # size 2 measured twice at 30, size 3 once at 20 -> pooled (2*30 + 20) / 3
    assert isotonic_fit([10.0, 30.0, 20.0], [1.0, 2.0, 1.0]) == pytest.approx(
        [10.0, 80 / 3, 80 / 3]
    )
    curve = PiecewiseLinear.fit([(1, 10.0), (2, 30.0), (2, 30.0), (3, 20.0)])
    assert curve.ys == pytest.approx((10.0, 80 / 3, 80 / 3))


def test_shipped_tables_fit_monotone_curves() -> None:
    for name in ("comm_h100.csv", "comm_b200.csv", "comm_gb200.csv"):
        table = load_comm_table(str(data_path(name)))
        assert {k for k, _ in table.keys()} == {
            "allreduce",
            "allgather",
            "reduce_scatter",
            "all_to_all",
        }
        for key, curve in table.fit().items():
            sizes = [2**e for e in range(8, 36)]
            times = [curve(s) for s in sizes]
            assert times == sorted(times), (name, key)


def test_h100_table_uses_real_xla_rows() -> None:
    table = load_comm_table(str(data_path("comm_h100.csv")))
    # sm_90,all-reduce,F32,1048576,4194304,1,8,...,68.672 in XLA's table (monotone region)
    assert (4194304, 68.672) in table.samples[("allreduce", 8)]
    assert table.fit()[("allreduce", 8)](4194304) == 68.672
    # the noisy small all-to-all sizes (96.9 us at 1 KiB) are pooled, not kept as a maximum
    a2a = table.fit()[("all_to_all", 8)]
    assert a2a(1024) < 96.864
    assert a2a(1024) == a2a(2048)


# ---- alpha-beta ----------------------------------------------------------------------------------
def test_alpha_beta_hand_computed() -> None:
    ab = AlphaBeta.from_busbw(20.0, 400.0)  # 400 GB/s bus bandwidth
    # ring allreduce on 8 ranks sends 2*7/8 bytes per payload byte
    assert ab.time_us("allreduce", 1e9, 8) == pytest.approx(20 + 1e9 * 1.75 / 400e9 * 1e6)
    assert ab.time_us("all_to_all", 1e6, 4) == pytest.approx(20 + 1e6 * 0.75 / 400e9 * 1e6)
    assert ab.time_us("allgather", 1e6, 1) == 0.0
    assert ab.time_us("allreduce", 4e8, None) == pytest.approx(20 + 4e8 * 2 / 400e9 * 1e6)


# ---- group sizes ---------------------------------------------------------------------------------
def _model() -> CommModel:
    table = CommTable()
    for nbytes, t in ((1000, 10.0), (2000, 20.0)):
        table.add("allreduce", 2, nbytes, t)
    for nbytes, t in ((1000, 30.0), (2000, 60.0)):
        table.add("all_reduce", 8, nbytes, t)
    table.add("alltoall", 8, 1000, 50.0)
    return CommModel.from_table(table, AlphaBeta.from_busbw(20.0, 400.0), "t.csv")


def test_exact_group_size() -> None:
    model = _model()
    assert model.time_us("allreduce", 1500, 2) == 15.0
    assert model.time_us("allreduce", 1500, 8) == 45.0
    assert model.notes == []


def test_between_group_sizes_interpolates_and_notes() -> None:
    model = _model()
    assert model.time_us("allreduce", 1000, 4) == pytest.approx(10 + 20 * 2 / 6)
    assert model.notes == [
        "allreduce: group size 4 not measured; interpolated between measured group sizes 2 and 8"
    ]
    model.time_us("allreduce", 2000, 4)  # same decision: noted once
    assert len(model.notes) == 1


def test_outside_group_sizes_uses_nearest_and_notes() -> None:
    model = _model()
    assert model.time_us("allreduce", 1000, 16) == 30.0
    assert "group size 16 not measured; used the nearest measured group size 8" in model.notes[0]


def test_unknown_group_size() -> None:
    model = _model()
    # several measured sizes: the largest, noted
    assert model.time_us("allreduce", 1000, None) == 30.0
    assert "used the largest measured group size 8" in model.notes[0]
    # a single measured size: used silently
    before = len(model.notes)
    assert model.time_us("all_to_all", 1000, None) == 50.0
    assert len(model.notes) == before


def test_single_rank_costs_nothing_and_missing_kind_falls_back() -> None:
    model = _model()
    assert model.time_us("allreduce", 10**6, 1) == 0.0
    assert model.time_us("allgather", 1e6, 4) == pytest.approx(20 + 1e6 * 0.75 / 400e9 * 1e6)
    assert model.notes == [
        "allgather: no measured table in t.csv; used alpha-beta (alpha 20 us, busbw 400 GB/s)"
    ]
    # all_to_allv is costed as all_to_all
    assert model.time_us("all_to_allv", 1000, 8) == 50.0
    assert canonical_kind("all_to_allv") == "all_to_all"


# ---- groups spanning nodes -----------------------------------------------------------------------
# 8 GPUs per node, 400 Gb/s NIC per GPU at 0.8 efficiency = 40 GB/s = 40000 bytes/us, 15 us
NET = InterNode(8, 400.0, 15.0)


def test_internode_traffic_and_time_hand_computed() -> None:
    s = 8_000_000
    # ring allreduce over 2 nodes: 2*15/16 * S leaves each node, over its 8 NICs
    assert NET.nic_bytes("allreduce", s, 16) == pytest.approx(s * 2 * 15 / 16 / 8)
    assert NET.time_us("allreduce", s, 16) == pytest.approx(15 + 1_875_000 / 40_000)
    assert NET.nic_bytes("allgather", s, 32) == pytest.approx(s * 31 / 32 / 8)
    assert NET.nic_bytes("reduce_scatter", s, 32) == pytest.approx(s * 31 / 32 / 8)
    # all-to-all: 8 of the 16 destinations are off-node, through the GPU's own NIC
    assert NET.nic_bytes("alltoall", s, 16) == s / 2
    assert NET.time_us("all_to_all", s, 16) == pytest.approx(15 + 4_000_000 / 40_000)
    assert NET.nic_bytes("all_to_all", s, 32) == s * 24 / 32
    # 12 ranks packed as 8 + 4: the node with 4 ranks is the bottleneck
    assert NET.nodes(12) == 2
    assert NET.nic_bytes("all_to_all", s, 12) == pytest.approx(s * 8 / 12)
    assert NET.nic_bytes("allreduce", s, 12) == pytest.approx(s * 2 * 11 / 12 / 4)
    # within one node nothing crosses the network
    assert NET.time_us("all_to_all", s, 8) == 0.0
    assert NET.nic_bytes("allreduce", s, 4) == 0.0


def _net_model(extra: dict[int, list[tuple[int, float]]] | None = None) -> CommModel:
    table = CommTable()
    for nbytes, ar, a2a in ((1000, 30.0, 15.0), (8_000_000, 40.0, 300.0)):
        table.add("allreduce", 8, nbytes, ar)
        table.add("all_to_all", 8, nbytes, a2a)
    table.add("all_to_all", 4, 1000, 12.0)
    for g, rows in (extra or {}).items():
        for nbytes, t in rows:
            table.add("all_to_all", g, nbytes, t)
    return CommModel.from_table(table, AlphaBeta.from_busbw(20.0, 400.0), "t.csv", NET)


def test_groups_within_a_node_are_unchanged() -> None:
    model = _net_model()
    assert model.time_us("allreduce", 8_000_000, 8) == 40.0
    assert model.time_us("all_to_all", 1000, 4) == 12.0
    assert model.time_us("all_to_all", 1000, 6) == pytest.approx(12 + (15 - 12) * 2 / 4)
    assert model.notes == [
        "all_to_all: group size 6 not measured; interpolated between measured group sizes 4 and 8"
    ]


def test_multinode_group_takes_the_larger_of_table_and_network() -> None:
    model = _net_model()
    # network bound: allreduce 16 = 15 + 2*15/16*8e6/8 / 40000 = 61.875 us > table's 40 us
    assert model.time_us("allreduce", 8_000_000, 16) == pytest.approx(61.875)
    # NVLink bound: the 8-rank table (300 us) is slower than the network's 15 + 4e6/40000 us
    assert model.time_us("all_to_all", 8_000_000, 16) == 300.0
    # small: the intra-node table at 8 ranks (30 us) beats the network's 15.0375 us
    assert model.time_us("allreduce", 1000, 32) == 30.0
    assert model.notes == [
        "allreduce: group size 16 spans 2 nodes of 8 GPUs; used the larger of the intra-node "
        "measured table at group size 8 and the inter-node alpha-beta model (400 Gb/s per GPU x "
        "0.8 efficiency, latency 15 us)",
        "all_to_all: group size 16 spans 2 nodes of 8 GPUs; used the larger of the intra-node "
        "measured table at group size 8 and the inter-node alpha-beta model (400 Gb/s per GPU x "
        "0.8 efficiency, latency 15 us)",
        "allreduce: group size 32 spans 4 nodes of 8 GPUs; used the larger of the intra-node "
        "measured table at group size 8 and the inter-node alpha-beta model (400 Gb/s per GPU x "
        "0.8 efficiency, latency 15 us)",
    ]
    model.time_us("allreduce", 4_000_000, 16)  # same decision: noted once
    assert len(model.notes) == 3


def test_multinode_without_table_uses_alpha_beta_at_node_size() -> None:
    model = _net_model()
    # allgather has no table: intra = alpha-beta on 8 ranks = 20 + 7/8 * 8e6 / 400e9 s = 37.5 us;
    # network = 15 + 31/32 * 8e6 / 8 / 40000 = 39.21875 us
    assert model.time_us("allgather", 8_000_000, 32) == pytest.approx(39.21875)
    assert model.time_us("allgather", 1000, 32) == pytest.approx(20 + 1000 * 7 / 8 / 400e3)
    assert "intra-node alpha-beta at group size 8" in model.notes[0]


def test_measured_multinode_group_sizes_win() -> None:
    model = _net_model({16: [(8_000_000, 900.0)], 64: [(8_000_000, 1300.0)]})
    assert model.time_us("all_to_all", 8_000_000, 16) == 900.0  # exact measurement
    # between two multi-node measurements: interpolated, not modelled
    assert model.time_us("all_to_all", 8_000_000, 32) == pytest.approx(900 + 400 * 16 / 48)
    assert model.notes == [
        "all_to_all: group size 32 not measured; interpolated between measured group sizes "
        "16 and 64"
    ]
    # beyond the largest measurement: the model again, not the nearest size 64 (1300 us):
    # max(8-rank table 300 us, network 15 + 8e6*120/128/40000 = 202.5 us)
    assert model.time_us("all_to_all", 8_000_000, 128) == 300.0
    assert "group size 128 spans 16 nodes" in model.notes[-1]


def test_model_without_internode_keeps_nearest_group_size() -> None:
    table = CommTable()
    table.add("allreduce", 8, 8_000_000, 200.0)
    model = CommModel.from_table(table, AlphaBeta.from_busbw(20.0, 400.0))
    assert model.time_us("allreduce", 8_000_000, 64) == 200.0


# ---- loaders -------------------------------------------------------------------------------------
def test_nccl_tests_all_reduce_log() -> None:
    path = DATA / "all_reduce_perf_8gpu.log"
    table = parse_nccl_tests(path.read_text(), str(path))
    assert table.keys() == [("allreduce", 8)]
    rows = table.samples[("allreduce", 8)]
    assert len(rows) == 9
    assert rows[0] == (1024, 23.51)  # in-place time, not the out-of-place 24.05
    assert rows[-1] == (67108864, 348.61)


def test_nccl_tests_two_runs_in_one_log() -> None:
    path = DATA / "nccl_two_tests_4gpu.log"
    table = parse_nccl_tests(path.read_text(), str(path))
    assert table.keys() == [("allgather", 4), ("reduce_scatter", 4)]
    assert table.samples[("allgather", 4)][0] == (1024, 14.87)
    assert table.samples[("reduce_scatter", 4)][-1] == (262144, 16.70)


def test_nccl_tests_kind_from_file_name_and_overrides() -> None:
    path = DATA / "alltoall_perf_2gpu.log"
    table = parse_nccl_tests(path.read_text(), str(path))
    assert table.keys() == [("all_to_all", 2)]
    assert table.samples[("all_to_all", 2)] == [
        (1024, 19.51),
        (4096, 20.18),
        (16384, 19.94),
        (65536, 19.97),
    ]
    forced = parse_nccl_tests(path.read_text(), "log.txt", kind="allgather", group_size=16)
    assert forced.keys() == [("allgather", 16)]
    with pytest.raises(UserError, match="cannot tell the collective"):
        parse_nccl_tests(path.read_text(), "log.txt")
    with pytest.raises(UserError, match="no nccl-tests result rows"):
        parse_nccl_tests("# nothing here\n", "empty.log", kind="allreduce")


def test_lancet_supplement_units() -> None:
    path = DATA / "alltoall_perf_2x8.csv"
    table = parse_lancet_supplement(path.read_text(), "all_to_all", 16, str(path))
    # size is in 32-bit words: 256 words = 1024 bytes
    assert table.samples[("all_to_all", 16)] == [
        (1024, 21.0),
        (4096, 22.0),
        (1048576, 410.0),
        (65536, 35.0),
    ]
    with pytest.raises(UserError, match="Lancet supplement CSV"):
        load_comm_table(str(path))


def test_xla_loader_picks_rows_of_one_gpu() -> None:
    path = DATA / "xla_collective_subset.csv"
    table = parse_xla_table(path.read_text(), "sm_90", str(path))
    assert table.keys() == [("all_to_all", 2), ("allreduce", 8)]
    assert table.samples[("allreduce", 8)] == [
        (1048576, 51.936),
        (1024, 49.312),
        (2048, 35.968),
        (4096, 32.512),
    ]
    assert table.samples[("all_to_all", 2)] == [(1024, 134.272), (2048, 30.784)]
    b200 = parse_xla_table(path.read_text(), "sm_100_B200", str(path))
    assert b200.samples == {("allreduce", 8): [(1024, 45.024)]}
    with pytest.raises(UserError, match=r"no rows for gpu 'sm_80' \(present: sm_100_B200, sm_90\)"):
        parse_xla_table(path.read_text(), "sm_80", str(path))
    # recognized by load_comm_table when the device's XLA gpu is known
    assert len(load_comm_table(str(path), "sm_90")) == 6


def test_own_csv_round_trip_and_errors(tmp_path: Path) -> None:
    table = CommTable()
    table.add("all_to_all", 8, 2048, 31.5)
    table.add("allreduce", 8, 1024, 20.25)
    text = table_csv_text(table, ("hand made",))
    assert text == (
        "# hand made\nkind,group_size,bytes,time_us\n"
        "all_to_all,8,2048,31.5\nallreduce,8,1024,20.25\n"
    )
    assert parse_table_csv(text, "t.csv").samples == table.samples
    path = tmp_path / "t.csv"
    path.write_text(text)
    assert load_comm_table(str(path)).samples == table.samples

    bad_time = "kind,group_size,bytes,time_us\nallreduce,8,1024,-3\n"
    with pytest.raises(UserError, match=r"b.csv:2: time_us must be finite and >= 0"):
        parse_table_csv(bad_time, "b.csv")
    with pytest.raises(UserError, match=r"b.csv:2: unknown collective kind 'broadcast'"):
        parse_table_csv("kind,group_size,bytes,time_us\nbroadcast,8,1,1\n", "b.csv")
    with pytest.raises(UserError, match="expected header"):
        parse_table_csv("size,time\n1,2\n", "b.csv")
    with pytest.raises(UserError, match="nan"):
        parse_table_csv("kind,group_size,bytes,time_us\nallreduce,8,1024,nan\n", "b.csv")
    junk = tmp_path / "junk.txt"
    junk.write_text("hello world\n")
    with pytest.raises(UserError, match="unrecognized comm table"):
        load_comm_table(str(junk))


# ---- properties ----------------------------------------------------------------------------------
_SAMPLES = st.lists(
    st.tuples(st.integers(0, 10**9), st.floats(0, 1e5, allow_nan=False)), min_size=1, max_size=30
)


@settings(max_examples=60, deadline=None)
@given(_SAMPLES, st.lists(st.integers(0, 2 * 10**9), min_size=2, max_size=20))
def test_fitted_curves_are_monotone_and_non_negative(samples, probes) -> None:
    curve = PiecewiseLinear.fit(samples)
    values = [curve(x) for x in sorted(probes)]
    assert all(v >= 0 for v in values)
    assert all(a <= b + 1e-9 * max(1.0, abs(b)) for a, b in zip(values, values[1:], strict=False))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=2, max_size=20, unique=True))
def test_monotone_input_is_interpolated_exactly(times) -> None:
    ys = sorted(times)
    xs = [1000 * (i + 1) for i in range(len(ys))]
    curve = PiecewiseLinear.fit(list(zip(xs, ys, strict=True)))
    assert [curve(x) for x in xs] == pytest.approx(ys)
