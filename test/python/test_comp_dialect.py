"""The `comp` dialect: generated ops, syntax round-trips, verifier messages, helpers."""

from __future__ import annotations

from io import StringIO

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import (
    Builtin,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    bf16,
    f32,
    i8,
    i32,
    i64,
)
from xdsl.dialects.func import Func
from xdsl.dialects.test import Test, TestOp
from xdsl.irdl.constraints import VerificationContext
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.transforms.dead_code_elimination import DeadCodeElimination
from xdsl.utils.exceptions import VerifyException

from lancet_mlir.dialects.comp import (
    AdamUpdateOp,
    Comp,
    CompOp,
    ConcatOp,
    CrossEntropyOp,
    MatmulOp,
    MoeGateOp,
    build_op,
    kernel_of,
    kernel_params,
    op_class,
    op_flops_bytes,
    tensor_sig,
    tensor_type,
)
from lancet_mlir.dialects.kernels import KERNELS, KernelError, TensorSig, get_kernel


def make_ctx() -> Context:
    ctx = Context()
    for dialect in (Builtin, Func, Test, Comp):
        ctx.load_dialect(dialect)
    return ctx


def parse(text: str) -> ModuleOp:
    return Parser(make_ctx(), text).parse_module()


def generic(op: ModuleOp) -> str:
    buf = StringIO()
    Printer(stream=buf, print_generic_format=True).print_op(op)
    return buf.getvalue()


def values(*types: TensorType) -> list[TestOp]:
    """Ops producing one value of each type (stand-ins for graph inputs)."""
    return [TestOp(result_types=[t]) for t in types]


def t(shape: tuple[int, ...], dtype: str = "f32") -> TensorType:
    return tensor_type(TensorSig(shape, dtype))


STEP = """
func.func @step(%x: tensor<64x128xf32>, %w: tensor<256x128xf32>, %ids: tensor<64xi32>, %logits: tensor<8x4xf32>) -> tensor<f32> {
  %y = comp.matmul %x, %w {transpose_b = true, lancet.role = "fwd"} : (tensor<64x128xf32>, tensor<256x128xf32>) -> tensor<64x256xf32>
  %loss = comp.cross_entropy %y, %ids : (tensor<64x256xf32>, tensor<64xi32>) -> tensor<f32>
  %c, %d = comp.moe_gate %logits {gate = "top2", capacity = 3 : i64} : (tensor<8x4xf32>) -> (tensor<8x4x3xf32>, tensor<8x4x3xf32>)
  %z = comp.zeros {shape = array<i64: 4, 8>, dtype = "bf16"} : () -> tensor<4x8xbf16>
  %r = comp.reshape %x {shape = array<i64: 2, 32, 128>} : (tensor<64x128xf32>) -> tensor<2x32x128xf32>
  %p, %m, %v = comp.adam_update %w, %w, %w, %w {lr = 1.0e-04, step = 3 : i64} : (tensor<256x128xf32>, tensor<256x128xf32>, tensor<256x128xf32>, tensor<256x128xf32>) -> (tensor<256x128xf32>, tensor<256x128xf32>, tensor<256x128xf32>)
  %cat = comp.concat %x, %x, %x {axis = 1 : i64} : (tensor<64x128xf32>, tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x384xf32>
  func.return %loss : tensor<f32>
}
"""


def test_one_op_class_per_kernel() -> None:
    names = {op.name for op in Comp.operations}
    assert names == {f"comp.{k}" for k in KERNELS}
    cls = op_class("batch_matmul_dx")
    assert cls.__name__ == "BatchMatmulDxOp"
    assert cls.name == "comp.batch_matmul_dx"
    assert cls.KERNEL is get_kernel("batch_matmul_dx")
    assert issubclass(cls, CompOp)
    with pytest.raises(KeyError, match="unknown kernel 'nope'"):
        op_class("nope")


