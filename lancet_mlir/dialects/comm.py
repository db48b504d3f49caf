"""The `comm` dialect: collective communication ops.

Every collective is variadic: N tensor operands give N results, so a fused (bucketed)
collective is one op. Properties have defaults, so the bare generic form parses:

```mlir
%r = "comm.allreduce"(%g) : (tensor<1024xf32>) -> tensor<1024xf32>
%a, %b = comm.allreduce %x, %y reduce max group <[[0, 1], [2, 3]]> : (tensor<8xf32>, tensor<4xf32>) -> (tensor<8xf32>, tensor<4xf32>)
%o = comm.all_to_all %d split 0 concat 0 : (tensor<8x16x64xf32>) -> tensor<8x16x64xf32>
```

A collective without a `group` spans all ranks of the module's world (`lancet.world_size`).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import auto
from functools import lru_cache
from math import prod
from typing import ClassVar, cast

from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    DenseArrayBase,
    IntegerAttr,
    IntegerType,
    TensorType,
    i64,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import (
    Attribute,
    Dialect,
    Operation,
    ParametrizedAttribute,
    SpacedOpaqueSyntaxAttribute,
    SSAValue,
)
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from lancet_mlir import attrs
from lancet_mlir.dialects.collectives import COLLECTIVES, Collective
from lancet_mlir.dialects.dtypes import DTYPE_BYTES
from lancet_mlir.dialects.vocab import CollectiveKind


@lru_cache(maxsize=256)
def element_bytes(element_type: Attribute) -> int:
    """Size in bytes of one element of `element_type` (4 for unknown types); cached per
    type (printing a type is slow, and fusion pricing asks for it per operand)."""
    text = str(element_type)
    if text in DTYPE_BYTES:
        return DTYPE_BYTES[text]
    width = getattr(element_type, "width", None)
    if width is not None:
        return max(1, width.data // 8)
    bitwidth = getattr(element_type, "bitwidth", None)
    if isinstance(bitwidth, int):
        return max(1, bitwidth // 8)
    return 4


def tensor_bytes(ty: Attribute) -> int:
    """Bytes of a statically shaped tensor type (0 for anything else)."""
    if not isinstance(ty, TensorType):
        return 0
    shape = ty.get_shape()
    if any(d < 0 for d in shape):
        return 0
    return prod(shape) * element_bytes(ty.element_type)


def module_world_size(op: Operation) -> int | None:
    """The `lancet.world_size` of the nearest enclosing op that declares it (O(depth))."""
    current: Operation | None = op
    while current is not None:
        attr = current.attributes.get(attrs.WORLD_SIZE)
        if isinstance(attr, IntegerAttr):
            return attr.value.data
        current = current.parent_op()
    return None


class ReductionKind(StrEnum):
    """Reduction applied by `comm.allreduce` and `comm.reduce_scatter`."""

    SUM = auto()
    PROD = auto()
    MAX = auto()
    MIN = auto()
    AVG = auto()


@irdl_attr_definition
class ReductionAttr(EnumAttribute[ReductionKind], SpacedOpaqueSyntaxAttribute):
    """`#comm<reduction sum>`; printed as `reduce max` inside comm ops."""

    name = "comm.reduction"


@irdl_attr_definition
class GroupsAttr(ParametrizedAttribute):
    """Disjoint groups of ranks, `#comm.groups<[[0, 1], [2, 3]]>`.

    Each rank takes part in the collective of the group that holds it; all groups have
    the same size. A single group spanning every rank may be written `[[0, 1, 2, 3]]`.
    """

    name = "comm.groups"
    groups: ArrayAttr[DenseArrayBase]

    def __init__(self, groups: Sequence[Sequence[int]]):
        super().__init__(ArrayAttr(DenseArrayBase.from_list(i64, list(g)) for g in groups))

    @property
    def rank_lists(self) -> tuple[tuple[int, ...], ...]:
        """The groups as tuples of ranks."""
        return tuple(
            tuple(int(r) for r in cast(DenseArrayBase[IntegerType], g).get_values())  # i64 arrays
            for g in self.groups.data
        )

    def verify(self) -> None:
        lists = self.rank_lists
        if not lists or not lists[0]:
            raise VerifyException("comm.groups: must hold at least one non-empty group")
        if len({len(g) for g in lists}) != 1:
            raise VerifyException("comm.groups: all groups must have the same size")
        flat = [r for g in lists for r in g]
        if len(set(flat)) != len(flat):
            raise VerifyException("comm.groups: a rank appears in more than one group")
        if min(flat) < 0:
            raise VerifyException("comm.groups: ranks must be non-negative")

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<[")
        printer.print_string(", ".join("[" + ", ".join(map(str, g)) + "]" for g in self.rank_lists))
        printer.print_string("]>")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        delim = parser.Delimiter
        parser.parse_punctuation("<")
        groups = parser.parse_comma_separated_list(
            delim.SQUARE,
            lambda: parser.parse_comma_separated_list(delim.SQUARE, parser.parse_integer),
        )
        parser.parse_punctuation(">")
        return (ArrayAttr(DenseArrayBase.from_list(i64, g) for g in groups),)


class CollectiveOp(IRDLOperation):
    """Base of all collectives: N tensor operands -> N tensor results.

    Subclasses set `KIND` (their entry in the collective registry, `collectives.py`) and
    check shapes in `verify_shapes`. `group_size()` resolves the group against the module's
    world size.
    """

    KIND: ClassVar[CollectiveKind]

    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    groups = opt_prop_def(GroupsAttr)

    def __init__(
        self,
        inputs: Sequence[SSAValue],
        result_types: Sequence[Attribute],
        properties: dict[str, Attribute | None] | None = None,
    ):
        props = {k: v for k, v in (properties or {}).items() if v is not None}
        super().__init__(
            operands=[list(inputs)], result_types=[list(result_types)], properties=props
        )

    # ---- queries used by the graph, cost model and runtime -------------------------------
    @classmethod
    def entry(cls) -> Collective:
        """The registry entry of this op's kind."""
        return COLLECTIVES[cls.KIND]

    def axes(self) -> tuple[int, ...]:
        """The axes the collective gathers, scatters or exchanges along (in property order:
        `axis`, or `split_axis` then `concat_axis`); () when it has none."""
        return ()

    def group_size(self, world_size: int | None = None) -> int | None:
        """Ranks per group: the op's own groups, else `world_size`, else the enclosing
        module's `lancet.world_size` (None if nothing says)."""
        if self.groups is not None:
            return len(self.groups.rank_lists[0])
        if world_size is not None:
            return world_size
        return module_world_size(self)

    def shape_group_size(self) -> int | None:
        """The group size the op's own shapes imply (an all-gather grows, a reduce-scatter
        shrinks its axis by it), None when they do not say (the default)."""
        return None

    def _axis_ratio(self, axis: int, grow: bool) -> int | None:
        """result/operand (grow) or operand/result extent of the first tensor pair along the
        op's axis, when whole and > 1."""
        pairs = self.data_pairs()
        if not pairs:
            return None
        a, b = pairs[0]
        if not (isinstance(a.type, TensorType) and isinstance(b.type, TensorType)):
            return None
        small, big = (
            (a.type.get_shape(), b.type.get_shape())
            if grow
            else (b.type.get_shape(), a.type.get_shape())
        )
        if (
            not (0 <= axis < min(len(small), len(big)))
            or small[axis] <= 0
            or big[axis] % small[axis]
        ):
            return None
        ratio = big[axis] // small[axis]
        return ratio if ratio > 1 else None

    def payload_bytes(self) -> int:
        """Bytes moved as nccl-tests counts them: per tensor the larger of input and output."""
        return sum(
            max(tensor_bytes(i.type), tensor_bytes(o.type))
            for i, o in zip(self.inputs, self.outputs, strict=False)
        )

    def data_pairs(self) -> list[tuple[SSAValue, SSAValue]]:
        """(operand, result) pairs that carry data (all of them except for all_to_allv)."""
        return list(zip(self.inputs, self.outputs, strict=True))

    # ---- verification --------------------------------------------------------------------
    def verify_(self) -> None:
        if len(self.inputs) != len(self.outputs):
            raise VerifyException(
                f"{self.name}: expects as many results as operands, got "
                f"{len(self.inputs)} operands and {len(self.outputs)} results"
            )
        if not self.inputs:
            raise VerifyException(f"{self.name}: needs at least one operand")
        self._verify_static_shapes()
        size = self._verify_group_size()
        for n, (i, o) in enumerate(self.data_pairs()):
            it, ot = i.type, o.type
            assert isinstance(it, TensorType)
            assert isinstance(ot, TensorType)
            if it.element_type != ot.element_type:
                raise VerifyException(
                    f"{self.name}: operand #{n} has element type {it.element_type} "
                    f"but result #{n} has {ot.element_type}"
                )
            self.verify_shapes(n, list(it.get_shape()), list(ot.get_shape()), size)

    def _verify_static_shapes(self) -> None:
        """Payload bytes, cost tables and the runtime all need static shapes."""
        for what, values in (("operand", self.inputs), ("result", self.outputs)):
            for n, v in enumerate(values):
                assert isinstance(v.type, TensorType)
                if any(d < 0 for d in v.type.get_shape()):
                    raise VerifyException(
                        f"{self.name}: {what} #{n} has a dynamic shape ({v.type}); "
                        "collectives need static shapes"
                    )

    def _verify_group_size(self) -> int | None:
        """The group size if known, after checking it and the groups against the world."""
        world = module_world_size(self)
        if world is not None and world < 1:
            raise VerifyException(
                f"{self.name}: the enclosing {attrs.WORLD_SIZE} is {world}, must be >= 1"
            )
        if self.groups is not None and world is not None:
            top = max(r for g in self.groups.rank_lists for r in g)
            if top >= world:
                raise VerifyException(
                    f"{self.name}: group rank {top} is outside the world of {world} ranks "
                    f"({attrs.WORLD_SIZE})"
                )
        return self.group_size()

    def verify_shapes(self, n: int, ins: list[int], outs: list[int], size: int | None) -> None:
        """Check the shapes of operand/result pair `n`; `size` is the group size if known."""

    def _check_axis(self, axis: int, rank: int, what: str = "axis") -> None:
        if not 0 <= axis < max(rank, 1) or rank == 0:
            raise VerifyException(f"{self.name}: {what} {axis} out of range for rank {rank}")


