"""Module checks that xDSL's verifier does not make, run once after parsing by every tool.

* `lancet.world_size`, wherever it is set, is an integer >= 1 (a string such as `"four"`
  used to be ignored silently);
* every tensor dimension fits in i64 (the parser accepts any integer, and a dimension of
  1e23 used to simulate to 1e18 µs);
* no op uses its own result (`%a = comp.add %a, %x`): a cycle of length one, which the
  dominance check of `graph.rewrite.check_dominance` does not see.

One walk over the ops, O(ops + operands).
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType
from xdsl.ir import Attribute, Operation

from lancet_mlir import attrs
from lancet_mlir.support.errors import OpVerifyError

I64_MAX = 2**63 - 1


def check_module(module: ModuleOp) -> None:
    """Raise OpVerifyError (a VerifyException) naming the first op that breaks one of the rules above."""
    for op in module.walk():
        world = op.attributes.get(attrs.WORLD_SIZE)
        if world is not None:
            _check_world_size(op, world)
        for result in op.results:
            _check_type(op, result.type)
        for region in op.regions:
            for block in region.blocks:
                for arg in block.args:
                    _check_type(op, arg.type)
        for operand in op.operands:
            if operand.owner is op:
                name = f" (%{operand.name_hint})" if operand.name_hint else ""
                raise OpVerifyError(f"'{op.name}' uses its own result{name}", op)


def _check_world_size(op: Operation, attr: Attribute) -> None:
    if not isinstance(attr, IntegerAttr) or attr.value.data < 1:
        where = "" if isinstance(op, ModuleOp) else f" (on '{op.name}')"
        raise OpVerifyError(f"{attrs.WORLD_SIZE}: expected an integer >= 1, got {attr}{where}", op)


def _check_type(op: Operation, ty: Attribute) -> None:
    if not isinstance(ty, TensorType):
        return
    for dim in ty.get_shape():
        if dim > I64_MAX:
            raise OpVerifyError(f"'{op.name}': dimension {dim} of {ty} does not fit in i64", op)