def test_ops_have_typed_properties_and_named_operands() -> None:
    """Every parameter is a property constrained by its kind, and a fixed-arity kernel's
    inputs are named operands (`op.dy`), in the registry's order."""
    constraint = {
        bool: IntegerAttr(1, 1),
        int: IntegerAttr(3, i64),
        float: FloatAttr(2.0, 64),
        tuple: DenseArrayBase.from_list(i64, [1, 2]),
        str: StringAttr("top2"),
    }
    for kernel in KERNELS.values():
        op_def = op_class(kernel.name).get_irdl_definition()
        for name, spec in kernel.params.items():
            prop = op_def.properties[name].constr
            for kind, attr in constraint.items():
                ok = True
                try:
                    prop.verify(attr, VerificationContext())
                except VerifyException:
                    ok = False
                assert ok == (kind is spec.kind), (kernel.name, name, kind)
        names = [name for name, _ in op_def.operands]
        if kernel.num_inputs is None:
            assert names == ["inputs"]
        else:
            assert tuple(names) == kernel.input_names
            assert len(names) == kernel.num_inputs
    module = parse(STEP)
    ops = list(list(module.ops)[0].body.block.ops)
    matmul, ce, gate, zeros, _, adam, cat = ops[:7]
    assert isinstance(matmul, MatmulOp)
    assert isinstance(gate, MoeGateOp)
    assert isinstance(adam, AdamUpdateOp)
    assert isinstance(cat, ConcatOp)
    assert matmul.a is matmul.operands[0]
    assert matmul.b is matmul.operands[1]
    assert matmul.transpose_b == IntegerAttr(1, 1)
    assert matmul.transpose_a is None
    assert isinstance(ce, CrossEntropyOp)
    assert ce.labels is ce.operands[1]
    assert gate.logits is gate.operands[0]
    assert gate.gate == StringAttr("top2")
    assert [adam.param, adam.grad, adam.m, adam.v] == list(adam.operands)
    assert list(cat.inputs) == list(cat.operands)
    assert len(cat.inputs) == 3
    assert list(matmul.inputs) == list(matmul.operands)
    assert not list(zeros.inputs)


def test_parameter_widths_are_exact() -> None:
    """The typed properties take i64 ints, f64 floats, i1 bools and array<i64> only; the
    verifier says so in the kernel's words before IRDL's constraint would."""
    x = '%x = "test.op"() : () -> tensor<6x4xf32>\n'
    assert (
        "comp.softmax: parameter 'axis' expects an int (e.g. 3 : i64), got 1 : i32"
        in _verify_error(
            x + "%y = comp.softmax %x {axis = 1 : i32} : (tensor<6x4xf32>) -> tensor<6x4xf32>"
        )
    )
    assert (
        "comp.scale: parameter 'alpha' expects a float (e.g. 1.000000e-05 : f64), got "
        "2.000000e+00 : f32"
        in _verify_error(
            x + "%y = comp.scale %x {alpha = 2.0 : f32} : (tensor<6x4xf32>) -> tensor<6x4xf32>"
        )
    )
    assert "comp.reshape: parameter 'shape' expects an integer array" in _verify_error(
        x + "%y = comp.reshape %x {shape = array<i32: 24>} : (tensor<6x4xf32>) -> tensor<24xf32>"
    )


def test_custom_syntax_round_trip() -> None:
    module = parse(STEP)
    module.verify()
    text = str(module)
    assert (
        '%y = comp.matmul %x, %w {transpose_b = true, lancet.role = "fwd"} : '
        "(tensor<64x128xf32>, tensor<256x128xf32>) -> tensor<64x256xf32>" in text
    )
    assert (
        '%z = comp.zeros {shape = array<i64: 4, 8>, dtype = "bf16"} : () -> tensor<4x8xbf16>'
        in text
    )
    assert "{lr = 1.000000e-04 : f64, step = 3 : i64}" in text
    again = parse(text)
    again.verify()
    assert again.is_structurally_equivalent(module)
    assert str(again) == text


def test_generic_syntax_round_trip() -> None:
    module = parse(STEP)
    gen = generic(module)
    # the generic form shows the parameters as inherent properties
    assert '"comp.moe_gate"(%logits) <{gate = "top2", capacity = 3 : i64}>' in gen
    reparsed = parse(gen)
    reparsed.verify()
    assert reparsed.is_structurally_equivalent(module)
    assert str(reparsed) == str(module)


