"""Baseline schedules: program-order, ddp-bucket-schedule, tutel-pipeline.

Values are checked with the numpy runtime (`compare_modules`, 2 simulated ranks): every
baseline must compute what the generated model computes.
"""

from __future__ import annotations

import dataclasses

import pytest
from helpers import body_ops, kernel_name, parse, run_pipeline
from helpers import part_of as part
from xdsl.context import Context
from xdsl.utils.exceptions import PassFailedException

from lancet_mlir.dialects.comm import AllReduceOp, AllToAllOp
from lancet_mlir.graph.rewrite import ScheduleError, check_dominance
from lancet_mlir.models.gpt2_moe import PRESETS, GPT2MoEConfig, build_gpt2_moe
from lancet_mlir.passes import get_all_passes
from lancet_mlir.passes.ddp_bucket_schedule import DEFAULT_BUCKET_BYTES, DdpBucketSchedulePass
from lancet_mlir.passes.program_order import ProgramOrderPass
from lancet_mlir.passes.tutel_pipeline import TutelPipelinePass
from lancet_mlir.runtime import compare_modules

# layer 0 dense, layer 1 MoE; T = 8 tokens, E = 4 experts: switch capacity 2
SMALL = GPT2MoEConfig(layers=2, hidden=8, heads=2, seq=4, batch=2, world_size=2,
                      experts_per_rank=2, vocab=11)  # fmt: skip
# 16 tokens: switch capacity 4, so degrees 2 and 4 divide it
WIDE = dataclasses.replace(SMALL, batch=4)


def apply(pass_, cfg: GPT2MoEConfig):
    module = build_gpt2_moe(cfg)
    pass_.apply(Context(), module)
    module.verify()
    check_dominance(module)
    return module


def test_passes_are_registered() -> None:
    table = get_all_passes()
    assert table["program-order"]() is ProgramOrderPass
    assert table["ddp-bucket-schedule"]() is DdpBucketSchedulePass
    assert table["tutel-pipeline"]() is TutelPipelinePass


# ---- program-order -------------------------------------------------------------------------


def test_program_order_is_identity() -> None:
    module = build_gpt2_moe(SMALL)
    before = str(module)
    ProgramOrderPass().apply(Context(), module)
    assert str(module) == before


def test_program_order_rejects_use_before_def() -> None:
    module = parse(
        "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        '  %u = "test.op"(%g) : (tensor<4xf32>) -> tensor<4xf32>\n'
        '  %g = "test.op"(%x) : (tensor<4xf32>) -> tensor<4xf32>\n'
        "  func.return %u : tensor<4xf32>\n}\n"
    )
    with pytest.raises(ScheduleError, match="before its definition"):
        ProgramOrderPass().apply(Context(), module)


# ---- ddp-bucket-schedule -------------------------------------------------------------------


def allreduce_buckets(module) -> list[tuple[list[str], int]]:
    """(gradient names, bytes) of every all-reduce, in block order."""
    out = []
    for op in body_ops(module):
        if isinstance(op, AllReduceOp):
            names = [r.name_hint.removesuffix("_gavg") for r in op.results]
            out.append((names, op.payload_bytes()))
    return out


def test_ddp_buckets_by_hand() -> None:
    # f32 gradient bytes in readiness order (backward order of their producers):
    # lnf_g 32, lnf_b 32, l1_wg 8*4*4=128, l1_ln2_g 32, l1_ln2_b 32, l1_bo 32, l1_wo 256,
    # l1_bqkv 96, l1_wqkv 768 -> 1408 >= 1000 closes; l1_ln1_g 32, l1_ln1_b 32, l0_b2 32,
    # l0_w2 32*8*4=1024 -> 1120; l0_b1 128, l0_w1 1024 -> 1152; l0_ln2_g 32, l0_ln2_b 32,
    # l0_bo 32, l0_wo 256, l0_bqkv 96, l0_wqkv 768 -> 1216; the rest at the end: l0_ln1_g 32,
    # l0_ln1_b 32, wpe 4*8*4=128, wte 11*8*4=352 -> 544.
    module = apply(DdpBucketSchedulePass(bucket_bytes=1000), SMALL)
    assert allreduce_buckets(module) == [
        (["lnf_g", "lnf_b", "l1_wg", "l1_ln2_g", "l1_ln2_b", "l1_bo", "l1_wo", "l1_bqkv",
          "l1_wqkv"], 1408),
        (["l1_ln1_g", "l1_ln1_b", "l0_b2", "l0_w2"], 1120),
        (["l0_b1", "l0_w1"], 1152),
        (["l0_ln2_g", "l0_ln2_b", "l0_bo", "l0_wo", "l0_bqkv", "l0_wqkv"], 1216),
        (["l0_ln1_g", "l0_ln1_b", "wpe", "wte"], 544),
    ]  # fmt: skip