def _axis_prop(default: int = 0):
    return prop_def(IntegerAttr[I64], default_value=IntegerAttr(default, i64))


def _int(attr: IntegerAttr) -> int:
    return attr.value.data


@irdl_op_definition
class AllReduceOp(CollectiveOp):
    """Reduce each tensor across the group; every rank gets the full result."""

    name = "comm.allreduce"
    KIND: ClassVar[CollectiveKind] = CollectiveKind.ALLREDUCE
    reduction = prop_def(ReductionAttr, default_value=ReductionAttr(ReductionKind.SUM))
    assembly_format = (
        "$inputs (`reduce` $reduction^)? (`group` $groups^)? attr-dict `:` "
        "functional-type($inputs, $outputs)"
    )

    def verify_shapes(self, n: int, ins: list[int], outs: list[int], size: int | None) -> None:
        if ins != outs:
            raise VerifyException(
                f"comm.allreduce: result #{n} shape {outs} must equal operand shape {ins}"
            )


@irdl_op_definition
class AllGatherOp(CollectiveOp):
    """Concatenate each rank's tensor along `axis` (result dim = group size x operand dim)."""

    name = "comm.allgather"
    KIND: ClassVar[CollectiveKind] = CollectiveKind.ALLGATHER
    axis = _axis_prop()
    assembly_format = (
        "$inputs (`axis` $axis^)? (`group` $groups^)? attr-dict `:` "
        "functional-type($inputs, $outputs)"
    )

    def axes(self) -> tuple[int, ...]:
        """(axis,)."""
        return (_int(self.axis),)

    def verify_shapes(self, n: int, ins: list[int], outs: list[int], size: int | None) -> None:
        axis = _int(self.axis)
        self._check_axis(axis, len(ins))
        _check_scaled(self.name, n, ins, outs, axis, size, grow=True)

    def shape_group_size(self) -> int | None:  # noqa: D102 - result dim / operand dim
        return self._axis_ratio(_int(self.axis), grow=True)


