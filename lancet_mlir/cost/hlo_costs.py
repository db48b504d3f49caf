"""FLOP and byte counts of StableHLO / MHLO ops, for the roofline model (`roofline.py`).

The StableHLO importer (`lancet_mlir.importers.stablehlo`) writes these numbers on every HLO
compute op as `lancet.flops` / `lancet.bytes`; the roofline model turns them into times.

* FLOPs are exact for `dot_general`, `dot` and `convolution` (2 per multiply-add), one per
  result element for other arithmetic, (ops in the scalar body) x (applications) for ops with
  a scalar body (`reduce`, `reduce_window`, `sort` (x log2 n), `scatter`, ...), and summed over
  the body of `mhlo.fusion`.
* Bytes are what the op reads and writes (every operand and result tensor); free ops --
  constants, bitcasts, reshapes, tuples, sharding markers -- cost 0 FLOPs and 0 bytes, and ops
  that only move data (transpose, slice, gather, ...) 0 FLOPs.
* Calls and control flow cost the sum of their bodies (a while loop: one iteration; `if` /
  `case`: the most expensive branch); callee costs are memoised by symbol name.

Ops of other dialects get no HLO cost (`HloCostModel.node` returns None): the cost model's own
rules (the kernel registry, explicit times) apply to them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from math import log2, prod

from xdsl.dialects.builtin import IntegerAttr, StringAttr, SymbolRefAttr, TensorType, TupleType
from xdsl.ir import Attribute, Block, Operation

from lancet_mlir.dialects.comm import CollectiveOp, tensor_bytes
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.support.errors import UserError

HLO_DIALECTS = ("stablehlo", "mhlo")
"""Dialect prefixes of HLO ops (both spellings are accepted everywhere)."""

# Ops that neither compute nor move memory once XLA has laid out the buffers.
FREE_OPS = frozenset(
    {
        "constant",
        "bitcast",
        "reshape",
        "tuple",
        "get_tuple_element",
        "optimization_barrier",
        "partition_id",
        "replica_id",
        "after_all",
        "create_token",
        "async_done",
        "async_update",
        "return",
    }
)
_FREE_CUSTOM_CALLS = frozenset(
    {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "annotate_device_placement"}
)
# Ops that only move data: bytes read + written, no FLOPs.
_MOVE_OPS = frozenset(
    {
        "broadcast_in_dim",
        "broadcast",
        "transpose",
        "slice",
        "dynamic_slice",
        "dynamic_update_slice",
        "concatenate",
        "pad",
        "gather",
        "copy",
        "iota",
        "convert",
        "reverse",
        "bitcast_convert",
        "custom_call",
    }
)
# Ops whose region is a scalar computation applied once per input element.
_SCALAR_BODY_OPS = frozenset(
    {"reduce", "reduce_window", "sort", "scatter", "select_and_scatter", "map"}
)
# Ops whose regions are executed as graphs of their own (cost = cost of the body).
_CONTROL_OPS = frozenset({"while", "if", "case", "async_start"})
_WRAPPERS = frozenset({"sdy.manual_computation", "sdy.named_computation"})


# ---- op accessors (shared with the importer) -----------------------------------------------
def hlo_kind(op: Operation) -> str | None:
    """`all_reduce` for `stablehlo.all_reduce` / `mhlo.all_reduce`; None for other dialects."""
    dialect, _, name = op_display_name(op).partition(".")
    return name if dialect in HLO_DIALECTS else None


def hlo_attr(op: Operation, name: str) -> Attribute | None:
    """An op's property or (older printers) attribute called `name`."""
    attr = op.properties.get(name)
    return attr if attr is not None else op.attributes.get(name)


def hlo_int(op: Operation, name: str) -> int | None:
    """An integer property/attribute of `op`; None when absent, UserError when not an int."""
    attr = hlo_attr(op, name)
    if attr is None:
        return None
    if not isinstance(attr, IntegerAttr):
        raise UserError(f"{op_display_name(op)}: '{name}' must be an integer, got {attr}", op=op)
    return attr.value.data


def leaf_types(ty: Attribute) -> list[Attribute]:
    """Tensor types of a (possibly nested) tuple type, in order."""
    if isinstance(ty, TupleType):
        return [leaf for t in ty.types.data for leaf in leaf_types(t)]
    return [ty]


def _shape(value_type: Attribute) -> list[int] | None:
    if not isinstance(value_type, TensorType):
        return None
    shape = list(value_type.get_shape())
    return None if any(d < 0 for d in shape) else shape


def _elements(ty: Attribute) -> int:
    return sum(prod(s, start=1) for t in leaf_types(ty) if (s := _shape(t)) is not None)


