"""The base of the `comp` dialect: tensor types <-> signatures, parameters <-> properties,
and `CompOp`, the base class of every generated `comp.<kernel>` op class (`comp_ops.py`).

Kernel parameters are inherent properties, one optional IRDL property per parameter. The
generic form shows them as a property dictionary; the custom syntax prints them in one
dictionary with the annotations, parameters first (and also reads `<{...}>`):

```mlir
%y = "comp.matmul"(%a, %b) <{transpose_b = true}> {lancet.role = "fwd"} : (tensor<64x128xf32>, tensor<256x128xf32>) -> tensor<64x256xf32>
%y = comp.matmul %a, %b {transpose_b = true, lancet.role = "fwd"} : (tensor<64x128xf32>, tensor<256x128xf32>) -> tensor<64x256xf32>
```

Parameter encoding: int -> `IntegerAttr` i64 (`3 : i64`), float -> `FloatAttr` f64
(`1.000000e-05 : f64`), bool -> `IntegerAttr` i1 (`true` / `false`), tuple of ints ->
`array<i64: ...>`, string -> `StringAttr`. Parameters left out take their registry default.
Discardable attributes are annotations and must carry a dialect prefix (`lancet.role`,
`lancet.time_us`, ...): the kernel ignores them.

The verifier runs the kernel's shape rule on the operand types and checks the result types,
parameter names and kinds. Ops are deliberately not `Pure`: `dce` must not delete compute
from a training graph whose results are consumed by later passes or the runtime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, ClassVar, Self

from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseArrayBase,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    Signedness,
    StringAttr,
    TensorType,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, ErasedSSAValue, Operation, SSAValue
from xdsl.irdl import IRDLOperation, var_result_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import NoTerminator
from xdsl.utils.exceptions import VerifyException

from lancet_mlir.dialects.kernels import DType, Kernel, KernelError, ParamSpec, TensorSig
from lancet_mlir.support.numbering import AttrNumbers

# ---------------------------------------------------------------------------------------
# Types <-> signatures
# ---------------------------------------------------------------------------------------

_FLOAT_DTYPES: dict[type[Attribute], DType] = {
    Float16Type: "f16",
    BFloat16Type: "bf16",
    Float32Type: "f32",
    Float64Type: "f64",
}
_ELEMENT_TYPES: dict[DType, Attribute] = {
    "f16": f16,
    "bf16": bf16,
    "f32": f32,
    "f64": f64,
    "i32": i32,
    "i64": i64,
    "i1": i1,
}


def dtype_of_element(element: Attribute) -> DType:
    """The registry dtype of an MLIR element type; KernelError if it has none."""
    dtype = _FLOAT_DTYPES.get(type(element))
    if dtype is not None:
        return dtype
    if (
        isinstance(element, IntegerType)
        and element.signedness.data == Signedness.SIGNLESS
        and element.width.data in (1, 32, 64)
    ):
        return f"i{element.width.data}"
    raise KernelError(f"unsupported element type {element}")


def element_type(dtype: DType) -> Attribute:
    """The MLIR element type of a registry dtype."""
    try:
        return _ELEMENT_TYPES[dtype]
    except KeyError:
        raise KernelError(f"unknown dtype '{dtype}'") from None


@lru_cache(maxsize=8192)  # types are hashable and recur a lot in big graphs
def tensor_sig(t: Attribute) -> TensorSig:
    """The TensorSig of a static `TensorType`; KernelError for anything else."""
    if not isinstance(t, TensorType):
        raise KernelError(f"expected a tensor type, got {t}")
    shape = t.get_shape()
    if any(d < 0 for d in shape):
        raise KernelError(f"dynamic dimensions are not supported: {t}")
    return TensorSig(tuple(shape), dtype_of_element(t.get_element_type()))


@lru_cache(maxsize=8192)  # attributes are immutable: partitioners build many equal types
def tensor_type(sig: TensorSig) -> TensorType:
    """The `TensorType` of a TensorSig."""
    return TensorType(element_type(sig.dtype), sig.shape)


# ---------------------------------------------------------------------------------------
# Parameters <-> attributes
# ---------------------------------------------------------------------------------------

_KIND_SYNTAX = {
    int: "an int (e.g. 3 : i64)",
    float: "a float (e.g. 1.000000e-05 : f64)",
    bool: "a bool (true or false)",
    tuple: "an integer array (e.g. array<i64: 1, 2>)",
    str: 'a string (e.g. "top2")',
}


def _attr_to_value(spec: ParamSpec, attr: Attribute) -> Any:
    """The Python value of a parameter attribute, or None when its kind is wrong (exactly
    the attributes the op class's typed property accepts: i1, i64, f64, array<i64>)."""
    if spec.kind is bool:
        if isinstance(attr, IntegerAttr) and attr.type == i1:
            return bool(attr.value.data)
    elif spec.kind is int:
        if isinstance(attr, IntegerAttr) and attr.type == i64:
            return int(attr.value.data)
    elif spec.kind is float:
        if isinstance(attr, FloatAttr) and attr.type == f64:
            return float(attr.value.data)
    elif spec.kind is tuple:
        if isinstance(attr, DenseArrayBase) and attr.elt_type == i64:
            return tuple(int(v) for v in attr.get_values())
    elif isinstance(attr, StringAttr):
        return attr.data
    return None


def param_attr(spec: ParamSpec, value: Any) -> Attribute:
    """The attribute that encodes parameter `value` of kind `spec.kind`."""
    return _param_attr(spec.kind, tuple(value) if spec.kind is tuple else value)


@lru_cache(maxsize=8192)  # attributes are immutable; the same parameters recur a lot
def _param_attr(kind: type, value: Any) -> Attribute:
    if kind is bool:
        return IntegerAttr(int(bool(value)), i1)
    if kind is int:
        return IntegerAttr(int(value), i64)
    if kind is float:
        return FloatAttr(float(value), f64)
    if kind is tuple:
        return DenseArrayBase.from_list(i64, [int(v) for v in value])
    return StringAttr(str(value))


def is_annotation(attr_name: str) -> bool:
    """True for attribute names the kernel ignores (dialect-prefixed, e.g. `lancet.role`)."""
    return "." in attr_name


def given_params(kernel: Kernel, properties: Mapping[str, Attribute]) -> dict[str, Any]:
    """The parameters written on an op (its properties), as Python values (no defaults)."""
    given: dict[str, Any] = {}
    for name, attr in properties.items():
        spec = kernel.params.get(name)
        if spec is None:
            allowed = ", ".join(kernel.params) or "none"
            raise KernelError(f"unknown parameter '{name}' (allowed: {allowed})")
        value = _attr_to_value(spec, attr)
        if value is None:
            raise KernelError(f"parameter '{name}' expects {_KIND_SYNTAX[spec.kind]}, got {attr}")
        given[name] = value
    return given


def check_annotations(kernel: Kernel, attributes: Mapping[str, Attribute]) -> None:
    """KernelError for a discardable attribute that is not a `dialect.`-prefixed annotation:
    kernel parameters are inherent properties (`<{transpose_b = true}>`)."""
    for name, attr in attributes.items():
        if is_annotation(name):
            continue
        if name in kernel.params:
            raise KernelError(
                f"parameter '{name}' must be a property: write <{{{name} = {attr}}}>, not {{...}}"
            )
        allowed = ", ".join(kernel.params) or "none"
        raise KernelError(f"unknown parameter '{name}' (allowed: {allowed})")


# ---------------------------------------------------------------------------------------
# Operations
# ---------------------------------------------------------------------------------------


class CompOp(IRDLOperation):
    """Base class of every `comp.<kernel>` operation (generated into `comp_ops.py`).

    A generated class declares its operands (one named operand per input of a fixed-arity
    kernel, `inputs` for a variadic one) and its typed parameter properties; `inputs` names
    the operand list of every comp op.
    """

    KERNEL: ClassVar[Kernel]

    outputs = var_result_def(TensorType)

    # Custom syntax `$inputs {params..., annotations...} : functional-type`: written by hand
    # (no `assembly_format`) because xDSL 0.74 has no `prop-dict` directive and its
    # `ParsePropInAttrDict` prints annotations before parameters.

    def __init__(
        self,
        inputs: Sequence[SSAValue | Operation],
        result_types: Sequence[Attribute],
        attributes: Mapping[str, Attribute] | None = None,
        properties: Mapping[str, Attribute] | None = None,
    ):
        # Operation's constructor, not IRDL's: a wrong operand count must reach the verifier
        # (which names the kernel), not fail while parsing
        Operation.__init__(
            self,
            operands=[SSAValue.get(v) for v in inputs],
            result_types=list(result_types),
            attributes=dict(attributes or {}),
            properties=dict(properties or {}),
        )

    @property
    def inputs(self) -> Sequence[SSAValue]:
        """The operands (for a fixed-arity kernel the named operands, in order)."""
        return self.operands

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        """`%a, %b {transpose_b = true, lancet.role = "fwd"} : (...) -> ...`; a property
        dictionary `<{...}>` is accepted too. Dictionary entries naming a parameter of the
        kernel are properties, the others attributes."""
        pos = parser.pos
        operands = parser.parse_optional_undelimited_comma_separated_list(
            parser.parse_optional_unresolved_operand, parser.parse_unresolved_operand
        )
        properties = parser.parse_optional_properties_dict()
        attributes = parser.parse_optional_attr_dict()
        for name in [n for n in attributes if n in cls.KERNEL.params and n not in properties]:
            properties[name] = attributes.pop(name)
        parser.parse_punctuation(":")
        func_type = parser.parse_function_type()
        values = parser.resolve_operands(operands or [], func_type.inputs.data, pos)
        return cls(values, func_type.outputs.data, attributes, properties)

    def print(self, printer: Printer) -> None:
        """Print the custom syntax: parameters first, then annotations, in one dictionary."""
        if self.inputs:
            printer.print_string(" ")
            printer.print_list(self.inputs, printer.print_operand)
        printer.print_op_attributes({**self.properties, **self.attributes})
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.outputs.types)

    @property
    def kernel(self) -> Kernel:
        """The registry entry of this op."""
        return self.KERNEL

    def verify(self, verify_nested_ops: bool = True) -> None:
        """Check annotations, parameters and the operand count in the kernel's words before
        IRDL checks the typed properties and named operands (which would report them in
        its own, less precise terms), then everything else.

        Memoised by what these checks read: an op whose class, operand and result types,
        properties and attributes equal those of an op that passed them (`_VERIFIED`)
        passes them too, and only the checks of where it stands run (`_verify_place`);
        a failure is never remembered, so it is reported every time."""
        key = _verified_key(self)
        if key is not None and key in _VERIFIED:
            _verify_place(self)
            return
        try:
            check_annotations(self.KERNEL, self.attributes)
            self.KERNEL.resolve_params(given_params(self.KERNEL, self.properties))
            self.KERNEL.check_num_inputs(len(self.operands))
        except KernelError as err:
            error = VerifyException(f"{self.name}: {err}")
            self.emit_error(f"Operation does not verify: {error}", error)
        super().verify(verify_nested_ops)
        if key is not None:
            _remember_verified(key)

    def verify_(self) -> None:
        """Check parameters, annotations and result types against the kernel's spec."""
        try:
            check_annotations(self.KERNEL, self.attributes)
            params = self.KERNEL.resolve_params(given_params(self.KERNEL, self.properties))
            ins = [tensor_sig(v.type) for v in self.inputs]
            outs = [tensor_sig(r.type) for r in self.outputs]
            expected = self.KERNEL.infer(ins, params)
        except KernelError as err:
            raise VerifyException(f"{self.name}: {err}") from err
        if len(expected) != len(outs):
            raise VerifyException(f"{self.name}: expected {len(expected)} results, got {len(outs)}")
        for i, (got, want) in enumerate(zip(outs, expected, strict=True)):
            if got != want:
                raise VerifyException(
                    f"{self.name}: result #{i} has type {self.outputs[i].type}, "
                    f"expected {tensor_type(want)}"
                )


