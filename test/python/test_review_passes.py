"""Regression tests from the adversarial review of the IR, graph and pass layers.

Each test pins one bug that was found and fixed (the docstring says what broke), plus the
hash-seed determinism of every registered pass and property tests of the two bucketing
passes on random DAGs whose all-reduces have several fusion kinds.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers import REPO, make_context, parse, run_pipeline, run_tool, to_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_schedule_properties import _assert_topological, _body, _op_id
from xdsl.dialects.builtin import IntegerAttr, ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir.dialects.comm import AllToAllVOp, CollectiveOp
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import fuse_collectives
from lancet_mlir.passes import get_all_passes
from lancet_mlir.passes.comm_bucket_fusion import CommBucketFusionPass
from lancet_mlir.passes.ddp_bucket_schedule import DdpBucketSchedulePass
from lancet_mlir.passes.lancet_schedule import LancetSchedulePass
from lancet_mlir.passes.moe_partition import MoePartitionPass
from lancet_mlir.passes.tutel_pipeline import TutelPipelinePass

T = "tensor<16xf32>"


def _func_ops(module: ModuleOp) -> list[Operation]:
    return _body(module)[:-1]


def _names(module: ModuleOp) -> list[str]:
    """Each body op as `name(result hints)`, e.g. `comm.allreduce(b,c)`."""
    return [
        f"{op.name}({','.join(r.name_hint or '' for r in op.results)})" for op in _func_ops(module)
    ]


# ---- bucketing across fusion kinds must not create a cycle ---------------------------------
# Two open buckets of different kinds (sum and max): c depends on a (sum) and d on b (max).
# Before the fix both passes fused {a, d} and {b, c}: each fused op waited for the other and
# the re-sort failed with "dataflow graph has a cycle".
CROSSED = f"""
builtin.module attributes {{lancet.world_size = 2 : i64}} {{
  func.func @f(%x: {T}) -> ({T}, {T}) {{
    %a_in = "test.op"(%x) : ({T}) -> {T}
    %a = comm.allreduce %a_in : ({T}) -> {T}
    %b_in = "test.op"(%x) : ({T}) -> {T}
    %b = comm.allreduce %b_in reduce max : ({T}) -> {T}
    %c_in = "test.op"(%a) : ({T}) -> {T}
    %c = comm.allreduce %c_in reduce max : ({T}) -> {T}
    %d_in = "test.op"(%b) : ({T}) -> {T}
    %d = comm.allreduce %d_in : ({T}) -> {T}
    func.return %c, %d : {T}, {T}
  }}
}}
"""

# c (max) depends on a, which is in the open sum bucket: that bucket closes alone; b and c
# share the max bucket; d starts a new sum bucket.
CROSSED_EXPECTED = [
    "test.op(a_in)",
    "comm.allreduce(a)",
    "test.op(b_in)",
    "test.op(c_in)",
    "comm.allreduce(b,c)",
    "test.op(d_in)",
    "comm.allreduce(d)",
]


@pytest.mark.parametrize("spec", ["comm-bucket-fusion", "ddp-bucket-schedule"])
def test_buckets_of_different_kinds_do_not_form_a_cycle(spec: str) -> None:
    module = run_pipeline(parse(CROSSED), spec)
    assert _names(module) == CROSSED_EXPECTED
    _assert_topological(module)


# ---- ops with memory effects keep their order --------------------------------------------
MEMORY = """
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @f(%m: memref<4xf32>, %t: tensor<4xf32>, %i: index) -> (f32, f32) {
    %r = comm.allreduce %t : (tensor<4xf32>) -> tensor<4xf32>
    %v = tensor.extract %r[%i] : tensor<4xf32>
    memref.store %v, %m[%i] : memref<4xf32>
    %l = memref.load %m[%i] : memref<4xf32>
    %l2 = memref.load %m[%i] : memref<4xf32>
    func.return %l, %l2 : f32, f32
  }
}
"""


def test_graph_orders_memory_effects() -> None:
    """Store -> both loads (a write before reads); the two loads stay unordered."""
    graph = DataflowGraph.from_ops(_func_ops(parse(MEMORY)))
    assert [op.name for op in graph.ops] == [
        "comm.allreduce",
        "tensor.extract",
        "memref.store",
        "memref.load",
        "memref.load",
    ]
    assert graph.preds == [[], [0], [1], [2], [2]]


def test_fifo_keeps_a_load_after_the_store_it_reads() -> None:
    """Before the fix the FIFO order launched the load before the store (it does not wait
    for the all-reduce), so it read the old value."""
    module = run_pipeline(parse(MEMORY), "data-parallel-schedule")
    assert [op.name for op in _func_ops(module)] == [
        "comm.allreduce",
        "tensor.extract",
        "memref.store",
        "memref.load",
        "memref.load",
    ]


def test_effects_nested_in_regions_count_for_the_op() -> None:
    """An scf.for whose body stores orders against a later load of the same memory."""
    text = """
    func.func @f(%m: memref<4xf32>, %t: tensor<4xf32>, %i: index, %n: index) -> f32 {
      %r = comm.allreduce %t : (tensor<4xf32>) -> tensor<4xf32>
      %v = tensor.extract %r[%i] : tensor<4xf32>
      scf.for %k = %i to %n step %n {
        memref.store %v, %m[%k] : memref<4xf32>
      }
      %l = memref.load %m[%i] : memref<4xf32>
      func.return %l : f32
    }
    """
    module = run_pipeline(parse(text), "data-parallel-schedule")
    assert [op.name for op in _func_ops(module)] == [
        "comm.allreduce",
        "tensor.extract",
        "scf.for",
        "memref.load",
    ]


# ---- pass options --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        # `true` used to pass as the integer 1 (bool is an int subclass)
        (
            "comm-bucket-fusion{bucket-bytes=true}",
            "comm-bucket-fusion: option bucket-bytes expects an integer, got true",
        ),
        (
            "ddp-bucket-schedule{bucket-bytes=true}",
            "ddp-bucket-schedule: option bucket-bytes expects an integer, got true",
        ),
        (
            "tutel-pipeline{degree=true}",
            "tutel-pipeline: option degree expects an integer, got true",
        ),
        (
            "import-stablehlo{world-size=true}",
            "import-stablehlo: option world-size expects an integer, got true",
        ),
        (
            "simulate{comm-streams=false}",
            "simulate: option comm-streams expects an integer, got false",
        ),
        (
            "lancet-schedule{overlap-slowdown=true}",
            "lancet-schedule: option overlap-slowdown expects a number, got true",
        ),
        # wrong types used to read "Incompatible types: given ('abc',), expected <class 'int'>"
        ("tutel-pipeline{degree=2.0}", "tutel-pipeline: option degree expects an integer, got 2.0"),
        (
            "lancet-schedule{comm-streams=1,2}",
            "lancet-schedule: option comm-streams expects an integer, got 1,2",
        ),
        (
            "lancet-schedule{overlap-slowdown=inf}",
            "lancet-schedule: option overlap-slowdown expects a number, got 'inf'",
        ),
        (
            "comm-bucket-fusion{kinds=allreduce,7}",
            "comm-bucket-fusion: option kinds expects a comma-separated list of strings, got 'allreduce',7",
        ),
        # unknown options name the pass and list the real ones
        (
            "ddp-bucket-schedule{bucket=8}",
            "ddp-bucket-schedule: unknown option bucket; options: bucket-bytes",
        ),
        ("program-order{x=1}", "program-order: unknown option x (the pass takes no options)"),
    ],
)
def test_bad_option_types_name_the_pass_and_option(spec: str, message: str) -> None:
    with pytest.raises(PassFailedException) as info:
        PassPipeline.parse_spec(get_all_passes(), spec)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("pass_", "message"),
    [
        (
            CommBucketFusionPass(bucket_bytes=True),
            "comm-bucket-fusion: bucket-bytes must be an integer, got true",
        ),
        (
            DdpBucketSchedulePass(bucket_bytes=-3),
            "ddp-bucket-schedule: bucket-bytes must be >= 1, got -3",
        ),
        (TutelPipelinePass(degree=0), "tutel-pipeline: degree must be >= 1, got 0"),
        # options that another option makes meaningless are refused, not ignored
        (
            MoePartitionPass(extend="all"),
            "moe-partition: option extend=all applies to axis=token only (axis=capacity splits "
            "the expert range of each all-to-all pair); drop it",
        ),
        (
            MoePartitionPass(parts=2, max_parts=4),
            "moe-partition: option max-parts=4 applies without parts (parts=2 forces the "
            "count); drop one",
        ),
        (
            LancetSchedulePass(partition="none", jobs=2),
            "lancet-schedule: option jobs=2 applies to partition=auto only (partition=none "
            "schedules one module); drop it",
        ),
        (
            LancetSchedulePass(partition="dp", jobs=3, extend_min_idle=0.5),
            "lancet-schedule: options jobs=3 and extend-min-idle=0.5 apply to partition=auto "
            "only (partition=dp schedules one module); drop it",
        ),
    ],
)
def test_bad_option_values_from_python(pass_, message: str) -> None:
    with pytest.raises(PassFailedException) as info:
        pass_.apply(make_context(), parse(CROSSED))
    assert str(info.value) == message


def test_good_options_still_parse() -> None:
    pipeline = PassPipeline.parse_spec(
        get_all_passes(),
        "comm-bucket-fusion{bucket_bytes=64 kinds=allreduce,allgather},"
        "lancet-schedule{comm-streams=2 overlap-slowdown=2},simulate{overlap-slowdown=1.5}",
    )
    fusion, schedule, simulate = pipeline.passes
    assert (fusion.bucket_bytes, fusion.kinds) == (64, ("allreduce", "allgather"))
    assert (schedule.comm_streams, schedule.overlap_slowdown) == (2, 2)
    assert simulate.overlap_slowdown == 1.5


def test_exponent_literals_are_numbers() -> None:
    # xDSL's pipeline lexer reads `1e1` (no dot) as a bare word; a number option takes it
    pipeline = PassPipeline.parse_spec(
        get_all_passes(),
        "lancet-schedule{max-seconds=1e1 overlap-slowdown=15e-1},simulate{overlap-slowdown=2E0}",
    )
    schedule, simulate = pipeline.passes
    assert (schedule.max_seconds, schedule.overlap_slowdown) == (10.0, 1.5)
    assert simulate.overlap_slowdown == 2.0
    # an integer option does not, and a word that only starts like one is still refused
    for spec, message in (
        ("lancet-schedule{jobs=1e1}", "lancet-schedule: option jobs expects an integer, got '1e1'"),
        (
            "lancet-schedule{max-seconds=1e1x}",
            "lancet-schedule: option max-seconds expects a number, got '1e1x'",
        ),
    ):
        with pytest.raises(PassFailedException) as info:
            PassPipeline.parse_spec(get_all_passes(), spec)
        assert str(info.value) == message


def test_cli_bad_option_type_is_one_line(tmp_path) -> None:
    src = tmp_path / "g.mlir"
    src.write_text(CROSSED)
    res = run_tool(["lancet-opt", str(src), "-p", "tutel-pipeline{degree=true}"])
    assert res.returncode == 1
    assert (
        res.stderr
        == "lancet-opt: error: tutel-pipeline: option degree expects an integer, got true\n"
    )


# ---- simulate: functions of the same name in different modules -----------------------------
def test_simulate_totals_are_per_function_op_not_per_name() -> None:
    """Two nested modules each with an @f: both used to get the sum of both (8 us)."""
    text = """
    builtin.module {
      builtin.module @a {
        func.func @f() {
          "test.op"() {lancet.time_us = 3.0 : f64} : () -> ()
          func.return
        }
      }
      builtin.module @b {
        func.func @f() {
          "test.op"() {lancet.time_us = 5.0 : f64} : () -> ()
          func.return
        }
      }
    }
    """
    module = run_pipeline(parse(text), "simulate")
    funcs = [op for op in module.walk() if op.name == "func.func"]
    assert [f.attributes["lancet.makespan_us"].value.data for f in funcs] == [3.0, 5.0]


# ---- fuse_collectives keeps all_to_allv's data operands before its counts ------------------
def test_fusing_all_to_allv_keeps_data_before_counts() -> None:
    text = """
    builtin.module attributes {lancet.world_size = 2 : i64} {
      func.func @f(%d1: tensor<2x3xf32>, %c1: tensor<2xi64>, %d2: tensor<2x5xf32>, %c2: tensor<2xi64>)
          -> (tensor<2x3xf32>, tensor<2xi64>, tensor<2x5xf32>, tensor<2xi64>) {
        %o1, %n1 = comm.all_to_allv %d1, %c1 : (tensor<2x3xf32>, tensor<2xi64>) -> (tensor<2x3xf32>, tensor<2xi64>)
        %o2, %n2 = comm.all_to_allv %d2, %c2 : (tensor<2x5xf32>, tensor<2xi64>) -> (tensor<2x5xf32>, tensor<2xi64>)
        func.return %o1, %n1, %o2, %n2 : tensor<2x3xf32>, tensor<2xi64>, tensor<2x5xf32>, tensor<2xi64>
      }
    }
    """
    module = parse(text)
    fused = fuse_collectives(_func_ops(module))
    assert isinstance(fused, AllToAllVOp)
    module.verify()
    assert [v.name_hint for v in fused.operands] == ["d1", "d2", "c1", "c2"]
    ret = _body(module)[-1]
    # the function still returns (data 1, counts 1, data 2, counts 2)
    assert [fused.results.index(v) for v in ret.operands] == [0, 2, 1, 3]


# ---- determinism of every pass across hash seeds --------------------------------------------
_SEED_SCRIPT = """
import sys
sys.path.insert(0, {helpers!r})
from helpers import parse, run_pipeline, to_text
from xdsl.parser import Parser
from helpers import make_context
for spec, path in {jobs!r}:
    text = open(path).read()
    if spec.startswith("import-stablehlo"):
        module = Parser(make_context(), text, path).parse_module()
    else:
        module = parse(text)
    print("=====", spec)
    print(to_text(run_pipeline(module, spec)))
