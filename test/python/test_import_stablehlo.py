"""import-stablehlo on JAX 0.10.2 output (test/data/stablehlo, see PROVENANCE.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import parse, run_pipeline, run_tool
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Operation
from xdsl.pattern_rewriter import PatternRewriteWalker
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir import attrs
from lancet_mlir.dialects.comm import CollectiveOp
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.graph.rewrite import check_dominance
from lancet_mlir.importers.stablehlo import (
    ConvertCollective,
    graph_block,
    hlo_kind,
    import_stablehlo,
)
from lancet_mlir.tools.errors import UserError

DATA = Path(__file__).resolve().parents[1] / "data" / "stablehlo"
SHARDY = "moe_step.stablehlo.generic.mlir"
GSPMD = "moe_step.gspmd.stablehlo.generic.mlir"
CPU = "moe_step.cpu.scheduled.generic.mlir"
ASYNC = "async_collectives.generic.mlir"
MOE_FILES = (SHARDY, GSPMD, CPU)
HLO_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")

_CACHE: dict[str, ModuleOp] = {}


def load(name: str) -> ModuleOp:
    """A fresh copy of a parsed fixture (each file is parsed once per session)."""
    if name not in _CACHE:
        _CACHE[name] = parse((DATA / name).read_text())
    return _CACHE[name].clone()


def imported(name: str, **options: int) -> ModuleOp:
    module = load(name)
    import_stablehlo(module, **options)
    module.verify()
    return module


def comm_kinds(module: ModuleOp) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op in module.walk():
        if isinstance(op, CollectiveOp):
            counts[op.KIND] = counts.get(op.KIND, 0) + 1
    return counts


def names(block: Block) -> list[str]:
    return [op_display_name(op) for op in block.ops]


def func_named(module: ModuleOp, name: str) -> Operation:
    for op in module.body.block.ops:
        sym = op.properties.get("sym_name")
        if isinstance(sym, StringAttr) and sym.data == name:
            return op
    raise KeyError(name)


# ---- collectives ------------------------------------------------------------------------------
# Counts read off the JAX output: 2 all_to_alls per MoE layer (dispatch, combine) forward and
# backward, pmean of wq/wo/gate grads + the loss, one psum_scatter + all_gather pair. The
# XLA-CPU module fused the three grad all-reduces and the loss all-reduce into one variadic op.
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (SHARDY, {"all_to_all": 4, "allreduce": 4, "reduce_scatter": 1, "allgather": 1}),
        (GSPMD, {"all_to_all": 4, "allreduce": 4, "reduce_scatter": 1, "allgather": 1}),
        (CPU, {"all_to_all": 4, "allreduce": 1, "reduce_scatter": 1, "allgather": 1}),
    ],
)
def test_collective_counts_and_kinds(name: str, expected: dict[str, int]) -> None:
    module = imported(name)
    assert comm_kinds(module) == expected
    leftover = [op for op in module.walk() if hlo_kind(op) in HLO_COLLECTIVES]
    assert leftover == []


@pytest.mark.parametrize("name", MOE_FILES)
def test_group_sizes_and_world_size(name: str) -> None:
    module = imported(name)
    comms = [op for op in module.walk() if isinstance(op, CollectiveOp)]
    assert {op.group_size() for op in comms} == {8}
    assert all(op.groups is not None for op in comms)
    assert module.attributes["lancet.world_size"].value.data == 8


def test_world_size_option_overrides() -> None:
    module = imported(CPU, world_size=16)
    assert module.attributes["lancet.world_size"].value.data == 16


def test_dimensions_and_reductions() -> None:
    module = imported(SHARDY)
    comms = [op for op in graph_block(module).ops if isinstance(op, CollectiveOp)]
    a2a = [op for op in comms if op.KIND == "all_to_all"]
    assert [(op.split_axis.value.data, op.concat_axis.value.data) for op in a2a] == [(0, 0)] * 4
    rs = next(op for op in comms if op.KIND == "reduce_scatter")
    assert rs.axis.value.data == 0
    assert rs.reduction.data.value == "sum"
    assert rs.inputs[0].type.get_shape() == (64, 64)
    assert rs.outputs[0].type.get_shape() == (8, 64)
    ag = next(op for op in comms if op.KIND == "allgather")
    assert ag.axis.value.data == 0
    assert ag.outputs[0].type.get_shape() == (64, 64)
    assert {op.reduction.data.value for op in comms if op.KIND == "allreduce"} == {"sum"}


def test_variadic_all_reduce_and_array_all_to_all_on_cpu_module() -> None:
    module = imported(CPU)
    block = graph_block(module)
    ar = next(op for op in block.ops if isinstance(op, CollectiveOp) and op.KIND == "allreduce")
    shapes = [tuple(v.type.get_shape()) for v in ar.inputs]
    assert shapes == [(64, 8), (64, 64), (64, 64), ()]
    # MHLO's 8-operand array all-to-all -> concat + all_to_all(split 0, concat 0) + split
    ops = list(block.ops)
    for i, op in enumerate(ops):
        if not (isinstance(op, CollectiveOp) and op.KIND == "all_to_all"):
            continue
        concat, split = ops[i - 1], ops[i + 1]
        assert op_display_name(concat) == "comp.concat"
        assert attrs.IMPORT_GLUE in concat.attributes
        assert op_display_name(split) == "comp.split"
        assert attrs.IMPORT_GLUE in split.attributes
        assert op.inputs[0].type.get_shape() == (8, 1, 8, 64)
        assert op.inputs[0].owner is concat
        assert split.operands[0] is op.outputs[0]
        assert len(split.results) == 8
        assert concat.attributes["lancet.time_us"].value.data == 0.0


# ---- order -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", MOE_FILES)
def test_order_of_ops_preserved(name: str) -> None:
    before = names(graph_block(load(name)))
    after_module = imported(name)
    after = [
        op.attributes[attrs.HLO_OP].data if isinstance(op, CollectiveOp) else op_display_name(op)
        for op in graph_block(after_module).ops
        if attrs.IMPORT_GLUE not in op.attributes
    ]
    assert after == before


def test_async_pairs_become_one_op_at_the_start_position() -> None:
    module = imported(ASYNC)
    main = func_named(module, "main")
    block = main.regions[0].blocks.first
    assert names(block) == [
        "stablehlo.dot_general",
        "comm.allreduce",  # stablehlo.async_start (region form) ... async_done
        "stablehlo.tanh",
        "comm.allgather",  # mhlo.async_start @all_gather_computation, async_update, async_done
        "stablehlo.add",
        "comm.allreduce",  # async all_reduce of two tensors returning a tuple
        "stablehlo.multiply",
        "comm.reduce_scatter",
        "comm.all_to_all",
        "stablehlo.tuple",
        "comm.allreduce",  # mhlo.all_reduce with a tuple operand
        "mhlo.fusion",
        "func.return",
    ]
    with pytest.raises(KeyError):
        func_named(module, "all_gather_computation")  # the wrapped computation is gone
    ops = list(block.ops)
    ar, ag, ar2, rs, a2a, ar3 = (ops[i] for i in (1, 3, 5, 7, 8, 10))
    ret, fusion = ops[-1], ops[-2]
    assert ret.operands[2] is ar.outputs[0]  # the done's result is the comm op's result
    assert ar2.inputs[0] is ops[4].results[0]
    assert ar2.inputs[1] is ag.outputs[0]
    assert rs.inputs[0] is ar2.outputs[0]
    assert a2a.inputs[0] is ar2.outputs[1]
    assert fusion.operands[0] is rs.outputs[0]
    assert fusion.operands[2] is ar3.outputs[1]
    assert [op.group_size() for op in (ar, ag, ar2, rs, a2a, ar3)] == [4, 2, 4, 4, 2, 4]
    assert ag.groups.rank_lists == ((0, 1), (2, 3))
    assert ar3.groups is None
    assert [op.reduction.data.value for op in (ar, ar2, rs, ar3)] == ["sum", "max", "prod", "min"]
    assert (a2a.split_axis.value.data, a2a.concat_axis.value.data) == (0, 1)
    assert all("lancet.hlo_async" in op.attributes for op in (ar, ag, ar2))
    assert "lancet.hlo_async" not in rs.attributes


# ---- costs -----------------------------------------------------------------------------------
def test_dot_general_flops_hand_computed() -> None:
    block = graph_block(imported(SHARDY))
    dots = [op for op in block.ops if op_display_name(op) == "stablehlo.dot_general"]
    first = dots[0]  # (32x64) . (64x64) contracting 1 x 0 -> 32x64
    assert first.attributes[attrs.FLOPS].value.data == 2 * 32 * 64 * 64
    assert first.attributes[attrs.BYTES].value.data == (32 * 64 + 64 * 64 + 32 * 64) * 4
    # batched: (1x64x128) . (1x64x64), batch 0, contracting 1 x 1 -> 1x128x64
    batched = next(op for op in dots if op.results[0].type.get_shape() == (1, 128, 64))
    assert batched.attributes[attrs.FLOPS].value.data == 2 * 128 * 64 * 64


def test_fusion_and_free_op_costs() -> None:
    module = imported(ASYNC)
    ops = list(func_named(module, "main").regions[0].blocks.first.ops)
    assert ops[0].attributes[attrs.FLOPS].value.data == 2 * 16 * 8 * 8
    fusion = ops[-2]  # multiply (32) + slice (0) + add (32); reads 4x8, 4x8, 16x8, writes 4x8
    assert fusion.attributes[attrs.FLOPS].value.data == 64
    assert fusion.attributes[attrs.BYTES].value.data == (32 + 32 + 128 + 32) * 4
    tup = ops[9]
    assert tup.attributes[attrs.FLOPS].value.data == 0
    assert tup.attributes[attrs.BYTES].value.data == 0
    assert all(attrs.FLOPS not in op.attributes for op in ops if isinstance(op, CollectiveOp))


def test_cpu_module_kcustom_fusion_counts_its_dot() -> None:
    block = graph_block(imported(CPU))
    first = next(iter(block.ops))  # kCustom fusion around dot (32x64).(64x64)
    assert op_display_name(first) == "mhlo.fusion"
    assert first.attributes[attrs.FLOPS].value.data == 2 * 32 * 64 * 64


# ---- pipelines and errors --------------------------------------------------------------------
@pytest.mark.parametrize("name", MOE_FILES)
def test_import_then_data_parallel_schedule(name: str) -> None:
    module = load(name)
    run_pipeline(module, "import-stablehlo,data-parallel-schedule")
    check_dominance(module)
    assert sum(comm_kinds(module).values()) in (7, 10)


@pytest.mark.parametrize("name", MOE_FILES)
def test_cli_pipeline(name: str) -> None:
    res = run_tool(
        ["lancet-opt", "--allow-unregistered-dialect", str(DATA / name),
         "-p", "import-stablehlo,data-parallel-schedule"]
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("comm.all_to_all") == 4
    assert res.stderr == ""


def test_cli_bad_reduction(tmp_path: Path) -> None:
    bad = (
        (DATA / ASYNC)
        .read_text()
        .replace('"stablehlo.multiply"(%l, %m)', '"stablehlo.xor"(%l, %m)')
    )
    path = tmp_path / "bad.mlir"
    path.write_text(bad)
    res = run_tool(
        ["lancet-opt", "--allow-unregistered-dialect", str(path), "-p", "import-stablehlo"]
    )
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0] == (  # placed at the collective (issue 20 item 3)
        f"lancet-opt: error: {path}:39:5: %13 = stablehlo.reduce_scatter: import-stablehlo: "
        "unsupported reduction 'stablehlo.xor'"
    )


def test_unsupported_reduction_raises_user_error() -> None:
    text = (DATA / ASYNC).read_text().replace('"mhlo.minimum"(%l, %m)', '"mhlo.remainder"(%l, %m)')
    with pytest.raises(UserError, match="mhlo.all_reduce: unsupported reduction 'mhlo.remainder'"):
        import_stablehlo(parse(text))


def test_world_size_pass_option() -> None:
    module = run_pipeline(load(SHARDY), "import-stablehlo{world-size=16}")
    assert module.attributes["lancet.world_size"].value.data == 16
    with pytest.raises(PassFailedException, match="world-size must be >= 1"):
        run_pipeline(load(SHARDY), "import-stablehlo{world-size=0}")


def test_pass_failure_is_a_pass_failed_exception() -> None:
    text = (DATA / ASYNC).read_text().replace('"mhlo.minimum"(%l, %m)', '"mhlo.remainder"(%l, %m)')
    with pytest.raises(
        PassFailedException,
        match="^import-stablehlo: mhlo.all_reduce: unsupported reduction 'mhlo.remainder'$",
    ):
        run_pipeline(parse(text), "import-stablehlo")


def test_collective_pattern_alone_in_a_walker() -> None:
    """The synchronous conversion is an ordinary RewritePattern: alone, it converts every HLO
    collective (also those an async pair wraps, which is why the importer runs the async
    pattern first) and leaves the async wrappers in place."""
    module = load(ASYNC)
    wrapped = sum(1 for op in module.walk() if hlo_kind(op) == "async_start")
    plain = [op for op in module.walk() if hlo_kind(op) in HLO_COLLECTIVES]
    assert wrapped > 0
    assert len(plain) > wrapped
    pattern = ConvertCollective()
    PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(module)
    assert pattern.converted == len(plain)
    assert sum(1 for op in module.walk() if hlo_kind(op) == "async_start") == wrapped
    assert not any(hlo_kind(op) in HLO_COLLECTIVES for op in module.walk())


def _one_collective(op_text: str) -> ModuleOp:
    return parse(
        '"func.func"() <{function_type = (tensor<4xf32>) -> tensor<8xf32>, sym_name = "f"}> ({\n'
        "^bb0(%x: tensor<4xf32>):\n"
        f"  %1 = {op_text} : (tensor<4xf32>) -> tensor<8xf32>\n"
        '  "func.return"(%1) : (tensor<8xf32>) -> ()\n'
        "}) : () -> ()\n"
    )


def test_missing_replica_groups_is_an_error_not_all_ranks() -> None:
    """`replica_groups` is required in StableHLO and MHLO; before the fix a collective without
    it silently became a whole-world collective."""
    bad = _one_collective('"stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64}')
    with pytest.raises(UserError, match="^stablehlo.all_gather: missing replica_groups$"):
        import_stablehlo(bad)
    empty = _one_collective(
        '"stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64, '
        "replica_groups = dense<> : tensor<0x0xi64>}"
    )
    # empty groups still mean all ranks, of a world whose size must be known
    with pytest.raises(UserError, match=r"^stablehlo.all_gather: empty replica_groups \(all "
                       r"ranks\) but the world size is unknown .*world-size=N}$"):  # fmt: skip
        import_stablehlo(empty.clone())
    import_stablehlo(empty, world_size=2)  # the test's 4 -> 8 gather
    (comm,) = [op for op in empty.walk() if isinstance(op, CollectiveOp)]
    assert comm.properties.get("groups") is None


@pytest.mark.parametrize("kind", ["collective_permute", "collective_broadcast"])
def test_collectives_without_a_comm_spelling_are_rejected(kind: str) -> None:
    """Before the fix they stayed in the graph as costed compute, hiding communication."""
    bad = _one_collective(
        f'"stablehlo.{kind}"(%x) {{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}}'
    )
    with pytest.raises(UserError, match=f"^stablehlo.{kind}: unsupported collective$"):
        import_stablehlo(bad)


def test_mismatched_async_pair_names_the_done(tmp_path: Path) -> None:
    """Before the fix the done's uses were rewired to the comm result of another type and
    lancet-opt failed later with func.return's type error, naming neither HLO op."""
    text = (
        '"func.func"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "f"}> ({\n'
        "^bb0(%x: tensor<4xf32>):\n"
        '  %1 = "stablehlo.async_start"(%x) ({\n'
        '    %2 = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64, '
        "replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4xf32>) -> tensor<8xf32>\n"
        '    "stablehlo.return"(%2) : (tensor<8xf32>) -> ()\n'
        "  }) : (tensor<4xf32>) -> !stablehlo.async_bundle\n"
        '  %3 = "stablehlo.async_done"(%1) : (!stablehlo.async_bundle) -> tensor<4xf32>\n'
        '  "func.return"(%3) : (tensor<4xf32>) -> ()\n'
        "}) : () -> ()\n"
    )
    path = tmp_path / "mismatched.mlir"
    path.write_text(text)
    res = run_tool(
        ["lancet-opt", "--allow-unregistered-dialect", str(path), "-p", "import-stablehlo"]
    )
    assert res.returncode == 1
    assert res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        f"lancet-opt: error: {path}:7:3: %3 = stablehlo.async_done: import-stablehlo: returns "
        "(tensor<4xf32>) but the wrapped stablehlo.all_gather computes (tensor<8xf32>)"
    ]


