"""The one place where the partitioner reads the kernel registry.

Everything the partition library needs from the compute dialect (a kernel's allowed
partition combinations, building a new kernel op, the kernel of an op and its parameters)
goes through this module, so a change in the registry's layout is a change here only.

The generic `aten.op` of the PyTorch import has no kernel; the element-wise ATen ops
(`ATEN_ELEMENTWISE`: one output element from the same element of each input) take the
registry's element-wise rule here (broadcast inputs used whole), so an expert span of a
PyTorch graph (`clone`, erf-`gelu`, `gelu_backward`, ...) can be split; any other ATen op
has no combination (it stays outside every region).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from xdsl.dialects.builtin import FloatAttr, TensorType, f64
from xdsl.ir import Operation, SSAValue

from lancet_mlir import attrs as lancet_attrs
from lancet_mlir.dialects.aten import AtenOp
from lancet_mlir.dialects.comp import build_op, kernel_of, kernel_params, op_sigs
from lancet_mlir.dialects.destination import mark_accumulate, mark_in_place
from lancet_mlir.dialects.kernels import PARTIAL, KernelError
from lancet_mlir.dialects.kernels.rules import elementwise_partition
from lancet_mlir.partition.origin import mark_derived

Axis = int | str | None
"""One entry of a partition combination: an axis, `None` (used whole) or `PARTIAL`."""

Combo = tuple[tuple[Axis, ...], tuple[Axis, ...]]
"""(input axes, output axes) of one allowed way to split an op."""

__all__ = [
    "PARTIAL",
    "Axis",
    "Combo",
    "build_kernel_op",
    "partial_sum",
    "rebuild_concat",
    "is_kernel_op",
    "kernel_name",
    "kernel_param",
    "clone_kernel_op",
    "partition_combos",
]


def is_kernel_op(op: Operation) -> bool:
    """True for ops of the compute dialect (registry kernels)."""
    return kernel_of(op) is not None


ATEN_ELEMENTWISE = frozenset(
    f"aten.{name}"
    for name in (
        "clone.default", "alias.default", "detach.default", "gelu.default", "relu.default",
        "silu.default", "neg.default", "tanh.default", "gelu_backward.default",
        "threshold_backward.default", "silu_backward.default", "mul.Tensor", "add.Tensor",
        "sub.Tensor", "div.Tensor", "mul.Scalar", "add.Scalar", "div.Scalar",
    )
)  # fmt: skip
"""ATen overloads (`aten.op` targets) split like the registry's element-wise kernels."""


def _aten_combos(op: AtenOp) -> list[Combo]:
    if op.target.data not in ATEN_ELEMENTWISE or len(op.results) != 1:
        return []
    try:
        ins, outs = op_sigs(op)
    except KernelError:
        return []
    unsplit: Combo = ((None,) * len(ins), (None,))
    combos: list[Combo] = [unsplit]
    for cin, cout in elementwise_partition(ins, outs):
        if outs[0].shape[cout[0]] >= 2:  # type: ignore[index]
            combos.append((tuple(cin), tuple(cout)))
    return combos


def partition_combos(op: Operation) -> list[Combo]:
    """The registry's allowed partition combinations of `op`, unsplit first; [] when `op`
    is not a registry kernel (nor an element-wise `aten.op`, module doc) or its types or
    parameters are unusable."""
    if isinstance(op, AtenOp):
        return _aten_combos(op)
    kernel = kernel_of(op)
    if kernel is None:
        return []
    try:
        ins, outs = op_sigs(op)
        combos = kernel.allowed_partitions(ins, outs, kernel_params(op))
    except KernelError:
        return []
    return [(tuple(cin), tuple(cout)) for cin, cout in combos]


def build_kernel_op(
    kernel_name: str,
    inputs: Sequence[SSAValue | Operation],
    params: Mapping[str, Any] | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> Operation:
    """A new detached compute op `kernel_name` (result types inferred by the registry)."""
    return build_op(kernel_name, inputs, params, attrs)


def rebuild_concat(
    parts: Sequence[SSAValue], axis: int, attrs: Mapping[str, Any] | None = None
) -> Operation:
    """The detached `comp.concat` that rebuilds a value from its `parts` along `axis`, in
    destination-passing form (`in_place`: the parts' writers write into its slices, no copy)
    where `dialects.destination` allows it, else a copy. Every partitioning pass builds its
    rebuild concatenations here (capacity regions, token parts, expert spans)."""
    op = build_kernel_op("concat", parts, {"axis": axis}, attrs)
    mark_in_place(op)
    return op


def partial_sum(
    total: SSAValue, part: SSAValue, attrs: Mapping[str, Any] | None = None
) -> Operation:
    """The detached `comp.add` of one more `part` to a running `total` of partial sums,
    accumulated in place (`in_place`: the part's GEMM adds into the total's buffer, no add
    kernel) where `dialects.destination.accumulation_ok` allows it. Every partitioning pass
    builds its partial-sum chains here."""
    op = build_kernel_op("add", [total, part], None, attrs)
    mark_accumulate(op)
    return op


def clone_kernel_op(
    op: Operation,
    inputs: Sequence[SSAValue],
    attrs: Mapping[str, Any],
    shapes: Sequence[tuple[int, ...] | None] = (),
    share: float | None = None,
) -> Operation:
    """A new detached op of `op`'s kernel and parameters on new `inputs` (types re-inferred),
    marked as a part of `op` doing `share` of its work (`lancet.origin` / `lancet.share`;
    None: its FLOPs' share, origin.py).

    `shapes` may give the wanted result shapes (None: not known): a kernel whose `shape`
    parameter names its one result's shape (a reshape) takes it, so a part of a reshape
    reshapes the part's rows. A part of an element-wise `aten.op` has the part's result
    shape and the share of its FLOPs and bytes that its elements are."""
    if isinstance(op, AtenOp):
        return _clone_aten(op, inputs, attrs, shapes, share)
    kernel = kernel_of(op)
    assert kernel is not None, f"{op.name} is not a compute kernel"
    params = kernel_params(op)
    if "shape" in params and len(shapes) == 1 and shapes[0] is not None:
        params["shape"] = tuple(shapes[0])
    part = build_op(kernel.name, inputs, params, attrs)
    mark_derived(part, op, share)
    return part


def kernel_name(op: Operation) -> str | None:
    """The registry name of a compute op's kernel (`moe_gate`, ...), else None."""
    kernel = kernel_of(op)
    return None if kernel is None else kernel.name


def kernel_param(op: Operation, name: str) -> Any:
    """One kernel parameter of a compute op (its default when not written)."""
    return kernel_params(op).get(name)


def _clone_aten(
    op: AtenOp,
    inputs: Sequence[SSAValue],
    attrs: Mapping[str, Any],
    shapes: Sequence[tuple[int, ...] | None],
    share: float | None,
) -> Operation:
    result = op.results[0].type
    assert isinstance(result, TensorType)
    assert len(shapes) == 1
    assert shapes[0] is not None
    whole = max(1, math.prod(result.get_shape()))
    fraction = math.prod(shapes[0]) / whole
    carried = dict(op.attributes)
    for name in (lancet_attrs.FLOPS, lancet_attrs.BYTES):
        value = op.attributes.get(name)
        if isinstance(value, FloatAttr):
            carried[name] = FloatAttr(float(value.value.data) * fraction, f64)
    carried.update(attrs)
    part = AtenOp(op.target.data, inputs, [TensorType(result.element_type, shapes[0])], carried)
    mark_derived(part, op, share)
    return part
