"""The `comp` dialect: one compute operation per kernel of the registry (`kernels/`).

Every op `comp.<kernel>` takes tensor inputs and produces tensor results (rank 0 allowed);
the kernel's static parameters are inherent properties, annotations are discardable
`lancet.*` attributes. The custom syntax lists both in one dictionary (see `comp_base.py`):

```mlir
%y = comp.matmul %a, %b {transpose_b = true} : (tensor<64x128xf32>, tensor<256x128xf32>) -> tensor<64x256xf32>
%p, %m, %v = comp.adam_update %w, %g, %m0, %v0 {lr = 1.000000e-04 : f64, step = 3 : i64} : (...) -> (...)
%z = "comp.zeros"() <{shape = array<i64: 4, 8>}> {lancet.role = "fwd"} : () -> tensor<4x8xf32>
```

The op classes (`MatmulOp`, `MoeGateOp`, ...) are generated from the registry into
`comp_ops.py` (`python -m lancet_mlir.dialects.comp_gen`) and re-exported here, so
`comp.MatmulOp` names the class of `comp.matmul`; `comp_base.py` holds their base class
`CompOp`, the verifier and the parameter encoding. This module adds the dialect and the
helpers the other layers use (`build_op`, `kernel_of`, `kernel_params`, `op_flops_bytes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xdsl.dialects.builtin import FloatAttr, IntegerAttr, StringAttr, f64, i1, i64
from xdsl.ir import Attribute, Dialect, Operation, SSAValue

from lancet_mlir.dialects import comp_ops
from lancet_mlir.dialects.comp_base import (
    CompOp,
    dtype_of_element,
    element_type,
    given_params,
    is_annotation,
    param_attr,
    tensor_sig,
    tensor_type,
)
from lancet_mlir.dialects.comp_ops import *  # noqa: F403 - comp.MatmulOp etc.
from lancet_mlir.dialects.kernels import Kernel, KernelError, TensorSig, get_kernel
from lancet_mlir.support.numbering import AttrNumbers

_OP_CLASSES: dict[str, type[CompOp]] = {cls.KERNEL.name: cls for cls in comp_ops.OP_CLASSES}

Comp = Dialect("comp", list(comp_ops.OP_CLASSES), [])
"""The compute dialect: one operation per registered kernel."""


# ---------------------------------------------------------------------------------------
# Helpers for the other layers
# ---------------------------------------------------------------------------------------


def op_class(kernel_name: str) -> type[CompOp]:
    """The op class of a kernel (KeyError naming the known kernels if unknown)."""
    cls = _OP_CLASSES.get(kernel_name)
    if cls is None:
        get_kernel(kernel_name)  # raises the descriptive KeyError when unknown
        raise KeyError(
            f"kernel '{kernel_name}' has no op class: regenerate comp_ops.py "
            "(python -m lancet_mlir.dialects.comp_gen)"
        )
    return cls


def kernel_of(op: Operation) -> Kernel | None:
    """The registry entry of a comp op, else None."""
    return op.KERNEL if isinstance(op, CompOp) else None


def kernel_params(op: Operation) -> dict[str, Any]:
    """The kernel parameters of a comp op as Python values, with defaults filled in."""
    kernel = kernel_of(op)
    if kernel is None:
        raise KernelError(f"{op.name} is not a comp op")
    return kernel.resolve_params(given_params(kernel, op.properties))


def op_sigs(op: Operation) -> tuple[list[TensorSig], list[TensorSig]]:
    """(input sigs, output sigs) of an op whose operands and results are static tensors."""
    return [tensor_sig(v.type) for v in op.operands], [tensor_sig(r.type) for r in op.results]


def op_flops_bytes(op: Operation) -> tuple[float, float] | None:
    """(FLOPs, bytes moved) of a comp op from the registry; None for any other op.

    Raises KernelError for a comp op with bad types or parameters. Memoised by what the
    count depends on (the kernel, operand and result types, properties): partitioners and
    the cost model ask again for every copy of the same shapes.
    """
    global _FLOPS_NUMBERS
    kernel = kernel_of(op)
    if kernel is None:
        return None
    # the types and properties as numbers (`support.numbering`): hashing the types
    # themselves for every lookup was most of the cost
    number = _FLOPS_NUMBERS.number
    key = (
        kernel,  # by identity (a test may register its own kernel under a known name)
        *[number(v.type) for v in op.operands],
        None,
        *[number(r.type) for r in op.results],
        *sorted([(k, number(v)) for k, v in op.properties.items()]),
    )
    known = _FLOPS_BYTES.get(key)
    if known is None:
        ins, outs = op_sigs(op)
        known = kernel.cost(ins, outs, kernel_params(op))
        if len(_FLOPS_BYTES) >= _FLOPS_BYTES_MAX or len(_FLOPS_NUMBERS) >= _FLOPS_BYTES_MAX:
            # a bound on memory: keys and numbers go together (a number means one value
            # only within its numbering); the counts are recomputed alike
            _FLOPS_BYTES.clear()
            _FLOPS_NUMBERS = AttrNumbers()
        else:
            _FLOPS_BYTES[key] = known
    return known


_FLOPS_BYTES: dict[tuple, tuple[float, float]] = {}
_FLOPS_BYTES_MAX = 1 << 16
_FLOPS_NUMBERS = AttrNumbers()
"""The numbering of the keys of `_FLOPS_BYTES` (replaced whenever that is emptied)."""


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

    `params` are Python values, stored as properties (validated; those equal to their
    default are omitted); `attrs` are annotations such as `{"lancet.role": "dx"}`
    (Attributes or Python scalars). Raises KernelError on bad shapes or parameters.
    """
    global _BUILT_NUMBERS
    kernel = get_kernel(kernel_name)
    values = [SSAValue.get(v) for v in inputs]
    number = _BUILT_NUMBERS.number
    key: tuple | None = (
        kernel,  # by identity (a test may register its own kernel under a known name)
        *[number(v.type) for v in values],
        None,
        # the value's type too: 1, 1.0 and True are equal keys, and a check may refuse one
        *[(name, type(value), value) for name, value in sorted((params or {}).items())],
    )
    try:
        known = _BUILT.get(key)  # type: ignore[arg-type]
    except TypeError:  # a parameter given as a list: not memoised
        key, known = None, None
    if known is None:
        known = _built_types(kernel, values, params)
        if key is not None:
            if len(_BUILT) >= _BUILT_MAX or len(_BUILT_NUMBERS) >= _BUILT_MAX:
                _BUILT.clear()  # a bound on memory; keys and numbers go together
                _BUILT_NUMBERS = AttrNumbers()
            else:
                _BUILT[key] = known
    result_types, properties = known
    attributes = {name: _to_attr(v) for name, v in (attrs or {}).items()}
    return op_class(kernel_name)(values, list(result_types), attributes, dict(properties))


def _built_types(
    kernel: Kernel, values: Sequence[SSAValue], params: Mapping[str, Any] | None
) -> tuple[tuple[Attribute, ...], dict[str, Attribute]]:
    """The result types `build_op` infers and the properties it stores (KernelError on bad
    shapes or parameters)."""
    resolved = kernel.resolve_params(params)
    outs = kernel.infer([tensor_sig(v.type) for v in values], resolved)
    properties: dict[str, Attribute] = {
        name: param_attr(kernel.params[name], value)
        for name, value in resolved.items()
        if name in (params or {}) and value != kernel.params[name].default
    }
    return tuple(tensor_type(s) for s in outs), properties


_BUILT: dict[tuple, tuple[tuple[Attribute, ...], dict[str, Attribute]]] = {}
"""`build_op`'s result types and properties by kernel, operand types (numbered by
`_BUILT_NUMBERS`) and given parameters: the partitioners build many parts of equal shapes,
and the shape rules and parameter checks were a third of each build."""
_BUILT_MAX = 1 << 16
_BUILT_NUMBERS = AttrNumbers()


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
    *comp_ops.__all__,
]
