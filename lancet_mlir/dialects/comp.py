"""The `comp` dialect: one compute operation per kernel of the registry (`kernels.py`).

Every op `comp.<kernel>` takes tensor inputs and produces tensor results (rank 0 allowed);
the kernel's static parameters are ordinary (discardable) attributes:

```mlir
%y = comp.matmul %a, %b {transpose_b = true} : (tensor<64x128xf32>, tensor<256x128xf32>) -> tensor<64x256xf32>
%p, %m, %v = comp.adam_update %w, %g, %m0, %v0 {lr = 1.000000e-04 : f64, step = 3 : i64} : (...) -> (...)
%z = comp.zeros {shape = array<i64: 4, 8>} : () -> tensor<4x8xf32>
```

Parameter encoding: int -> `IntegerAttr` i64 (`3 : i64`), float -> `FloatAttr` f64
(`1.000000e-05 : f64`), bool -> `IntegerAttr` i1 (`true` / `false`), tuple of ints ->
`array<i64: ...>`, string -> `StringAttr`. Parameters left out take their registry default;
`build_op` omits parameters equal to their default. Attribute names containing a dot
(`lancet.role`, `lancet.time_us`, any `dialect.attr`) are annotations: the kernel ignores them.

The verifier runs the kernel's shape rule on the operand types and checks the result types,
parameter names and parameter types. Ops are deliberately not `Pure`: `dce` must not delete
compute from a training graph whose results are consumed by later passes or the runtime.

Kernels must be registered in `kernels.py` before this module is imported: the op classes
and the `Comp` dialect are generated once, at import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, ClassVar

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
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, var_operand_def, var_result_def
from xdsl.utils.exceptions import VerifyException

from lancet_mlir.dialects.kernels import (
    KERNELS,
    DType,
    Kernel,
    KernelError,
    ParamSpec,
    TensorSig,
    get_kernel,
)

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


def _is_bool_type(t: Attribute) -> bool:
    return isinstance(t, IntegerType) and t.width.data == 1


def _attr_to_value(spec: ParamSpec, attr: Attribute) -> Any:
    """The Python value of a parameter attribute, or None when its kind is wrong."""
    if spec.kind is bool:
        if isinstance(attr, IntegerAttr) and _is_bool_type(attr.type):
            return bool(attr.value.data)
    elif spec.kind is int:
        if isinstance(attr, IntegerAttr) and not _is_bool_type(attr.type):
            return int(attr.value.data)
    elif spec.kind is float:
        if isinstance(attr, FloatAttr):
            return float(attr.value.data)
    elif spec.kind is tuple:
        if isinstance(attr, DenseArrayBase) and isinstance(attr.elt_type, IntegerType):
            return tuple(int(v) for v in attr.get_values())
    elif isinstance(attr, StringAttr):
        return attr.data
    return None


def param_attr(spec: ParamSpec, value: Any) -> Attribute:
    """The attribute that encodes parameter `value` of kind `spec.kind`."""
    if spec.kind is bool:
        return IntegerAttr(int(bool(value)), i1)
    if spec.kind is int:
        return IntegerAttr(int(value), i64)
    if spec.kind is float:
        return FloatAttr(float(value), f64)
    if spec.kind is tuple:
        return DenseArrayBase.from_list(i64, [int(v) for v in value])
    return StringAttr(str(value))


def is_annotation(attr_name: str) -> bool:
    """True for attribute names the kernel ignores (dialect-prefixed, e.g. `lancet.role`)."""
    return "." in attr_name


def _given_params(kernel: Kernel, attributes: Mapping[str, Attribute]) -> dict[str, Any]:
    """The parameters written on an op, as Python values (no defaults filled)."""
    given: dict[str, Any] = {}
    for name, attr in attributes.items():
        if is_annotation(name):
            continue
        spec = kernel.params.get(name)
        if spec is None:
            allowed = ", ".join(kernel.params) or "none"
            raise KernelError(f"unknown parameter '{name}' (allowed: {allowed})")
        value = _attr_to_value(spec, attr)
        if value is None:
            raise KernelError(f"parameter '{name}' expects {_KIND_SYNTAX[spec.kind]}, got {attr}")
        given[name] = value
    return given


# ---------------------------------------------------------------------------------------
# Operations
# ---------------------------------------------------------------------------------------


class CompOp(IRDLOperation):
    """Base class of every `comp.<kernel>` operation (generated from the registry)."""

    KERNEL: ClassVar[Kernel]

    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)

    assembly_format = "$inputs attr-dict `:` functional-type($inputs, $outputs)"

    def __init__(
        self,
        inputs: Sequence[SSAValue | Operation],
        result_types: Sequence[Attribute],
        attributes: Mapping[str, Attribute] | None = None,
    ):
        super().__init__(
            operands=[list(inputs)],
            result_types=[list(result_types)],
            attributes=dict(attributes or {}),
        )

    @property
    def kernel(self) -> Kernel:
        """The registry entry of this op."""
        return self.KERNEL

    def verify_(self) -> None:
        """Check parameters and result types against the kernel's shape rule."""
        try:
            params = self.KERNEL.resolve_params(_given_params(self.KERNEL, self.attributes))
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