def test_ddp_bucket_launches_after_its_last_gradient() -> None:
    module = apply(DdpBucketSchedulePass(bucket_bytes=1000), SMALL)
    for op in body_ops(module):
        if isinstance(op, AllReduceOp):
            # the last operand is the last gradient to become ready; its producer comes
            # right before the bucket
            assert op.prev_op is op.operands[-1].owner
            assert op.attributes["lancet.role"].data == "dw"


def test_ddp_default_bucket_holds_the_whole_small_model() -> None:
    module = apply(DdpBucketSchedulePass(), SMALL)
    buckets = allreduce_buckets(module)
    assert len(buckets) == 1
    assert len(buckets[0][0]) == 25
    ar = next(op for op in body_ops(module) if isinstance(op, AllReduceOp))
    assert ar.prev_op.results[0].name_hint == "dwte"  # the last gradient of the backward


def test_ddp_buckets_on_a_paper_config() -> None:
    cfg = PRESETS["gpt2_moe_nl12_m768_nh16_sl512_b16"]
    module = build_gpt2_moe(cfg)
    DdpBucketSchedulePass().apply(Context(), module)
    check_dominance(module)
    ars = [op for op in body_ops(module) if isinstance(op, AllReduceOp)]
    assert sum(len(op.inputs) for op in ars) == 130  # every dense gradient, once
    for k, op in enumerate(ars):
        sizes = [4 * v.type.element_count() for v in op.inputs]
        # DDP closes a bucket with the gradient that fills it to >= 25 MiB
        assert sum(sizes[:-1]) < DEFAULT_BUCKET_BYTES
        assert sum(sizes) >= DEFAULT_BUCKET_BYTES or k == len(ars) - 1


@pytest.mark.parametrize("bucket", [1000, DEFAULT_BUCKET_BYTES])
def test_ddp_computes_the_same_values(bucket: int) -> None:
    result = compare_modules(
        build_gpt2_moe(SMALL), apply(DdpBucketSchedulePass(bucket_bytes=bucket), SMALL), ranks=2
    )
    assert result.ok
    assert result.max_abs_err == 0.0


def test_ddp_rejects_bad_bucket_size() -> None:
    with pytest.raises(PassFailedException, match="bucket-bytes must be >= 1"):
        DdpBucketSchedulePass(bucket_bytes=0).apply(Context(), build_gpt2_moe(SMALL))


def test_ddp_is_deterministic_through_the_pipeline_syntax() -> None:
    a = run_pipeline(build_gpt2_moe(SMALL), "ddp-bucket-schedule{bucket-bytes=700}")
    b = run_pipeline(build_gpt2_moe(SMALL), "ddp-bucket-schedule{bucket-bytes=700}")
    assert str(a) == str(b)


# ---- tutel-pipeline ------------------------------------------------------------------------