@pytest.mark.parametrize(
    ("op_text", "missing"),
    [
        ('"stablehlo.all_gather"(%x) {G}', "all_gather_dim"),
        ('"stablehlo.all_to_all"(%x) {G, split_dimension = 0 : i64}', "concat_dimension"),
    ],
)
def test_missing_dimension_attributes_are_errors(op_text: str, missing: str) -> None:
    """The dimensions are required HLO attributes; before the fix a missing one read as 0."""
    groups = "replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>"
    bad = _one_collective(op_text.replace("G", groups))
    kind = op_text.split('"')[1]
    with pytest.raises(UserError, match=f"^{kind}: missing {missing}(\n|$)"):
        import_stablehlo(bad)


# ---- session 30's review: fusions are one kernel, sort along a dimension from the end -------
_MUL = ('      %e{k} = "mhlo.multiply"(%e{j}, %p0) : (tensor<4096x4096xf32>, tensor<4096x4096xf32>)'
        " -> tensor<4096x4096xf32>\n")  # fmt: skip


def _fusion_module(op_name: str) -> str:
    body = _MUL.replace("%e{j}", "%p0").format(k=0) + "".join(
        _MUL.format(k=k, j=k - 1) for k in range(1, 10)
    )
    return (
        "func.func @main(%x: tensor<4096x4096xf32>) -> tensor<4096x4096xf32> {\n"
        f'  %f = "{op_name}"(%x) ({{\n    ^bb0(%p0: tensor<4096x4096xf32>):\n{body}'
        '      "mhlo.return"(%e9) : (tensor<4096x4096xf32>) -> ()\n'
        "  }) : (tensor<4096x4096xf32>) -> tensor<4096x4096xf32>\n"
        "  func.return %f : tensor<4096x4096xf32>\n}\n"
    )