def _io_bytes(op: Operation) -> float:
    types = [v.type for v in op.operands] + [r.type for r in op.results]
    return float(sum(tensor_bytes(leaf) for t in types for leaf in leaf_types(t)))


def _attr_text(attr: Attribute) -> str:
    """The parameter text of an (usually unregistered) attribute such as `#stablehlo.dot<...>`."""
    value = getattr(attr, "value", None)
    if isinstance(value, StringAttr):
        return value.data
    return str(attr)


def _dims(text: str, key: str) -> list[int]:
    match = re.search(rf"\b{key}\s*=\s*\[([-0-9,\s]*)\]", text)
    if match is None:
        return []
    return [int(x) for x in match.group(1).replace(" ", "").split(",") if x]


def _int_in(text: str, key: str) -> int | None:
    match = re.search(rf"\b{key}\s*=\s*(\d+)", text)
    return int(match.group(1)) if match else None


def _array(op: Operation, name: str) -> list[int] | None:
    attr = hlo_attr(op, name)
    if attr is None:
        return None
    values = getattr(attr, "get_values", None)
    return [int(v) for v in values()] if values is not None else None


# ---- exact formulas -------------------------------------------------------------------------
def dot_general_flops(op: Operation) -> float:
    """2 x (result elements) x (product of the lhs contracting dimension sizes)."""
    dims = hlo_attr(op, "dot_dimension_numbers")
    lhs = _shape(op.operands[0].type)
    if dims is None or lhs is None or not op.results:
        return 0.0
    contracting = _dims(_attr_text(dims), "lhs_contracting_dimensions")
    return 2.0 * _elements(op.results[0].type) * prod(lhs[d] for d in contracting)


def dot_flops(op: Operation) -> float:
    """`stablehlo.dot` contracts the last lhs dimension: 2 x (result elements) x K."""
    lhs = _shape(op.operands[0].type)
    if not lhs or not op.results:
        return 0.0
    return 2.0 * _elements(op.results[0].type) * lhs[-1]


GEMM_CUSTOM_CALLS = frozenset({"__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8"})
"""XLA GPU's GEMM custom calls: a dot whose dimensions the backend config states."""


def gemm_custom_call_flops(op: Operation) -> float | None:
    """2 x (result elements) x (product of the lhs contracting dimension sizes) of a GEMM
    custom call (`GEMM_CUSTOM_CALLS`; the result is the first tensor, a workspace may
    follow), from `backend_config`'s `gemm_backend_config.dot_dimension_numbers`; None for
    any other custom call. A GEMM whose config names no contracting dimension contracts
    the lhs's last (what cuBLAS's row-major `A x B` does)."""
    target = hlo_attr(op, "call_target_name")
    if not isinstance(target, StringAttr) or target.data not in GEMM_CUSTOM_CALLS:
        return None
    lhs = _shape(op.operands[0].type) if op.operands else None
    out = leaf_types(op.results[0].type) if op.results else []
    if not lhs or not out:
        return 0.0
    contracting = [len(lhs) - 1]
    config = hlo_attr(op, "backend_config")
    if isinstance(config, StringAttr) and config.data:
        try:
            dims = json.loads(config.data)["gemm_backend_config"]["dot_dimension_numbers"]
            contracting = [int(d) for d in dims["lhs_contracting_dimensions"]]
        except (ValueError, KeyError, TypeError):
            pass  # the default: the last dimension
    if not all(0 <= d < len(lhs) for d in contracting):
        return 0.0
    return 2.0 * _elements(out[0]) * prod(lhs[d] for d in contracting)


def convolution_flops(op: Operation) -> float:
    """2 x (result elements) x (kernel elements / output features) multiply-adds."""
    kernel = _shape(op.operands[1].type) if len(op.operands) > 1 else None
    if not kernel or not op.results:
        return 0.0
    out_dim = len(kernel) - 1
    numbers = hlo_attr(op, "dimension_numbers")
    if numbers is not None:
        layout = re.search(r"x\s*\[([^\]]*)\]", _attr_text(numbers))
        letters = [s.strip() for s in layout.group(1).split(",")] if layout else []
        if "o" in letters:
            out_dim = letters.index("o")
        elif (k := _int_in(_attr_text(numbers), "kernel_output_feature_dimension")) is not None:
            out_dim = k
    return 2.0 * _elements(op.results[0].type) * prod(kernel) / max(kernel[out_dim], 1)


def _body_ops(op: Operation) -> Iterable[Operation]:
    for region in op.regions:
        for block in region.blocks:
            yield from block.ops


