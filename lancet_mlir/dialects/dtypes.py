"""The one table of element types: their names, sizes in bytes, and the numpy dtype each
computes in. The comm dialect (payload bytes), the kernel registry and the runtime all read it.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import AnyFloat, IndexType, IntegerType
from xdsl.ir import Attribute

DTYPE_BYTES: dict[str, int] = {
    "f16": 2,
    "bf16": 2,
    "f32": 4,
    "f64": 8,
    "i1": 1,
    "i8": 1,
    "i16": 2,
    "i32": 4,
    "i64": 8,
}
"""Bytes per element, by element type name."""

NUMPY_DTYPES: dict[str, type] = {
    "f16": np.float16,
    "bf16": np.float32,  # numpy has no bfloat16: bf16 computes in float32
    "f32": np.float32,
    "f64": np.float64,
    "i1": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
}
"""The numpy type values of each element type are computed in."""


def element_name(element: Attribute) -> str | None:
    """The table name of an MLIR element type (`f32`, `bf16`, `i64`; index counts as i64,
    integers of any signedness by width), or None for a type the table does not hold."""
    if isinstance(element, IntegerType):
        name = f"i{element.width.data}"
    elif isinstance(element, IndexType):
        name = "i64"
    elif isinstance(element, AnyFloat):
        name = str(element)
    else:
        return None
    return name if name in DTYPE_BYTES else None