def _class_name(kernel_name: str) -> str:
    return "".join(part.capitalize() for part in kernel_name.split("_")) + "Op"


def _make_op_class(kernel: Kernel) -> type[CompOp]:
    """Generate and IRDL-define the op class of one kernel."""
    cls_name = _class_name(kernel.name)
    namespace = {
        "name": kernel.op_name,
        "KERNEL": kernel,
        "__annotations__": {"KERNEL": "ClassVar[Kernel]"},  # IRDL accepts only ClassVar constants
        "__doc__": f"`{kernel.op_name}`: {kernel.doc or kernel.name}",
        "__module__": __name__,
        "__qualname__": cls_name,
    }
    return irdl_op_definition(type(cls_name, (CompOp,), namespace))


_OP_CLASSES: dict[str, type[CompOp]] = {name: _make_op_class(k) for name, k in KERNELS.items()}
# expose the classes as module attributes (MatmulOp, MoeGateOp, ...) for import and pickling
globals().update({cls.__name__: cls for cls in _OP_CLASSES.values()})

Comp = Dialect("comp", list(_OP_CLASSES.values()), [])
"""The compute dialect: one operation per registered kernel."""


# ---------------------------------------------------------------------------------------
# Helpers for the other layers
# ---------------------------------------------------------------------------------------


def op_class(kernel_name: str) -> type[CompOp]:
    """The op class of a kernel (KeyError naming the known kernels if unknown)."""
    cls = _OP_CLASSES.get(kernel_name)
    if cls is None:
        get_kernel(kernel_name)  # raises the descriptive KeyError when unknown
        raise KeyError(f"kernel '{kernel_name}' was registered after the comp dialect loaded")
    return cls


def kernel_of(op: Operation) -> Kernel | None:
    """The registry entry of a comp op, else None."""
    return op.KERNEL if isinstance(op, CompOp) else None


def kernel_params(op: Operation) -> dict[str, Any]:
    """The kernel parameters of a comp op as Python values, with defaults filled in."""
    kernel = kernel_of(op)
    if kernel is None:
        raise KernelError(f"{op.name} is not a comp op")
    return kernel.resolve_params(_given_params(kernel, op.attributes))


def op_sigs(op: Operation) -> tuple[list[TensorSig], list[TensorSig]]:
    """(input sigs, output sigs) of an op whose operands and results are static tensors."""
    return [tensor_sig(v.type) for v in op.operands], [tensor_sig(r.type) for r in op.results]


def op_flops_bytes(op: Operation) -> tuple[float, float] | None:
    """(FLOPs, bytes moved) of a comp op from the registry; None for any other op.

    Raises KernelError for a comp op with bad types or parameters.
    """
    kernel = kernel_of(op)
    if kernel is None:
        return None
    ins, outs = op_sigs(op)
    return kernel.cost(ins, outs, kernel_params(op))


def _to_attr(value: Attribute | bool | int | float | str) -> Attribute:
    """An annotation value as an attribute (Python scalars get their natural type)."""
    if isinstance(value, Attribute):
        return value
    if isinstance(value, bool):
        return IntegerAttr(int(value), i1)
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if isinstance(value, float):
        return FloatAttr(value, f64)
    if isinstance(value, str):
        return StringAttr(value)
    raise KernelError(f"cannot encode {value!r} as an attribute")


def build_op(
    kernel_name: str,
    inputs: Sequence[SSAValue | Operation],
    params: Mapping[str, Any] | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> CompOp:
    """A new, detached `comp.<kernel_name>` op with result types inferred by the registry.

    `params` are Python values (validated; those equal to their default are omitted);
    `attrs` are extra attributes such as `{"lancet.role": "dx"}` (Attributes or Python
    scalars). Raises KernelError on bad shapes or parameters.
    """
    kernel = get_kernel(kernel_name)
    values = [SSAValue.get(v) for v in inputs]
    resolved = kernel.resolve_params(params)
    outs = kernel.infer([tensor_sig(v.type) for v in values], resolved)
    attributes: dict[str, Attribute] = {
        name: param_attr(kernel.params[name], value)
        for name, value in resolved.items()
        if name in (params or {}) and value != kernel.params[name].default
    }
    attributes.update({name: _to_attr(v) for name, v in (attrs or {}).items()})
    return op_class(kernel_name)(values, [tensor_type(s) for s in outs], attributes)


__all__ = [
    "Comp",
    "CompOp",
    "build_op",
    "dtype_of_element",
    "element_type",
    "is_annotation",
    "kernel_of",
    "kernel_params",
    "op_class",
    "op_flops_bytes",
    "op_sigs",
    "param_attr",
    "tensor_sig",
    "tensor_type",
    *(cls.__name__ for cls in _OP_CLASSES.values()),
]