def test_parameters_are_properties_not_attributes() -> None:
    """Parameters are inherent: the parsers file them as properties (the generic form's
    discardable dictionary too, as MLIR does), and an op built with a parameter among its
    discardable attributes is rejected with the spelling to use."""
    x = '%x = "test.op"() : () -> tensor<4x8xf32>\n'
    for text in (
        x + '%y = "comp.scale"(%x) {alpha = 2.0 : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>',
        x + "%y = comp.scale %x <{alpha = 2.0 : f64}> : (tensor<4x8xf32>) -> tensor<4x8xf32>",
        x + "%y = comp.scale %x {alpha = 2.0 : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>",
    ):
        module = parse(text)
        module.verify()
        op = list(module.ops)[1]
        assert set(op.properties) == {"alpha"}
        assert not op.attributes
        assert "comp.scale %x {alpha = 2.000000e+00 : f64}" in str(module)
    (arg,) = values(t((4, 8)))
    wrong = op_class("scale")([arg], [t((4, 8))], {"alpha": FloatAttr(2.0, 64)})
    with pytest.raises(VerifyException, match=r"comp.scale: parameter 'alpha' must be a property: "
                       r"write <\{alpha = 2.000000e\+00 : f64\}>"):  # fmt: skip
        wrong.verify()


def _verify_error(body: str) -> str:
    module = parse(body)
    with pytest.raises(VerifyException) as info:
        module.verify()
    return str(info.value)


def test_verifier_messages() -> None:
    x = '%x = "test.op"() : () -> tensor<64x128xf32>\n'
    assert (
        "comp.matmul: result #0 has type tensor<64x64xf32>, expected tensor<64x256xf32>"
        in _verify_error(
            x + '%w = "test.op"() : () -> tensor<128x256xf32>\n'
            "%y = comp.matmul %x, %w : (tensor<64x128xf32>, tensor<128x256xf32>) -> tensor<64x64xf32>"
        )
    )
    assert "comp.matmul: contraction dims differ: 128 vs 64" in _verify_error(
        x
        + "%y = comp.matmul %x, %x : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>"
    )
    assert "comp.gelu: unknown parameter 'alpha' (allowed: none)" in _verify_error(
        x + "%y = comp.gelu %x {alpha = 1.0} : (tensor<64x128xf32>) -> tensor<64x128xf32>"
    )
    assert (
        "comp.softmax: parameter 'axis' expects an int (e.g. 3 : i64), got 1.000000e+00 : f64"
        in _verify_error(
            x + "%y = comp.softmax %x {axis = 1.0} : (tensor<64x128xf32>) -> tensor<64x128xf32>"
        )
    )
    assert "comp.split: missing required parameter 'num'" in _verify_error(
        x
        + "%a, %b = comp.split %x : (tensor<64x128xf32>) -> (tensor<32x128xf32>, tensor<32x128xf32>)"
    )
    assert "comp.split: expected 2 results, got 1" in _verify_error(
        x + "%a = comp.split %x {num = 2 : i64} : (tensor<64x128xf32>) -> tensor<32x128xf32>"
    )
    assert "comp.gelu: expected 1 inputs, got 2" in _verify_error(
        x + "%y = comp.gelu %x, %x : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>"
    )
    assert "comp.gelu: unsupported element type i8" in _verify_error(
        '%x = "test.op"() : () -> tensor<4xi8>\n%y = comp.gelu %x : (tensor<4xi8>) -> tensor<4xi8>'
    )
    # a non-tensor operand is rejected by the operand constraint, in both syntaxes
    non_tensor = '%x = "test.op"() : () -> f32\n%y = "comp.gelu"(%x) : (f32) -> f32'
    assert "f32 should be of base attribute tensor" in _verify_error(non_tensor)
    custom = '%x = "test.op"() : () -> f32\n%y = comp.gelu %x : (f32) -> f32'
    assert "f32 should be of base attribute tensor" in _verify_error(custom)


def test_annotations_are_ignored_by_the_kernel() -> None:
    module = parse(
        '%x = "test.op"() : () -> tensor<4xf32>\n'
        '%y = comp.gelu %x {lancet.time_us = 3.5, lancet.role = "fwd", mhlo.sharding = "x"}'
        " : (tensor<4xf32>) -> tensor<4xf32>"
    )
    module.verify()
    op = list(module.ops)[1]
    assert kernel_params(op) == {}


