"""Op keys: the name under which an op's measured time is stored in a profile.

A key is the op name, ";", every operand type followed by ",", "|", then the result type(s):

    comp.matmul;T<64x128xf32>,T<128x256xf32>,|T<64x256xf32>

A generic ATen call (`aten.op`, PyTorch import) is named by its target instead:
`aten.addmm.default;T<32xf32>,T<16x64xf32>,T<64x32xf32>,|T<16x32xf32>`.

Tensors render as `T<d0xd1x...xdtype>` (rank 0: `T<f32>`, dynamic dims `?`), other types as
their MLIR text. One result renders bare, several as `(T<..>,T<..>,)`, none as nothing. This is
Lancet's key scheme (lancet-algorithms.md §4.1) with MLIR op names instead of RAF's dispatched
kernel names, so two ops share a key exactly when they launch the same kernel on the same shapes.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Operation

from lancet_mlir.dialects.aten import AtenOp
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.support.numbering import AttrNumbers

# (op name, operand type numbers, None, result type numbers) -> key: one dict lookup per op
# of an already seen signature instead of the string rendering; the types are numbered
# (`support.numbering`) because hashing them for every lookup cost more than the rest.
_KEY_CACHE: dict[tuple, str] = {}
_CACHE_LIMIT = 1 << 16
_KEY_NUMBERS = AttrNumbers()
"""The numbering of `_KEY_CACHE`'s keys (replaced whenever that is emptied)."""


def render_type(ty: Attribute) -> str:
    """Render one type the way op keys do: `T<64x128xf32>` for tensors, MLIR text otherwise."""
    if isinstance(ty, TensorType):
        dims = ["?" if d < 0 else str(d) for d in ty.get_shape()]
        return "T<" + "".join(d + "x" for d in dims) + str(ty.element_type) + ">"
    return str(ty)


def render_signature(
    name: str, operand_types: Sequence[Attribute], result_types: Sequence[Attribute]
) -> str:
    """The key of an op called `name` with these operand and result types."""
    args = "".join(render_type(t) + "," for t in operand_types)
    if len(result_types) == 1:
        out = render_type(result_types[0])
    elif result_types:
        out = "(" + "".join(render_type(t) + "," for t in result_types) + ")"
    else:
        out = ""
    return f"{name};{args}|{out}"


def key_name(op: Operation) -> str:
    """The name part of `op`'s key: its op name (the real one also for an unregistered op),
    except for a generic ATen call (`aten.op`), which is named by its `target` overload
    (`aten.addmm.default`): the calls it stands for launch different kernels, and one key per
    type signature would give a measured `aten.mul.Tensor` to an `aten.add.Tensor`."""
    if isinstance(op, AtenOp):
        return op.target.data
    return op_display_name(op)


def op_key(op: Operation) -> str:
    """The profile key of `op` (module doc; `key_name` names it)."""
    global _KEY_NUMBERS
    name = key_name(op)
    number = _KEY_NUMBERS.number
    sig = (
        name,
        *[number(v.type) for v in op.operands],
        None,
        *[number(r.type) for r in op.results],
    )
    key = _KEY_CACHE.get(sig)
    if key is None:
        key = render_signature(name, [v.type for v in op.operands], [r.type for r in op.results])
        if len(_KEY_CACHE) >= _CACHE_LIMIT or len(_KEY_NUMBERS) >= _CACHE_LIMIT:
            # bound the memory of long-running processes: keys and numbers go together
            _KEY_CACHE.clear()
            _KEY_NUMBERS = AttrNumbers()
        else:
            _KEY_CACHE[sig] = key
    return key


def key_op_name(key: str) -> str:
    """The op name part of a key (everything before the first ';')."""
    return key.split(";", 1)[0]