@irdl_op_definition
class ReduceScatterOp(CollectiveOp):
    """Reduce across the group, then keep this rank's 1/group-size slice along `axis`."""

    name = "comm.reduce_scatter"
    KIND: ClassVar[CollectiveKind] = CollectiveKind.REDUCE_SCATTER
    reduction = prop_def(ReductionAttr, default_value=ReductionAttr(ReductionKind.SUM))
    axis = _axis_prop()
    assembly_format = (
        "$inputs (`reduce` $reduction^)? (`axis` $axis^)? (`group` $groups^)? attr-dict `:` "
        "functional-type($inputs, $outputs)"
    )

    def axes(self) -> tuple[int, ...]:
        """(axis,)."""
        return (_int(self.axis),)

    def verify_shapes(self, n: int, ins: list[int], outs: list[int], size: int | None) -> None:
        axis = _int(self.axis)
        self._check_axis(axis, len(ins))
        _check_scaled(self.name, n, ins, outs, axis, size, grow=False)

    def shape_group_size(self) -> int | None:  # noqa: D102 - operand dim / result dim
        return self._axis_ratio(_int(self.axis), grow=False)


@irdl_op_definition
class AllToAllOp(CollectiveOp):
    """Split each tensor into group-size chunks along `split_axis`, send chunk j to rank j,
    and concatenate the received chunks (in rank order) along `concat_axis`."""

    name = "comm.all_to_all"
    KIND: ClassVar[CollectiveKind] = CollectiveKind.ALL_TO_ALL
    split_axis = _axis_prop()
    concat_axis = _axis_prop()
    assembly_format = (
        "$inputs (`split` $split_axis^)? (`concat` $concat_axis^)? (`group` $groups^)? "
        "attr-dict `:` functional-type($inputs, $outputs)"
    )

    def axes(self) -> tuple[int, ...]:
        """(split_axis, concat_axis)."""
        return (_int(self.split_axis), _int(self.concat_axis))

    def verify_shapes(self, n: int, ins: list[int], outs: list[int], size: int | None) -> None:
        split, concat = _int(self.split_axis), _int(self.concat_axis)
        self._check_axis(split, len(ins), "split axis")
        self._check_axis(concat, len(ins), "concat axis")
        if size is not None and ins[split] % size:
            raise VerifyException(
                f"{self.name}: operand #{n} dim {split} ({ins[split]}) is not divisible by "
                f"the group size {size}"
            )
        if split == concat:
            if ins != outs:
                raise VerifyException(
                    f"{self.name}: result #{n} shape {outs} must equal operand shape {ins}"
                )
            return
        if size is None:
            size = _implied_a2a_size(self.name, n, ins, outs, split, concat)
        expected = list(ins)
        expected[split] //= size
        expected[concat] *= size
        if outs != expected:
            raise VerifyException(
                f"{self.name}: result #{n} shape {outs} does not match expected {expected}"
            )


