"""Explicit cost configuration: passes depend only on their options and the module.

* `lancet-opt <flags> -p P`, `xdsl-opt -p P` on a file carrying the same `lancet.*`
  attributes and `xdsl-opt -p 'P{<same options>}'` give byte-identical output;
* pass options override module attributes, which override the defaults (with the cluster
  rule of `profile/settings.py`);
* passes with different options in one pipeline, in one process, do not leak configuration;
* cluster presets drive the inter-node model (hand-computed all-to-all times);
* bad values are one-line errors naming the attribute or the option.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import parse, run_pipeline, run_tool, to_text
from xdsl.dialects.builtin import StringAttr
from xdsl.utils.exceptions import PassFailedException
from xdsl.xdsl_opt_main import xDSLOptMain

from lancet_mlir.cost.clusters import CLUSTERS, get_cluster
from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.cost.profile_db import ProfileDB, ProfileEntry
from lancet_mlir.passes import get_all_passes
from lancet_mlir.passes.costing import CostOptions
from lancet_mlir.passes.simulate import SimulatePass
from lancet_mlir.sim.options import SimOptions
from lancet_mlir.support.errors import UserError
from lancet_mlir.tools.lancet_opt import LancetOptMain

REPO = Path(__file__).resolve().parents[2]
MOE_W4 = REPO / "test" / "data" / "runtime" / "moe_step_w4.mlir"

# two nodes of two GPUs on the p3dn's network, two comm streams, some overlap slowdown
FLAGS = [
    "--cluster",
    "p3dn",
    "--gpus-per-node",
    "2",
    "--comm-streams",
    "2",
    "--overlap-slowdown",
    "1.25",
]
ATTRS = (
    'lancet.cluster = "p3dn", lancet.gpus_per_node = 2 : i64, lancet.comm_streams = 2 : i64, '
    "lancet.overlap_slowdown = 1.250000e+00 : f64"
)
OPTIONS = "cluster=p3dn gpus-per-node=2 comm-streams=2 overlap-slowdown=1.25"
COSTING = ("dw-schedule", "fuse-noncritical-comm", "lancet-schedule", "moe-partition", "simulate")


def _with_attrs(text: str, extra: str) -> str:
    """`text` (a module with `lancet.world_size`) with more module attributes."""
    head = "builtin.module attributes {lancet.world_size = 4 : i64"
    assert head in text
    return text.replace(head, f"{head}, {extra}", 1)


def _body(text: str) -> list[str]:
    """Every line but the module header (where the configuration attributes are)."""
    return text.splitlines()[1:]


def _opt(tool: str, tmp_path: Path, *argv: str) -> str:
    """Run `lancet-opt` or `xdsl-opt` in-process (the tools' own main classes), -o to a file."""
    out = tmp_path / f"{tool}.{len(list(tmp_path.iterdir()))}.mlir"
    main = LancetOptMain if tool == "lancet-opt" else xDSLOptMain
    main(args=[*argv, "-o", str(out)]).run()
    return out.read_text()


@pytest.mark.parametrize("pass_name", sorted(get_all_passes()))
def test_flags_attributes_and_options_give_identical_output(tmp_path: Path, pass_name: str) -> None:
    plain = MOE_W4.read_text()
    attributed = tmp_path / "attributed.mlir"
    attributed.write_text(_with_attrs(plain, ATTRS))
    by_flags = _opt("lancet-opt", tmp_path, str(MOE_W4), *FLAGS, "-p", pass_name)
    assert ATTRS in by_flags.splitlines()[0]  # the flags are in the output
    assert _opt("xdsl-opt", tmp_path, str(attributed), "-p", pass_name) == by_flags
    if pass_name not in COSTING:
        return
    # the same options given to the pass: on the attributed file, and on the plain one
    spec = f"{pass_name}{{{OPTIONS}}}"
    assert _opt("xdsl-opt", tmp_path, str(attributed), "-p", spec) == by_flags
    by_options = _opt("xdsl-opt", tmp_path, str(MOE_W4), "-p", spec)
    assert _body(by_options) == _body(by_flags)
    # and the configuration matters: the default H100 costing gives other times
    if pass_name == "simulate":
        assert _body(_opt("xdsl-opt", tmp_path, str(MOE_W4), "-p", spec.split("{")[0])) != _body(
            by_flags
        )


def test_lancet_opt_output_reruns_identically(tmp_path: Path) -> None:
    out = tmp_path / "out.mlir"
    first = run_tool(["lancet-opt", str(MOE_W4), *FLAGS, "-p", "lancet-schedule", "-o", str(out)])
    assert first.returncode == 0, first.stderr
    again = run_tool(["xdsl-opt", str(out), "-p", "simulate"])
    direct = run_tool(["lancet-opt", str(MOE_W4), *FLAGS, "-p", "lancet-schedule,simulate"])
    assert again.returncode == 0, again.stderr
    assert again.stdout == direct.stdout


# ---- precedence --------------------------------------------------------------------------------
MODULE = """builtin.module attributes {{lancet.world_size = 16 : i64{attrs}}} {{
  func.func @f(%x: tensor<4194304xf32>) -> tensor<4194304xf32> {{
    %a = "test.op"(%x) {{lancet.time_us = 3.0 : f64}} : (tensor<4194304xf32>) -> tensor<4194304xf32>
    %r = comm.all_to_all %a : (tensor<4194304xf32>) -> tensor<4194304xf32>
    func.return %r : tensor<4194304xf32>
  }}
}}
"""


def _module(attrs: str = ""):
    return parse(MODULE.format(attrs=f", {attrs}" if attrs else ""))


def _config(attrs: str = "", **options) -> CostConfig:
    return SimulatePass(**options).cost_config(_module(attrs))


def test_defaults_attributes_and_options() -> None:
    assert _config() == CostConfig()
    assert _config('lancet.device = "a100"') == CostConfig(device="a100")
    assert _config('lancet.device = "a100"', device="v100") == CostConfig(device="v100")
    assert _config('lancet.cluster = "p3dn"', gpus_per_node=4) == CostConfig(
        cluster="p3dn", gpus_per_node=4
    )
    assert _config("lancet.gpus_per_node = 4 : i64", gpus_per_node=2).gpus_per_node == 2
    assert _config("lancet.network_gbps = 25.0 : f64").network_gbps == 25.0
    assert _config('lancet.profile = ["a.json", "b.json"]').profiles == ("a.json", "b.json")
    assert _config('lancet.profile = "a.json"', profile=("c.json",)).profiles == ("c.json",)
    assert _config('lancet.comm_table = "t.csv"').comm_tables == ("t.csv",)


def test_a_cluster_option_replaces_the_modules_hardware() -> None:
    # module h100 + option cluster p3dn: the p3dn's V100s on the p3dn's network
    hw = _config(
        'lancet.device = "h100", lancet.network_gbps = 100.0 : f64', cluster="p3dn"
    ).hardware()
    assert (hw.device.name, hw.cluster, hw.internode.gbps_per_gpu) == ("v100", "p3dn", 12.5)
    # module p3dn + option device h100: H100s on the p3dn's network
    hw = _config('lancet.cluster = "p3dn"', device="h100").hardware()
    assert (hw.device.name, hw.cluster, hw.internode.gbps_per_gpu) == ("h100", "p3dn", 12.5)
    # a device alone keeps its own defaults (v100: the p3dn numbers; h100: DGX H100)
    assert CostConfig(device="v100").hardware().internode.gbps_per_gpu == 12.5
    assert CostConfig(device="h100").hardware().internode.gbps_per_gpu == 400.0
    assert CostConfig(cluster="p4de").hardware().internode.gbps_per_gpu == 50.0


def test_sim_options_from_attributes_and_options() -> None:
    module = _module("lancet.comm_streams = 2 : i64, lancet.overlap_slowdown = 1.5 : f64")
    assert SimulatePass().sim_options(module) == SimOptions(2, 1.5)
    assert SimulatePass(comm_streams=3).sim_options(module) == SimOptions(3, 1.5)
    assert SimulatePass().sim_options(_module()) == SimOptions(1, 1.0)


def test_profile_option_replaces_the_modules_profile(tmp_path: Path) -> None:
    key = "test.op;T<4194304xf32>,|T<4194304xf32>"
    for name, us in (("a.json", 7.0), ("b.json", 9.0)):
        ProfileDB({key: ProfileEntry(us)}, {"device": "h100"}).save(str(tmp_path / name))
    text = MODULE.format(attrs=f', lancet.profile = "{tmp_path / "a.json"}"').replace(
        " {lancet.time_us = 3.0 : f64}", ""
    )
    module = parse(text)
    op = module.body.block.first_op.body.block.first_op
    assert SimulatePass().cost_model(module).op_time_us(op) == 7.0
    assert (
        SimulatePass(profile=(str(tmp_path / "b.json"),)).cost_model(module).op_time_us(op) == 9.0
    )


def test_passes_with_different_options_do_not_leak() -> None:
    alone = to_text(run_pipeline(_module(), "simulate"))
    after_p3dn = to_text(run_pipeline(_module(), "simulate{cluster=p3dn comm-streams=2},simulate"))
    assert after_p3dn == alone
    p3dn = to_text(run_pipeline(_module(), "simulate{cluster=p3dn}"))
    assert to_text(run_pipeline(_module(), "simulate,simulate{cluster=p3dn}")) == p3dn
    assert p3dn != alone
    # the model each pass builds is its own: p3dn all-to-all at 16 ranks vs DGX H100
    ends = [
        float(line.split("lancet.end_us = ")[1].split(" ")[0])
        for text in (p3dn, alone)
        for line in text.splitlines()
        if "comm.all_to_all" in line
    ]
    assert ends == pytest.approx([3.0 + 6730.8864, 3.0 + 224.7152])


# ---- cluster presets ---------------------------------------------------------------------------
def test_all_to_all_on_p3dn_is_network_bound() -> None:
    """16 MiB all-to-all over 16 ranks = 2 nodes of 8. Each GPU sends 8/16 of it off its
    node through its share of the NIC, at 80% efficiency:
    p3dn: 20 us + 8 MiB / (12.5 Gb/s / 8 * 0.8) = 20 + 8388608 / 1250 B/us = 6730.8864 us;
    dgx-h100: 15 us + 8 MiB / (400 Gb/s / 8 * 0.8) = 15 + 8388608 / 40000 = 224.7152 us."""
    size = 16 * 2**20
    p3dn = CostModel.build(CostConfig(cluster="p3dn"))
    h100 = CostModel.build(CostConfig(cluster="dgx-h100"))
    assert p3dn.comm.time_us("all_to_all", size, 16) == pytest.approx(6730.8864)
    assert h100.comm.time_us("all_to_all", size, 16) == pytest.approx(224.7152)
    # network-bound: ~47x the same all-to-all inside one p3dn node
    assert p3dn.comm.time_us("all_to_all", size, 8) < p3dn.comm.time_us("all_to_all", size, 16) / 40
    # the GB200 NVL72 keeps 16 ranks inside its NVLink domain: no network term
    gb = CostModel.build(CostConfig(cluster="gb200-nvl72")).config.hardware()
    assert gb.internode.time_us("all_to_all", size, 16) == 0.0


def test_cluster_presets_are_consistent() -> None:
    assert list(CLUSTERS) == ["p3dn", "p4de", "dgx-a100", "dgx-h100", "dgx-b200", "gb200-nvl72"]
    assert get_cluster("P3DN").network_gbps_per_gpu == 12.5
    assert (get_cluster("p4de").device, get_cluster("p4de").network_gbps_per_gpu) == ("a100", 50.0)
    for cluster in CLUSTERS.values():
        CostConfig(cluster=cluster.name).hardware()  # every preset's device exists


# ---- bad values ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("attrs", "spec", "message"),
    [
        (
            'lancet.device = "nope"',
            "simulate",
            "simulate: lancet.device: unknown device 'nope' (choices: v100, a100, h100",
        ),
        (
            "",
            "lancet-schedule{cluster=foo}",
            "lancet-schedule: option cluster: unknown cluster 'foo' (choices: p3dn, p4de",
        ),
        ("", "simulate{device=k80}", "simulate: option device: unknown device 'k80'"),
        (
            "lancet.cluster = 3 : i64",
            "simulate",
            "simulate: lancet.cluster: expected a string, got 3 : i64",
        ),
        (
            "lancet.gpus_per_node = 0 : i64",
            "simulate",
            "simulate: lancet.gpus_per_node: expected an integer >= 1, got 0 : i64",
        ),
        (
            "lancet.network_gbps = -1.0 : f64",
            "lancet-schedule",
            "lancet-schedule: lancet.network_gbps: expected a finite number > 0",
        ),
        (
            "lancet.comm_streams = 0 : i64",
            "simulate",
            "simulate: lancet.comm_streams: expected an integer >= 1, got 0 : i64",
        ),
        (
            "lancet.profile = 3 : i64",
            "simulate",
            "simulate: lancet.profile: expected a file name or an array of file names",
        ),
        ("", "simulate{network-gbps=0}", "simulate: network-gbps must be > 0, got 0"),
        ("", "simulate{gpus-per-node=0}", "simulate: gpus-per-node must be >= 1, got 0"),
        ("", 'simulate{profile="missing.json"}', "simulate: missing.json: no such file"),
    ],
)
def test_bad_values_name_the_attribute_or_option(attrs: str, spec: str, message: str) -> None:
    with pytest.raises(PassFailedException) as info:
        run_pipeline(_module(attrs), spec)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_world_size_is_one_line_naming_the_attribute(tmp_path: Path) -> None:
    path = tmp_path / "four.mlir"
    path.write_text(
        MODULE.format(attrs="").replace(
            "lancet.world_size = 16 : i64", 'lancet.world_size = "four"'
        )
    )
    run = run_tool(["lancet-opt", str(path), "-p", "lancet-schedule"])
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        # found right after parsing (dialects/checks.py), before any pass runs
        f'lancet-opt: error: {path}:1:1: builtin.module: lancet.world_size: expected an integer >= 1, got "four"'
    ]