# ---- the model ------------------------------------------------------------------------------
class HloCostModel:
    """FLOP/byte estimates of HLO ops in one module; callee costs memoised by symbol name."""

    def __init__(self, funcs: dict[str, Operation]):
        """`funcs`: the module's `func.func` ops by symbol name (for `func.call` costs)."""
        self.funcs = funcs
        self._callee: dict[str, tuple[float, float]] = {}

    def node(self, op: Operation) -> tuple[float, float] | None:
        """(FLOPs, bytes) of `op` as one node of its block's graph; None for ops of other
        dialects (the cost model's own rules apply to them)."""
        name = op_display_name(op)
        kind = hlo_kind(op)
        if name == "func.call" or name in _WRAPPERS or kind in _CONTROL_OPS:
            return self._nested(op)
        if kind is None:
            return None
        if self._is_free(op, kind):
            return 0.0, 0.0
        return self.flops(op), _io_bytes(op)

    def flops(self, op: Operation) -> float:
        """FLOPs of `op` (exact for dot/dot_general/convolution, estimates otherwise)."""
        kind = hlo_kind(op) or ""
        if kind == "dot_general":
            return dot_general_flops(op)
        if kind == "dot":
            return dot_flops(op)
        if kind == "convolution":
            return convolution_flops(op)
        if kind == "custom_call" and (gemm := gemm_custom_call_flops(op)) is not None:
            return gemm
        if kind == "fusion":
            return sum(self.flops(inner) for inner in _body_ops(op))
        if kind in _SCALAR_BODY_OPS:
            return self._scalar_body_flops(op, kind)
        if kind in FREE_OPS or kind in _MOVE_OPS or kind in _CONTROL_OPS:
            return 0.0
        return float(sum(_elements(r.type) for r in op.results))

    def _scalar_body_flops(self, op: Operation, kind: str) -> float:
        """(ops in the scalar body) x (number of times the body is applied)."""
        per_application = sum(1 for inner in _body_ops(op) if hlo_kind(inner) not in FREE_OPS)
        if kind == "reduce_window":
            window = prod(_array(op, "window_dimensions") or [1])
            applications = float(sum(_elements(r.type) for r in op.results) * window)
        elif kind in ("scatter", "select_and_scatter"):
            applications = float(_elements(op.operands[-1 if kind == "scatter" else 1].type))
        else:
            applications = float(_elements(op.operands[0].type))
        if kind == "sort":
            shape = _shape(op.operands[0].type) or [1]
            axis = hlo_int(op, "dimension") or 0
            if not -len(shape) <= axis < len(shape):
                raise UserError(
                    f"{op_display_name(op)}: dimension {axis} is out of range for "
                    f"{op.operands[0].type}",
                    op=op,
                )
            applications *= log2(max(shape[axis], 2))
        return per_application * applications

    def _is_free(self, op: Operation, kind: str) -> bool:
        if kind in FREE_OPS:
            return True
        if kind == "custom_call":
            target = hlo_attr(op, "call_target_name")
            return isinstance(target, StringAttr) and target.data in _FREE_CUSTOM_CALLS
        return False

    def _nested(self, op: Operation) -> tuple[float, float]:
        """Cost of a call / control-flow op: the sum of its body (max over if/case branches)."""
        if op_display_name(op) == "func.call":
            callee = hlo_attr(op, "callee")
            name = callee.root_reference.data if isinstance(callee, SymbolRefAttr) else ""
            return self.callee(name)
        per_region = [self._block_sum(b) for r in op.regions for b in r.blocks]
        if not per_region:
            return 0.0, 0.0
        if hlo_kind(op) in ("if", "case"):
            return max(per_region)
        return sum(c[0] for c in per_region), sum(c[1] for c in per_region)

    def callee(self, name: str) -> tuple[float, float]:
        """Cost of calling function `name` (0 if unknown)."""
        if name in self._callee:
            return self._callee[name]
        self._callee[name] = (0.0, 0.0)  # recursion guard
        func = self.funcs.get(name)
        blocks = list(func.regions[0].blocks) if func is not None and func.regions else []
        costs = [self._block_sum(b) for b in blocks]
        self._callee[name] = (sum(c[0] for c in costs), sum(c[1] for c in costs))
        return self._callee[name]

    def _block_sum(self, block: Block) -> tuple[float, float]:
        flops = nbytes = 0.0
        for op in block.ops:
            cost = None if isinstance(op, CollectiveOp) else self.node(op)
            if cost is not None:
                flops += cost[0]
                nbytes += cost[1]
        return flops, nbytes