"""


def test_every_pass_is_deterministic_across_hash_seeds(tmp_path) -> None:
    model = tmp_path / "model.mlir"
    res = run_tool(
        [
            "lancet-model",
            "gpt2-moe",
            "--layers",
            "2",
            "--hidden",
            "64",
            "--heads",
            "4",
            "--seq",
            "16",
            "--batch",
            "2",
            "--world-size",
            "2",
            "--experts-per-rank",
            "2",
            "--vocab",
            "128",
            "-o",
            str(model),
        ]
    )
    assert res.returncode == 0, res.stderr
    hlo = REPO / "test/data/stablehlo/moe_step.cpu.scheduled.generic.mlir"
    specs = sorted(get_all_passes())
    jobs = [(s, str(hlo if s == "import-stablehlo" else model)) for s in specs]
    jobs.append(
        ("comm-bucket-fusion{bucket-bytes=2048},ddp-bucket-schedule{bucket-bytes=4096}", str(model))
    )
    script = tmp_path / "run.py"
    script.write_text(_SEED_SCRIPT.format(helpers=str(REPO / "test/python"), jobs=jobs))
    outs = []
    for seed in ("0", "4242"):
        res = run_tool(["python", str(script)], env={"PYTHONHASHSEED": seed})
        assert res.returncode == 0, res.stderr
        outs.append(res.stdout)
    assert outs[0] == outs[1]
    assert outs[0].count("=====") == len(jobs)
    assert "lancet.part = 1" in outs[0]  # tutel-pipeline did split something


# ---- property tests: bucketing on random DAGs with several fusion kinds ---------------------
@st.composite
def mixed_dags(draw: st.DrawFn) -> str:
    """A random DAG of `test.op`s and all-reduces of two reductions and two groups, so that
    several buckets are open at once. Ops carry a unique `id`; compute ops may carry a role.

    Operands come mostly from the last few values, so chains that cross fusion kinds (the
    pattern that used to make a cycle) are common even in small examples.
    """
    n = draw(st.integers(min_value=1, max_value=36))
    roles = draw(st.booleans())  # without any role, every all-reduce is a gradient for DDP
    lines = [
        f"builtin.module attributes {{lancet.world_size = 4 : i64}} {{\nfunc.func @f(%arg: {T}) -> {T} {{"
    ]
    values = ["%arg"]
    for i in range(n):
        recent = values[-5:]
        if draw(st.booleans()) and len(values) > 1:
            src = draw(st.sampled_from(values[1:][-5:]))
            how = draw(
                st.sampled_from(["", " reduce max", "", " reduce max", " group <[[0, 1], [2, 3]]>"])
            )
            lines.append(f"  %v{i} = comm.allreduce {src}{how} {{id = {i}}} : ({T}) -> {T}")
        else:
            k = draw(st.integers(min_value=0, max_value=3))
            srcs = draw(st.lists(st.sampled_from(recent), min_size=k, max_size=k))
            role = (
                f', lancet.role = "{draw(st.sampled_from(["dw", "dw", "fwd"]))}"' if roles else ""
            )
            types = ", ".join([T] * len(srcs))
            lines.append(
                f'  %v{i} = "test.op"({", ".join(srcs)}) {{id = {i}{role}}} : ({types}) -> {T}'
            )
        values.append(f"%v{i}")
    lines.append(f"  func.return {values[-1]} : {T}\n}}\n}}")
    return "\n".join(lines)


def _source(value) -> object:
    """Where a value comes from, invariant under fusion: a compute op, an argument, or the
    all-reduce (by its properties) of some source."""
    owner = value.owner
    if not isinstance(owner, Operation):
        return ("arg", value.index)
    if isinstance(owner, CollectiveOp):
        k = list(owner.results).index(value)
        props = tuple(sorted((key, str(v)) for key, v in owner.properties.items()))
        return ("allreduce", props, _source(owner.operands[k]))
    return ("op", _op_id(owner))


def _signature(module: ModuleOp) -> dict[int, list[object]]:
    return {
        _op_id(op): [_source(v) for v in op.operands]
        for op in _func_ops(module)
        if op.name == "test.op"
    }


def _check_bucketing(text: str, spec: str) -> None:
    before = parse(text)
    after = run_pipeline(parse(text), spec)
    _assert_topological(after)
    assert _signature(after) == _signature(before)
    comms_before = sum(len(op.operands) for op in _func_ops(before) if isinstance(op, CollectiveOp))
    fused = [op for op in _func_ops(after) if isinstance(op, CollectiveOp)]
    assert sum(len(op.operands) for op in fused) == comms_before
    graph = DataflowGraph.from_ops(_func_ops(after))
    reach = graph.descendants()
    assert all(not (reach[i] >> i) & 1 for i in range(len(graph)))


@settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(mixed_dags(), st.sampled_from([128, 256, 10_000]))
def test_ddp_bucket_schedule_keeps_dataflow_and_order(text: str, bucket: int) -> None:
    _check_bucketing(text, f"ddp-bucket-schedule{{bucket-bytes={bucket}}}")


@settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(mixed_dags(), st.sampled_from([128, 256, 10_000]))
def test_comm_bucket_fusion_keeps_dataflow_with_several_kinds(text: str, bucket: int) -> None:
    _check_bucketing(text, f"comm-bucket-fusion{{bucket-bytes={bucket}}}")


# ---- import-stablehlo: the world spans every rank the replica groups name -------------------
def test_import_world_size_spans_the_replica_groups() -> None:
    """Groups [[0, 1], [2, 3]] mean 4 ranks; the importer used to say 2 (the group size),
    which made the module claim a world smaller than its own groups."""
    text = textwrap.dedent("""
    "func.func"() <{function_type = (tensor<8xf32>) -> tensor<8xf32>, sym_name = "main"}> ({
    ^bb0(%x: tensor<8xf32>):
      %1 = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}> ({
      ^bb1(%a: tensor<f32>, %b: tensor<f32>):
        %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%c) : (tensor<f32>) -> ()
      }) : (tensor<8xf32>) -> tensor<8xf32>
      "func.return"(%1) : (tensor<8xf32>) -> ()
    }) : () -> ()
    """)
    module = Parser(make_context(), text, "h.mlir").parse_module()
    run_pipeline(module, "import-stablehlo")
    world = module.attributes["lancet.world_size"]
    assert isinstance(world, IntegerAttr)
    assert world.value.data == 4
    with pytest.raises(PassFailedException, match="group rank 3 is outside the world of 2 ranks"):
        PassPipeline.parse_spec(get_all_passes(), "import-stablehlo{world-size=2}").apply(
            make_context(), Parser(make_context(), text, "h.mlir").parse_module()
        )


def test_report_json_of_cross_kind_buckets(tmp_path) -> None:
    """End to end: the crossed example now fuses and simulates (it used to exit 1)."""
    src = tmp_path / "g.mlir"
    src.write_text(CROSSED)
    report = tmp_path / "r.json"
    res = run_tool(
        [
            "lancet-opt",
            str(src),
            "-p",
            "comm-bucket-fusion,lancet-schedule",
            "--report",
            str(report),
        ]
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(report.read_text())["num_collectives"] == 3
    assert "comm.allreduce %b_in, %c_in reduce max" in res.stdout
    assert to_text(parse(res.stdout)).count("comm.allreduce") == 3