def test_build_op_infers_results_and_writes_params() -> None:
    x, w = values(t((64, 128)), t((256, 128)))
    op = build_op(
        "matmul", [x, w], {"transpose_b": True, "transpose_a": False}, {"lancet.role": "fwd"}
    )
    assert isinstance(op, op_class("matmul"))
    assert [r.type for r in op.results] == [t((64, 256))]
    # parameters are properties (defaults omitted); annotations are attributes converted
    # from Python values
    assert set(op.properties) == {"transpose_b"}
    assert set(op.attributes) == {"lancet.role"}
    assert op.properties["transpose_b"] == IntegerAttr.from_bool(True)
    assert op.transpose_b == IntegerAttr.from_bool(True)  # the generated accessor
    assert op.attributes["lancet.role"] == StringAttr("fwd")
    op.verify()
    assert kernel_params(op) == {"transpose_a": False, "transpose_b": True}
    assert kernel_of(op) is get_kernel("matmul")
    assert kernel_of(x) is None

    adam = build_op("adam_update", [w.res[0]] * 4, {"lr": 1e-4, "step": 3})
    assert adam.properties["lr"] == FloatAttr(1e-4, 64)
    assert adam.properties["step"] == IntegerAttr(3, i64)
    assert len(adam.results) == 3
    assert kernel_params(adam)["beta2"] == 0.999

    zeros = build_op("zeros", [], {"shape": (4, 8), "dtype": "bf16"})
    assert zeros.properties["shape"] == DenseArrayBase.from_list(i64, [4, 8])
    assert zeros.results[0].type == TensorType(bf16, [4, 8])
    cat = build_op("concat", [x, x, x], {"axis": 1})
    assert cat.results[0].type == t((64, 384))
    with pytest.raises(KernelError, match="contraction dims differ: 128 vs 256"):
        build_op("matmul", [x, w])
    with pytest.raises(KernelError, match="unknown parameter 'bogus'"):
        build_op("gelu", [x], {"bogus": 1})


def test_build_op_memo_gives_what_a_fresh_build_gives() -> None:
    # build_op memoises result types and properties by kernel, operand types and the given
    # parameters (with their Python types): a second build is the same op, owns its
    # properties, and a parameter the check refuses is refused however equal it compares
    x, w = values(t((8, 4)), t((4, 6)))
    first = build_op("concat", [x, x], {"axis": 1})
    second = build_op("concat", [x, x], {"axis": 1})
    assert first.results[0].type == second.results[0].type == t((8, 8))
    assert first.properties == second.properties == {"axis": IntegerAttr(1, i64)}
    assert first.properties is not second.properties
    second.properties["axis"] = IntegerAttr(0, i64)
    assert build_op("concat", [x, x], {"axis": 1}).properties["axis"] == IntegerAttr(1, i64)
    with pytest.raises(KernelError, match="parameter 'axis' expects an int, got True"):
        build_op("concat", [x, x], {"axis": True})  # True == 1, but not an int
    assert build_op("concat", [x, x], {"axis": 0}).results[0].type == t((16, 4))
    for _ in range(2):  # an error is not remembered as a result
        with pytest.raises(KernelError, match="contraction dims differ"):
            build_op("matmul", [w, w])
    assert build_op("reduce_sum", [x], {"axes": [0, 1]}).results[0].type == TensorType(f32, [])


def test_built_ops_print_and_parse_for_every_kernel_shape() -> None:
    x, w, ids = values(t((8, 4)), t((4, 6)), t((8,), "i32"))
    module = ModuleOp([x, w, ids])
    block = module.body.block
    ops = [
        build_op("matmul", [x, w]),
        build_op("embedding", [w, ids]),
        build_op("moe_gate", [x], {"capacity": 2}),
        build_op("reduce_sum", [x], {"axes": (0, 1)}),
        build_op("split", [x], {"axis": 1, "num": 2}),
        build_op("fill", [], {"shape": (), "dtype": "i64", "value": 2.0}),
    ]
    for op in ops:
        block.add_op(op)
    module.verify()
    assert ops[3].results[0].type == TensorType(f32, [])
    text = str(module)
    assert "comp.reduce_sum %0 {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>" in text
    assert parse(text).is_structurally_equivalent(module)
    assert parse(generic(module)).is_structurally_equivalent(module)