def test_bad_flags_are_one_line() -> None:
    run = run_tool(["lancet-opt", str(MOE_W4), "--cluster", "foo"])
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        "lancet-opt: error: --cluster: unknown cluster 'foo' (choices: p3dn, p4de, dgx-a100, "
        "dgx-h100, dgx-b200, gb200-nvl72)"
    ]
    run = run_tool(["lancet-opt", str(MOE_W4), "--network-gbps", "0"])
    assert (
        run.stderr.strip()
        == "lancet-opt: error: --network-gbps: must be a finite number > 0, got 0.0"
    )


def test_python_api_rejects_bad_numbers() -> None:
    with pytest.raises(UserError, match="gpus per node must be an integer >= 1, got 0"):
        CostConfig(gpus_per_node=0).hardware()
    with pytest.raises(UserError, match="unknown cluster 'foo'"):
        CostConfig(cluster="foo").hardware()


# ---- the report says how it was costed -----------------------------------------------------------
def test_report_states_device_cluster_and_the_pass_options(tmp_path: Path) -> None:
    # the report is the simulating pass's: its cost options over the module's attributes
    report = tmp_path / "r.json"
    pipeline = (f"lancet-schedule{{comm-streams=2 gpus-per-node=2}},simulate{{comm-streams=2 "
                f'gpus-per-node=2 annotate=false report="{report}"}}')  # fmt: skip
    run = run_tool(["lancet-opt", str(MOE_W4), "--cluster", "p3dn", "-p", pipeline])
    assert run.returncode == 0, run.stderr
    data = json.loads(report.read_text())
    assert data["num_comm_streams"] == 2
    assert data["costing"] == {
        "pass": "simulate{gpus-per-node=2 comm-streams=2}",  # field order, outputs left out
        "device": "v100",
        "cluster": "p3dn",
        "gpus_per_node": 2,
        "network_gbps_per_gpu": 12.5,
        "internode_latency_us": 20.0,
        "profiles": [],
        "comm_tables": [],
        "world_size": 4,
        "num_comm_streams": 2,
        "overlap_slowdown": 1.0,
    }
    # --report appends `simulate` costed by the module's attributes (the flags), not by an
    # earlier pass's own options (no guess of "the" costing pass)
    run = run_tool(
        [
            "lancet-opt",
            str(MOE_W4),
            "--cluster",
            "p3dn",
            "-p",
            "lancet-schedule{comm-streams=2 gpus-per-node=2}",
            "--report",
            str(report),
        ]
    )
    assert run.returncode == 0, run.stderr
    data = json.loads(report.read_text())
    assert (data["costing"]["pass"], data["costing"]["cluster"], data["costing"]["gpus_per_node"],
            data["num_comm_streams"]) == ("simulate", "p3dn", 8, 1)  # fmt: skip
    run = run_tool(["lancet-opt", str(MOE_W4), "--device", "a100", "--report", str(report)])
    data = json.loads(report.read_text())
    assert (data["costing"]["pass"], data["costing"]["device"], data["costing"]["cluster"]) == (
        "simulate",
        "a100",
        None,
    )