@pytest.mark.parametrize("degree", [2, 4])
def test_tutel_partitions_each_expert_block(degree: int) -> None:
    module = apply(TutelPipelinePass(degree=degree), WIDE)
    ops = body_ops(module)
    parts = [part(op) for op in ops if part(op) is not None]
    # per chunk: forward a2a, bmm, gelu, bmm, a2a (5) + backward a2a, bmm_dx, bmm_dw,
    # gelu_dx, bmm_dx, bmm_dw, a2a (7)
    assert sorted(parts) == sorted(list(range(degree)) * 12)
    a2a = [op for op in ops if isinstance(op, AllToAllOp)]
    assert len(a2a) == 4 * degree
    assert all(part(op) is not None for op in a2a)
    # [E=4, C=4, M=8] chunks: [4, 4/degree, 8] -> [El=2, G*C/degree = 8/degree, 8]
    assert a2a[0].operands[0].type.get_shape() == (4, 4 // degree, 8)
    assert a2a[0].results[0].type.get_shape() == (2, 8 // degree, 8)
    # no unpartitioned expert op is left; attention and the dense FFN are untouched
    experts = [op for op in ops if any(v.name_hint in ("l1_we1", "l1_we2") for v in op.operands)
               and kernel_name(op) != "adam_update"]  # fmt: skip
    # per chunk: 2 forward batch_matmuls + 2 batch_matmul_dx read the expert weights
    assert len(experts) == 4 * degree
    assert all(part(op) is not None for op in experts)
    assert sum(kernel_name(op) == "batch_matmul" and part(op) is None for op in ops) == 4
    assert sum(kernel_name(op) in ("gelu", "gelu_dx") and part(op) is None for op in ops) == 2
    # expert weight gradients: degree partials summed by degree - 1 adds each
    dw_adds = [op for op in ops if kernel_name(op) == "add" and part(op) is None and
               op.attributes["lancet.role"].data == "dw"]  # fmt: skip
    assert len(dw_adds) == 2 * (degree - 1) + 1  # + the tied embedding gradient's add


def test_tutel_interleaves_chunks() -> None:
    # forward block, degree 4: a2a(0) a2a(1) | compute(0) a2a_back(0) | a2a(2) compute(1) ...
    module = apply(TutelPipelinePass(degree=4), WIDE)
    seq = []
    for op in body_ops(module):
        if part(op) is None or op.attributes["lancet.role"].data != "fwd":
            continue
        if isinstance(op, AllToAllOp):
            seq.append(("in" if op.concat_axis.value.data == 1 else "out", part(op)))
        elif kernel_name(op) == "gelu":
            seq.append(("compute", part(op)))
    assert seq == [
        ("in", 0), ("in", 1), ("compute", 0), ("out", 0),
        ("in", 2), ("compute", 1), ("out", 1),
        ("in", 3), ("compute", 2), ("out", 2),
        ("compute", 3), ("out", 3),
    ]  # fmt: skip


@pytest.mark.parametrize(("gate", "degree"), [("switch", 2), ("switch", 4), ("top2", 4)])
def test_tutel_computes_the_same_values(gate: str, degree: int) -> None:
    cfg = dataclasses.replace(WIDE, gate=gate)
    result = compare_modules(
        build_gpt2_moe(cfg), apply(TutelPipelinePass(degree=degree), cfg), ranks=2
    )
    assert result.ok, result.failures()


def test_tutel_degree_one_is_identity() -> None:
    module = build_gpt2_moe(WIDE)
    before = str(module)
    TutelPipelinePass(degree=1).apply(Context(), module)
    assert str(module) == before


def test_tutel_rejects_indivisible_capacity() -> None:
    module = build_gpt2_moe(WIDE)
    before = str(module)
    with pytest.raises(PassFailedException, match=(
        "tutel-pipeline: capacity 4 of the expert block entered by 'l1_expert_in' is not "
        "divisible by degree 3"
    )):  # fmt: skip
        TutelPipelinePass(degree=3).apply(Context(), module)
    assert str(module) == before  # checked before any rewrite
    with pytest.raises(PassFailedException, match="degree must be >= 1"):
        TutelPipelinePass(degree=0).apply(Context(), module)


MERGE = """
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @f(%d: tensor<4x4x8xf32>, %w: tensor<2x8x8xf32>) -> (tensor<4x4x8xf32>, tensor<2x8x8xf32>) {
    %x = comm.all_to_all %d concat 1 : (tensor<4x4x8xf32>) -> tensor<2x8x8xf32>
    %h = comp.batch_matmul %x, %w : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %y = comp.gelu %h : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %r = comm.all_to_all %y split 1 : (tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
    func.return %r, %h : tensor<4x4x8xf32>, tensor<2x8x8xf32>
  }
}
"""


def test_tutel_reassembles_values_used_outside_the_block() -> None:
    text = MERGE.replace("split 1 : (tensor<4x4x8xf32>)", "split 1 : (tensor<2x8x8xf32>)")
    original = parse(text)
    module = parse(text)
    TutelPipelinePass(degree=2).apply(Context(), module)
    module.verify()
    check_dominance(module)
    names = [kernel_name(op) for op in body_ops(module)]
    # %h (rows ordered rank, slot) is rebuilt from its chunks: reshape, concat, reshape
    assert names.count("reshape") == 3
    assert names.count("concat") == 2
    result = compare_modules(original, module, ranks=2)
    assert result.ok
    assert result.max_abs_err == 0.0


def test_tutel_leaves_other_all_to_alls_alone() -> None:
    # an all-to-all pair around an op without a row rule (softmax over the split axis 1)
    text = MERGE.replace("comp.gelu %h", "comp.softmax %h {axis = 1 : i64}").replace(
        "split 1 : (tensor<4x4x8xf32>)", "split 1 : (tensor<2x8x8xf32>)"
    )
    module = parse(text)
    before = str(module)
    TutelPipelinePass(degree=2).apply(Context(), module)
    assert str(module) == before


def test_tutel_on_the_largest_paper_config() -> None:
    cfg = PRESETS["gpt2_moe_nl24_m1024_nh16_sl512_b24"]  # 12 MoE layers, capacity 384
    module = build_gpt2_moe(cfg)
    TutelPipelinePass(degree=8).apply(Context(), module)
    check_dominance(module)
    ops = body_ops(module)
    assert sum(part(op) is not None for op in ops) == 12 * 12 * 8
    assert sum(isinstance(op, AllToAllOp) for op in ops) == 12 * 4 * 8