def test_tensor_sig_and_costs() -> None:
    assert tensor_sig(TensorType(bf16, [2, 3])) == TensorSig((2, 3), "bf16")
    assert tensor_sig(TensorType(i32, [])) == TensorSig((), "i32")
    assert tensor_type(TensorSig((5,), "i1")) == TensorType(IntegerAttr.from_bool(True).type, [5])
    with pytest.raises(KernelError, match="expected a tensor type, got f32"):
        tensor_sig(f32)
    with pytest.raises(KernelError, match="dynamic dimensions"):
        tensor_sig(TensorType(f32, [-1, 4]))
    with pytest.raises(KernelError, match="unsupported element type i8"):
        tensor_sig(TensorType(i8, [4]))
    x, w = values(t((64, 128)), t((128, 256)))
    op = build_op("matmul", [x, w])
    assert op_flops_bytes(op) == (2 * 64 * 128 * 256, 4 * (64 * 128 + 128 * 256 + 64 * 256))
    assert op_flops_bytes(x) is None
    with pytest.raises(KernelError, match="test.op is not a comp op"):
        kernel_params(x)


def test_dce_keeps_unused_comp_ops() -> None:
    module = parse(
        "func.func @f(%x: tensor<4xf32>) {\n"
        "  %y = comp.gelu %x : (tensor<4xf32>) -> tensor<4xf32>\n"
        "  func.return\n}"
    )
    DeadCodeElimination().apply(make_ctx(), module)
    assert "comp.gelu" in str(module)


def test_generated_op_classes_are_up_to_date() -> None:
    """comp_ops.py is what `python -m lancet_mlir.dialects.comp_gen` writes today, and its
    classes are importable by name from the dialect module (comp.MatmulOp)."""
    from lancet_mlir.dialects import comp, comp_gen, comp_ops

    assert comp_gen.OPS_FILE.read_text(encoding="utf-8") == comp_gen.render()
    assert comp_gen.main(["--check"]) == 0
    assert comp.MatmulOp is comp_ops.MatmulOp is op_class("matmul")
    assert comp.MatmulOp.name == "comp.matmul"
    assert [cls.KERNEL.name for cls in comp_ops.OP_CLASSES] == list(KERNELS)
    assert "class MoeGateOp(CompOp):" in comp_gen.OPS_FILE.read_text(encoding="utf-8")


def test_verification_is_memoised_by_what_it_checks(monkeypatch) -> None:
    from xdsl.ir import Block, ErasedSSAValue, Region

    from lancet_mlir.dialects import comp_base

    monkeypatch.setattr(comp_base, "_VERIFIED", set())
    calls: list[str] = []
    real = comp_base.check_annotations

    def counted(kernel, attributes) -> None:
        calls.append(kernel.name)
        real(kernel, attributes)

    x = TestOp(result_types=[TensorType(f32, [64, 128])])
    w = TestOp(result_types=[TensorType(f32, [128, 256])])
    first = build_op("matmul", [x, w], None, {"lancet.role": "fwd"})
    twin = build_op("matmul", [x, w], None, {"lancet.role": "fwd"})
    other = build_op("matmul", [x, w], None, {"lancet.role": "dx"})
    end = TestOp()
    Block([x, w, first, twin, other, end])
    # a full verification checks the annotations twice (before IRDL's checks and in verify_)
    monkeypatch.setattr(comp_base, "check_annotations", counted)
    first.verify()
    twin.verify()  # equal types, properties and attributes: not checked again
    other.verify()  # another attribute value: checked
    assert calls == ["matmul"] * 4
    # what depends on where the op stands is still checked on a hit: an erased operand
    twin.operands = [x.results[0], ErasedSSAValue(w.results[0].type, w.results[0])]
    with pytest.raises(ValueError, match="Erased SSA value is used by the operation"):
        twin.verify()
    # ... and a twin as the last op of a block that needs a terminator, as xDSL says it
    last = build_op("matmul", [x, w], None, {"lancet.role": "fwd"})
    TestOp(regions=[Region(Block([last]))])
    with pytest.raises(VerifyException) as hit:
        last.verify()
    comp_base._VERIFIED.clear()
    with pytest.raises(VerifyException) as full:
        last.verify()
    assert str(hit.value) == str(full.value)
    assert "comp.matmul terminates block in single-block region but is not a terminator" in str(
        hit.value
    )
    assert calls == ["matmul"] * 5  # the full one failed after the first annotation check
    calls.clear()
    # a failure is never remembered: a wrong result type fails every time
    bad = type(first)([x, w], [TensorType(f32, [64, 64])])
    for _ in range(2):
        with pytest.raises(VerifyException, match="result #0 has type"):
            bad.verify()
    assert calls == ["matmul"] * 4
