"""Layout kernels: reshape, transpose, split, concat, and the reduction reduce_sum."""

from __future__ import annotations

import math
from collections.abc import Sequence

from lancet_mlir.dialects.kernels.base import (
    PARTIAL,
    Kernel,
    KernelError,
    Params,
    ParamSpec,
    PartitionCombo,
    Sigs,
    TensorSig,
    register,
)
from lancet_mlir.dialects.kernels.rules import (
    elementwise_partition,
    expect_min_rank,
    norm_axis,
    same_dtype,
    zero_flops,
)


def resolve_shape(shape: tuple[int, ...], numel: int) -> tuple[int, ...]:
    """`shape` with its single -1 (if any) inferred so it holds `numel` elements."""
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise KernelError(f"bad target shape {shape}: at most one -1, others >= 0")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0 or numel % known:
            raise KernelError(f"cannot reshape {numel} elements into {shape}")
        shape = tuple(numel // known if d == -1 else d for d in shape)
    if math.prod(shape) != numel:
        raise KernelError(f"cannot reshape {numel} elements into {shape}")
    return shape


def _reshape_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    x = ins[0]
    return [TensorSig(resolve_shape(params["shape"], x.numel), x.dtype)]


def _reshape_partition(ins: Sigs, outs: Sigs, params: Params) -> list[PartitionCombo]:
    """Walk both shapes in groups of equal element count; the first dim of size > 1 of
    each group on one side maps to the first dim of size > 1 of the same group on the
    other (splitting a group's leading dim = splitting the flattened group contiguously)."""
    a, b = ins[0].shape, outs[0].shape
    combos: list[PartitionCombo] = []
    i = j = 0
    while i < len(a) and j < len(b):
        gi, gj = i, j
        pa, pb = a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                pa, i = pa * a[i], i + 1
            else:
                pb, j = pb * b[j], j + 1
        lead_a = next((k for k in range(gi, i) if a[k] > 1), None)
        lead_b = next((k for k in range(gj, j) if b[k] > 1), None)
        if lead_a is not None and lead_b is not None:
            combos.append(((lead_a,), (lead_b,)))
    return combos


register(
    Kernel(
        name="reshape",
        num_inputs=1,
        input_names=("x",),
        params={"shape": ParamSpec(tuple)},
        infer=_reshape_infer,
        flops=zero_flops,
        partition=_reshape_partition,
        doc="(x) -> x reshaped to `shape` (one entry may be -1)",
    )
)


def _transpose_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    x, perm = ins[0], params["perm"]
    if sorted(perm) != list(range(x.rank)):
        raise KernelError(f"perm {perm} is not a permutation of the {x.rank} axes of {x}")
    return [TensorSig(tuple(x.shape[k] for k in perm), x.dtype)]


register(
    Kernel(
        name="transpose",
        num_inputs=1,
        input_names=("x",),
        params={"perm": ParamSpec(tuple)},
        infer=_transpose_infer,
        flops=zero_flops,
        partition=lambda ins, outs, p: [((k,), (i,)) for i, k in enumerate(p["perm"])],
        doc="(x) -> x with axes permuted: out axis i is input axis perm[i]",
    )
)


def _split_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    x, num, sizes = ins[0], params["num"], params["sizes"]
    axis = norm_axis(params["axis"], x.rank)
    dim = x.shape[axis]
    if not sizes:
        if num < 1 or dim % num:
            raise KernelError(f"cannot split dim {dim} of {x} into {num} equal parts")
        sizes = (dim // num,) * num
    elif len(sizes) != num:
        raise KernelError(f"split sizes {sizes} give {len(sizes)} parts, not num = {num}")
    elif min(sizes) < 1:
        raise KernelError(f"split sizes {sizes} must all be >= 1")
    elif sum(sizes) != dim:
        raise KernelError(f"split sizes {sizes} sum to {sum(sizes)}, not to dim {dim} of {x}")
    out: list[TensorSig] = []
    for size in sizes:
        shape = list(x.shape)
        shape[axis] = size
        out.append(TensorSig(tuple(shape), x.dtype))
    return out


register(
    Kernel(
        name="split",
        num_inputs=1,
        input_names=("x",),
        params={"axis": 0, "num": ParamSpec(int), "sizes": ()},
        infer=_split_infer,
        flops=zero_flops,
        partition=lambda ins, outs, p: elementwise_partition(
            ins, outs, [norm_axis(p["axis"], ins[0].rank)]
        ),
        doc=(
            "(x) -> `num` slices of x along `axis`: equal, or of the sizes `sizes` (num "
            "positive sizes that sum to the dimension) when given"
        ),
    )
)


def _concat_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    first = ins[0]
    expect_min_rank(first, 1, "input")
    axis = norm_axis(params["axis"], first.rank)
    dtype = same_dtype(ins)
    for k, s in enumerate(ins[1:], start=1):
        other = tuple(d for i, d in enumerate(s.shape) if i != axis)
        if s.rank != first.rank or other != tuple(
            d for i, d in enumerate(first.shape) if i != axis
        ):
            raise KernelError(f"input #{k} shape {s} does not match {first} off axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(s.shape[axis] for s in ins)
    return [TensorSig(tuple(shape), dtype)]


register(
    Kernel(
        name="concat",
        num_inputs=None,
        params={"axis": 0, "in_place": False},
        infer=_concat_infer,
        flops=zero_flops,
        partition=lambda ins, outs, p: elementwise_partition(
            ins, outs, [norm_axis(p["axis"], outs[0].rank)]
        ),
        doc=(
            "(x0, x1, ...) -> concatenation along `axis`; `in_place`: the inputs' producers "
            "write into the result's slices (destination-passing, `dialects/destination.py`)"
        ),
    )
)


def _reduce_axes(sig: TensorSig, axes: Sequence[int]) -> list[int]:
    norm = sorted({norm_axis(a, sig.rank) for a in axes})
    if len(norm) != len(axes):
        raise KernelError(f"repeated axis in {tuple(axes)}")
    return norm


def _reduce_sum_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    x = ins[0]
    axes = _reduce_axes(x, params["axes"])
    if params["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorSig(shape, x.dtype)]


def _reduce_sum_partition(ins: Sigs, outs: Sigs, params: Params) -> list[PartitionCombo]:
    axes = _reduce_axes(ins[0], params["axes"])
    combos: list[PartitionCombo] = []
    kept = 0
    for i in range(ins[0].rank):
        if i in axes:
            combos.append(((i,), (PARTIAL,)))
        else:
            combos.append(((i,), (i if params["keepdims"] else kept,)))
            kept += 1
    return combos


register(
    Kernel(
        name="reduce_sum",
        num_inputs=1,
        input_names=("x",),
        params={"axes": (0,), "keepdims": False},
        infer=_reduce_sum_infer,
        flops=lambda ins, outs, p: float(ins[0].numel),
        partition=_reduce_sum_partition,
        doc="(x) -> sum of x over `axes` (e.g. bias gradients)",
    )
)
