"""Types <-> numpy arrays for the runtime: dtypes, deterministic inputs, constants.

Deterministic inputs: argument `i` of rank `r` is drawn from
`numpy.random.default_rng([seed, r, i])`, so a rank's inputs do not depend on how many ranks
run, in which process, or on the module around the function. Float arguments are N(0, 1)
times the argument attribute `lancet.init_scale` (default 1.0) plus `lancet.init_offset`
(default 0.0); integer arguments are uniform in [0, `lancet.max_int`) (default 2); i1
arguments are uniform booleans. An argument with the unit attribute `lancet.replicated` (a
data-parallel replica, e.g. a dense weight) has the same value on every rank: it is drawn from
`default_rng([seed, 2**32, i])`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    TensorType,
)
from xdsl.ir import Attribute

from lancet_mlir.attrs import INIT_OFFSET, INIT_SCALE, MAX_INT, REPLICATED
from lancet_mlir.dialects.dtypes import NUMPY_DTYPES, element_name
from lancet_mlir.support.errors import UserError

_REPLICA_STREAM = 2**32  # larger than any rank: replicated draws never collide with per-rank ones


def numpy_dtype_of(element: Attribute) -> np.dtype:
    """The numpy dtype the runtime uses for an MLIR element type (bf16 computes in f32)."""
    name = element_name(element)
    if name is None:
        raise UserError(f"the runtime does not support element type {element}")
    return np.dtype(NUMPY_DTYPES[name])


def shape_and_dtype(ty: Attribute) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, numpy dtype) of a static tensor type or of a scalar type (shape ())."""
    if isinstance(ty, TensorType):
        shape = tuple(ty.get_shape())
        if any(d < 0 for d in shape):
            raise UserError(f"the runtime needs static shapes, got {ty}")
        return shape, numpy_dtype_of(ty.get_element_type())
    return (), numpy_dtype_of(ty)


def _float_attr(attrs: DictionaryAttr | None, name: str, default: float) -> float:
    if attrs is None or name not in attrs.data:
        return default
    attr = attrs.data[name]
    if isinstance(attr, FloatAttr | IntegerAttr):
        return float(attr.value.data)
    raise UserError(f"argument attribute {name} must be a number, got {attr}")


def _int_attr(attrs: DictionaryAttr | None, name: str, default: int) -> int:
    if attrs is None or name not in attrs.data:
        return default
    attr = attrs.data[name]
    if isinstance(attr, IntegerAttr):
        return int(attr.value.data)
    raise UserError(f"argument attribute {name} must be an integer, got {attr}")


def make_input(
    ty: Attribute, attrs: DictionaryAttr | None, *, seed: int, rank: int, index: int
) -> np.ndarray:
    """The deterministic value of argument `index` of rank `rank` (see the module doc)."""
    shape, dtype = shape_and_dtype(ty)
    replicated = attrs is not None and REPLICATED in attrs.data
    rng = np.random.default_rng([seed, _REPLICA_STREAM if replicated else rank, index])
    if dtype.kind == "f":
        scale = _float_attr(attrs, INIT_SCALE, 1.0)
        offset = _float_attr(attrs, INIT_OFFSET, 0.0)
        return (rng.standard_normal(shape) * scale + offset).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dtype)
    bound = _int_attr(attrs, MAX_INT, 2)
    if bound < 1:
        raise UserError(f"argument #{index}: {MAX_INT} must be >= 1, got {bound}")
    return rng.integers(0, bound, size=shape, dtype=np.int64).astype(dtype)


def make_inputs(
    arg_types: Sequence[Attribute],
    arg_attrs: Sequence[DictionaryAttr | None],
    *,
    seed: int,
    rank: int,
    replica_cache: dict[int, np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Deterministic values of every argument of a function for one rank.

    `replica_cache` (argument index -> value), shared between the ranks of one run, lets
    `lancet.replicated` arguments be drawn once instead of once per rank: each rank gets a
    copy, so a kernel that wrote into its input could not leak into another rank.
    """
    values = []
    for i, (ty, arg_attr) in enumerate(zip(arg_types, arg_attrs, strict=True)):
        replicated = arg_attr is not None and REPLICATED in arg_attr.data
        if replica_cache is None or not replicated:
            values.append(make_input(ty, arg_attr, seed=seed, rank=rank, index=i))
            continue
        if i not in replica_cache:
            replica_cache[i] = make_input(ty, arg_attr, seed=seed, rank=rank, index=i)
        values.append(replica_cache[i].copy())
    return values


def check_value(value: np.ndarray, ty: Attribute, what: str) -> np.ndarray:
    """`value` if its shape and dtype match `ty`; UserError naming `what` otherwise."""
    shape, dtype = shape_and_dtype(ty)
    arr = np.asarray(value)
    if arr.shape != shape:
        raise UserError(f"{what}: shape {arr.shape} does not match the type {ty}")
    if arr.dtype != dtype:
        raise UserError(f"{what}: dtype {arr.dtype} does not match the type {ty} ({dtype})")
    return arr


def constant_value(value: Attribute, ty: Attribute) -> np.ndarray:
    """The array of an `arith.constant` value attribute of type `ty`."""
    shape, dtype = shape_and_dtype(ty)
    if isinstance(value, IntegerAttr | FloatAttr):
        return np.full(shape, value.value.data, dtype=dtype)
    if isinstance(value, DenseIntOrFPElementsAttr):
        data = np.asarray(value.get_values(), dtype=dtype)
        if data.size == 1:  # a splat
            return np.full(shape, data.reshape(()), dtype=dtype)
        return data.reshape(shape)
    raise UserError(f"arith.constant: unsupported value {value}")