@irdl_op_definition
class AllToAllVOp(CollectiveOp):
    """Uneven all-to-all along axis 0.

    Operands are N data tensors followed by N count tensors, results likewise. A data tensor
    `tensor<G x C x ...>` holds one chunk of capacity C per destination rank; its count tensor
    `tensor<G x i64>` says how many leading rows of each chunk are valid. The result chunk i
    holds the valid rows received from rank i (zero padded) and the result counts say how many.

    Counts may have any leading shape of the data, `data.shape[:r]` with 1 <= r < rank:
    `counts[g, i1, ..]` says how many leading rows along axis r of `data[g, i1, ..]` are
    valid (the MoE use: data `[G, E_local, C, M]`, counts `[G, E_local]`). r = 1 is the
    form above.
    """

    name = "comm.all_to_allv"
    KIND: ClassVar[CollectiveKind] = CollectiveKind.ALL_TO_ALLV
    assembly_format = "$inputs (`group` $groups^)? attr-dict `:` functional-type($inputs, $outputs)"

    def data_pairs(self) -> list[tuple[SSAValue, SSAValue]]:
        half = len(self.inputs) // 2
        return list(zip(self.inputs[:half], self.outputs[:half], strict=True))

    def payload_bytes(self) -> int:
        return sum(tensor_bytes(i.type) for i, _ in self.data_pairs())

    def verify_(self) -> None:
        if len(self.inputs) % 2:
            raise VerifyException(
                "comm.all_to_allv: expects N data operands followed by N count operands"
            )
        super().verify_()
        half = len(self.inputs) // 2
        size = self.group_size()
        for n in range(half):
            data, counts = self.inputs[n].type, self.inputs[half + n].type
            assert isinstance(data, TensorType)
            assert isinstance(counts, TensorType)
            if not data.get_shape():
                raise VerifyException(
                    f"comm.all_to_allv: data operand #{n} must have a leading chunk dim, got {data}"
                )
            groups = data.get_shape()[0]
            if not isinstance(counts.element_type, IntegerType):
                raise VerifyException(
                    f"comm.all_to_allv: count operand #{n} must hold integers, got {counts}"
                )
            if self.outputs[half + n].type != counts:
                raise VerifyException(
                    f"comm.all_to_allv: count result #{n} must have the count operand's type "
                    f"{counts}, got {self.outputs[half + n].type}"
                )
            _check_count_shape(n, data.get_shape(), counts)
            if size is not None and groups != size:
                raise VerifyException(
                    f"comm.all_to_allv: data operand #{n} has {groups} chunks but the group "
                    f"has {size} ranks"
                )

    def verify_shapes(self, n: int, ins: list[int], outs: list[int], size: int | None) -> None:
        if ins != outs:
            raise VerifyException(
                f"comm.all_to_allv: result #{n} shape {outs} must equal operand shape {ins}"
            )


