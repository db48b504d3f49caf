"""FX `meta['val']` -> MLIR types: dtypes, static shapes and bounds of symbolic sizes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from xdsl.dialects.builtin import (
    IntegerType,
    Signedness,
    TensorType,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i8,
    i16,
    i32,
    i64,
)
from xdsl.ir import Attribute

from lancet_mlir.support.errors import UserError

_ELEMENTS: dict[torch.dtype, Attribute] = {
    torch.float32: f32,
    torch.float16: f16,
    torch.bfloat16: bf16,
    torch.float64: f64,
    torch.int64: i64,
    torch.int32: i32,
    torch.int16: i16,
    torch.int8: i8,
    torch.uint8: IntegerType(8, Signedness.UNSIGNED),
    torch.bool: i1,
}
SCALAR_INT = TensorType(i64, [])
"""The type of a symbolic (or plain) integer an FX node produces: `tensor<i64>`."""
SCALAR_FLOAT = TensorType(f64, [])


def element_type(dtype: torch.dtype, where: str) -> Attribute:
    """The MLIR element type of a torch dtype (UserError naming `where` when unsupported)."""
    element = _ELEMENTS.get(dtype)
    if element is None:
        raise UserError(f"{where}: unsupported dtype {dtype}")
    return element


def size_bound(size: Any, where: str) -> tuple[int, bool]:
    """(static size, is an upper bound) of one dimension: an int is itself; a symbolic size
    (a data-dependent split, an unbacked SymInt) is the upper bound its shape environment
    proves (`torch._check(n <= bound)` in the model gives one); no bound is a UserError."""
    if isinstance(size, int):
        return size, False
    if isinstance(size, torch.SymInt):
        node = size.node
        if node.has_hint() and not node.expr.free_symbols:
            return int(node.hint), False
        bound = node.shape_env.bound_sympy(node.expr).upper
        if bound.is_Integer:
            return int(bound), True
        raise UserError(
            f"{where}: the data-dependent size {node.expr} has no upper bound "
            "(add torch._check(size <= bound) to the model)"
        )
    raise UserError(f"{where}: unsupported size {size!r}")


def tensor_type(val: torch.Tensor, where: str) -> tuple[TensorType, bool]:
    """(type, some dimension is an upper bound) of a (fake) tensor."""
    dims = [size_bound(s, where) for s in val.shape]
    return (
        TensorType(element_type(val.dtype, where), [d for d, _ in dims]),
        any(b for _, b in dims),
    )


def value_type(val: Any, where: str) -> tuple[Attribute, bool] | None:
    """The type of one value an FX node produces: a tensor, a symbolic or plain number
    (rank-0 tensor: it carries the dependency), None for anything else (None, ...)."""
    if isinstance(val, torch.Tensor):
        return tensor_type(val, where)
    if isinstance(val, (torch.SymInt, int, torch.SymBool, bool)):
        return SCALAR_INT, False
    if isinstance(val, (torch.SymFloat, float)):
        return SCALAR_FLOAT, False
    return None


def flat_values(val: Any) -> Iterator[tuple[int, Any]]:
    """(index, value) of a node's results: a tuple/list is its elements, else one value."""
    if isinstance(val, (tuple, list)):
        yield from enumerate(val)
    else:
        yield 0, val


def tensor_nbytes(val: Any) -> int:
    """Bytes of a (fake) tensor, symbolic sizes at their upper bound; 0 for non-tensors."""
    if not isinstance(val, torch.Tensor):
        return 0
    count = 1
    for s in val.shape:
        count *= size_bound(s, "tensor")[0]
    return count * val.element_size()