# ---- the verification memo ------------------------------------------------------------------
_VERIFIED: set[tuple] = set()
_VERIFIED_MAX = 1 << 16
_VERIFIED_NUMBERS = AttrNumbers()
"""The numbering of `_VERIFIED`'s keys (replaced whenever that is emptied)."""


def _verified_key(op: CompOp) -> tuple | None:
    """What `CompOp.verify` checks of `op` itself, as numbers (`support.numbering`): its
    class and kernel, operand and result types, properties and attributes; None when
    something else could matter (regions, successors, or class traits, whose checks may
    read the IR around the op)."""
    if op.regions or op.successors or list(type(op).traits):
        return None
    number = _VERIFIED_NUMBERS.number
    return (
        type(op),
        op.KERNEL,  # by identity, as the FLOP/byte memo: a test may swap a class's kernel
        *[number(v.type) for v in op.operands],
        None,
        *[number(r.type) for r in op.results],
        None,
        *sorted([(k, number(v)) for k, v in op.properties.items()]),
        None,
        *sorted([(k, number(v)) for k, v in op.attributes.items()]),
    )


def _remember_verified(key: tuple) -> None:
    global _VERIFIED_NUMBERS
    if len(_VERIFIED) >= _VERIFIED_MAX or len(_VERIFIED_NUMBERS) >= _VERIFIED_MAX:
        # a bound on memory: keys and numbers go together (a number means one value only
        # within its numbering); ops are verified in full again
        _VERIFIED.clear()
        _VERIFIED_NUMBERS = AttrNumbers()
    else:
        _VERIFIED.add(key)


def _verify_place(op: Operation) -> None:
    """The checks of `Operation.verify` that read where `op` stands rather than what it is,
    for an op without regions, successors or traits (so no terminator): no erased operand,
    and not the last op of a block that needs a terminator. Same errors as xDSL's."""
    for operand in op.operands:
        if isinstance(operand, ErasedSSAValue):
            raise ValueError("Erased SSA value is used by the operation")
    block = op.parent
    region = None if block is None else block.parent
    if block is None or region is None or block.last_op is not op:
        return
    if region.blocks.first is not region.blocks.last:
        raise VerifyException(
            f"Operation {op.name} terminates block in multi-block region but is not a terminator"
        )
    parent = region.parent
    if parent is not None and not parent.has_trait(NoTerminator):
        raise VerifyException(
            f"Operation {op.name} terminates block in single-block region but is not a terminator"
        )