def _check_count_shape(n: int, data: tuple[int, ...], counts: TensorType) -> None:
    """An all_to_allv count tensor must have a leading shape `data[:r]`, 1 <= r < rank."""
    shape = counts.get_shape()
    if 1 <= len(shape) < len(data) and shape == data[: len(shape)]:
        return
    if len(data) < 2:
        raise VerifyException(
            f"comm.all_to_allv: data operand #{n} needs a row axis after its chunk dim, got "
            f"shape {list(data)}"
        )
    expected = " or ".join(
        f"tensor<{'x'.join(map(str, data[:r]))}xi64>" for r in range(1, len(data))
    )
    raise VerifyException(
        f"comm.all_to_allv: count operand #{n} must be {expected}-like (a leading shape of the "
        f"data {list(data)}), got {counts}"
    )


def _implied_a2a_size(
    name: str, n: int, ins: list[int], outs: list[int], split: int, concat: int
) -> int:
    """The group size an all-to-all's shapes imply when nothing states it (or fail)."""
    if len(outs) != len(ins):
        raise VerifyException(f"{name}: result #{n} rank {len(outs)} != operand rank {len(ins)}")
    if outs[split] > 0 and ins[split] % outs[split] == 0:
        return ins[split] // outs[split]
    raise VerifyException(
        f"{name}: result #{n} dim {split} ({outs[split]}) must divide operand dim {split} "
        f"({ins[split]})"
    )


def _check_scaled(
    name: str, n: int, ins: list[int], outs: list[int], axis: int, size: int | None, grow: bool
) -> None:
    """Check that `outs` is `ins` with dim `axis` multiplied (grow) or divided by the group size."""
    if len(ins) != len(outs):
        raise VerifyException(f"{name}: result #{n} rank {len(outs)} != operand rank {len(ins)}")
    others_in = ins[:axis] + ins[axis + 1 :]
    others_out = outs[:axis] + outs[axis + 1 :]
    if others_in != others_out:
        raise VerifyException(
            f"{name}: result #{n} shape {outs} may differ from operand shape {ins} only in dim {axis}"
        )
    small, big = (ins[axis], outs[axis]) if grow else (outs[axis], ins[axis])
    if small == 0 or big % small:
        raise VerifyException(
            f"{name}: dim {axis} of result #{n} ({outs[axis]}) is not a multiple/divisor of "
            f"operand dim ({ins[axis]})"
        )
    if size is not None and not grow and ins[axis] % size:
        raise VerifyException(
            f"{name}: operand #{n} dim {axis} ({ins[axis]}) is not divisible by the group size {size}"
        )
    if size is not None and big != small * size:
        expected = ins[axis] * size if grow else ins[axis] // size
        raise VerifyException(
            f"{name}: dim {axis} of result #{n} is {outs[axis]}, expected {expected} "
            f"(operand dim {ins[axis]}, group size {size})"
        )


COLLECTIVE_OPS: tuple[type[CollectiveOp], ...] = (
    AllReduceOp,
    AllGatherOp,
    ReduceScatterOp,
    AllToAllOp,
    AllToAllVOp,
)

Comm = Dialect("comm", list(COLLECTIVE_OPS), [ReductionAttr, GroupsAttr])