def _makespan(text: str, tmp_path: Path) -> float:
    import json

    path = tmp_path / "f.mlir"
    path.write_text(text)
    proc = run_tool(["lancet-opt", "--allow-unregistered-dialect", str(path), "-p",
                     "import-stablehlo", "--device", "h100", "--report", "-", "-o", "/dev/null"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["makespan_us"]


def test_a_fusion_is_costed_as_one_kernel_not_op_by_op(tmp_path: Path) -> None:
    # the same body in an op the cost model knows nothing special of (annotated alike by
    # the import: the body's FLOPs, the fusion's own bytes) costs the same: one kernel
    fused = _makespan(_fusion_module("mhlo.fusion"), tmp_path)
    opaque = _makespan(_fusion_module("mhlo.opaque_kernel"), tmp_path)
    assert fused == opaque
    # op by op (the body in sequence at top level) is 10 kernels, each reading and writing
    # 64 MB: slower than one kernel that reads 64 MB and writes 64 MB
    flat = (
        "func.func @main(%p0: tensor<4096x4096xf32>) -> tensor<4096x4096xf32> {\n"
        + (_MUL.replace("%e{j}", "%p0").format(k=0) + "".join(
            _MUL.format(k=k, j=k - 1) for k in range(1, 10)))
        + "  func.return %e9 : tensor<4096x4096xf32>\n}\n"
    )  # fmt: skip
    assert _makespan(flat, tmp_path) > 4 * fused


def _sort(dimension: int) -> str:
    return f"""func.func @main(%x: tensor<4x1024xf32>) -> tensor<4x1024xf32> {{
      %s = "stablehlo.sort"(%x) ({{
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %c = "stablehlo.compare"(%a, %b) {{comparison_direction = #stablehlo<comparison_direction LT>}} : (tensor<f32>, tensor<f32>) -> tensor<i1>
        "stablehlo.return"(%c) : (tensor<i1>) -> ()
      }}) {{dimension = {dimension} : i64}} : (tensor<4x1024xf32>) -> tensor<4x1024xf32>
      func.return %s : tensor<4x1024xf32>
    }}"""


def test_sort_along_a_dimension_counted_from_the_end() -> None:
    module = parse(_sort(-1))
    import_stablehlo(module)
    sort = next(op for op in module.walk() if op_display_name(op) == "stablehlo.sort")
    # one compare per application, 4 x 1024 applications x log2(1024) rounds
    assert sort.attributes[attrs.FLOPS].value.data == 4 * 1024 * 10


def test_sort_along_a_dimension_out_of_range_is_one_user_error() -> None:
    # it was "list index out of range", with no op
    with pytest.raises(UserError, match=r"^stablehlo.sort: dimension -3 is out of range for "
                       r"tensor<4x1024xf32>$"):  # fmt: skip
        import_stablehlo(parse(_sort(-3)))


@pytest.mark.parametrize(
    ("config", "flops"),
    [
        # the config's contracting dimension: (64 x 32) . (32 x 16) -> 2 * 64 * 16 * 32
        ('{\\"gemm_backend_config\\":{\\"dot_dimension_numbers\\":{\\"lhs_contracting_dimensions\\":[\\"1\\"]}}}',
         2 * 64 * 16 * 32),
        ("", 2 * 64 * 16 * 32),  # no config: the lhs's last dimension
    ],
)  # fmt: skip
def test_a_cublas_gemm_custom_call_costs_its_dot(config: str, flops: int) -> None:
    # it was a data move (0 FLOPs): an XLA GPU module's GEMMs were nearly free
    module = parse(f"""func.func @main(%x: tensor<64x32xbf16>, %w: tensor<32x16xbf16>) -> tensor<64x16xbf16> {{
      %y = "mhlo.custom_call"(%x, %w) {{call_target_name = "__cublas$gemm", backend_config = "{config}"}} : (tensor<64x32xbf16>, tensor<32x16xbf16>) -> tensor<64x16xbf16>
      func.return %y : tensor<64x16xbf16>
    }}""")  # fmt: skip
    import_stablehlo(module)
    gemm = next(op for op in module.walk() if op_display_name(op) == "mhlo.custom_call")
    assert gemm.attributes[attrs.FLOPS].value.data == flops


_COMPOSITE = """module attributes {mhlo.num_partitions = 4 : i32} {
func.func @main(%x: tensor<256x256xf32>, %w: tensor<256x256xf32>) -> tensor<256x256xf32> {
  CALL
  func.return %y : tensor<256x256xf32>
}
func.func private @impl(%x: tensor<256x256xf32>, %w: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %y = "stablehlo.dot_general"(%x, %w) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
  %s = "stablehlo.all_reduce"(%y) ({
    ^bb1(%a: tensor<f32>, %b: tensor<f32>):
      %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%c) : (tensor<f32>) -> ()
    }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<256x256xf32>) -> tensor<256x256xf32>
  func.return %s : tensor<256x256xf32>
}
}
"""


def test_a_composite_costs_its_decomposition_once_where_it_stands(tmp_path: Path) -> None:
    # it was costed as an element-wise op, and its decomposition again as an uncalled function
    composite = _COMPOSITE.replace("CALL", '%y = "stablehlo.composite"(%x, %w) {name = "m.mm", '
                                   "decomposition = @impl} : (tensor<256x256xf32>, "
                                   "tensor<256x256xf32>) -> tensor<256x256xf32>")  # fmt: skip
    call = _COMPOSITE.replace("CALL", "%y = func.call @impl(%x, %w) : (tensor<256x256xf32>, "
                              "tensor<256x256xf32>) -> tensor<256x256xf32>")  # fmt: skip
    assert _makespan(composite, tmp_path) == _makespan(call, tmp_path) > 0