def test_cost_options_is_the_one_mixin_of_costing_passes() -> None:
    costing = sorted(
        name for name, load in get_all_passes().items() if issubclass(load(), CostOptions)
    )
    assert costing == sorted(COSTING)


# ---- --cluster on the other tools ------------------------------------------------------------
def test_lancet_profile_prices_one_collective_on_a_cluster() -> None:
    run = run_tool(
        [
            "lancet-profile",
            "collective",
            "all-to-all",
            "16MiB",
            "--ranks",
            "16",
            "--cluster",
            "p3dn",
        ]
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == (
        "all_to_all of 16777216 bytes over 16 ranks on p3dn: v100, 8 GPUs per node, "
        "12.5 Gb/s per GPU: 6730.886 us"
    )
    run = run_tool(
        [
            "lancet-profile",
            "collective",
            "all_to_all",
            "16MiB",
            "--ranks",
            "16",
            "--cluster",
            "p3dn",
            "--network-gbps",
            "100",
            "--gpus-per-node",
            "4",
        ]
    )
    # 4 nodes of 4: each GPU sends 12/16 of 16 MiB off its node: 20 + 12582912 / 10000
    assert run.stdout.splitlines()[0].endswith("4 GPUs per node, 100 Gb/s per GPU: 1278.291 us")


def test_bench_runs_every_configuration_on_one_cluster() -> None:
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    from run_bench import all_configs

    configs = all_configs(True, cluster="p3dn")
    assert configs
    assert {(c.device, c.cluster) for c in configs} == {("v100", "p3dn")}
    assert all(c.name.endswith("_p3dn") for c in configs)
    assert configs[0].cost_attributes() == {
        "lancet.device": StringAttr("v100"),
        "lancet.cluster": StringAttr("p3dn"),
    }
