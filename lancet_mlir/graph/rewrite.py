"""Applying decisions to the IR: reorder a block, check that its order is topological."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import cast

from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue

from lancet_mlir import attrs
from lancet_mlir.dialects.comm import AllToAllVOp, CollectiveOp
from lancet_mlir.graph.dataflow import (
    DataflowGraph,
    block_ops,
    first_forward_use,
    named_effects,
    op_display_name,
)
from lancet_mlir.graph.fill import fused_fill, set_fill
from lancet_mlir.support.errors import OpError


class ScheduleError(OpError, ValueError):
    """A schedule that is not a valid topological order of its block (`op`: the first op
    that uses a value before its definition, when known)."""


def apply_order(graph: DataflowGraph, order: Sequence[int]) -> bool:
    """Relink `graph.block` so its ops follow `order` (terminator stays last).

    O(n): ops are detached and re-inserted once. Returns True if the order changed.
    """
    if list(order) == list(range(len(graph))):
        return False
    if not graph.is_topological(order):
        raise ScheduleError("internal error: schedule is not a topological order")
    assert graph.block is not None
    relink(graph.block, [graph.ops[i] for i in order], graph.terminator)
    return True


def relink(block: Block, ordered: Sequence[Operation], before: Operation | None) -> None:
    """Put `ordered` into `block` in this order, before `before` (None: at the end).

    The one relink of the project: ops of `ordered` already in `block` are detached first,
    new (detached) ops are inserted as they are; ops of the block not in `ordered` keep their
    place. O(len(ordered)). The order is not checked: callers that may produce an invalid
    one re-sort or check right after (`apply_order`, `check_dominance`).
    """
    for op in ordered:
        if op.parent is block:
            block.detach_op(op)
    if before is None:
        block.add_ops(ordered)
    else:
        block.insert_ops_before(list(ordered), before)


def schedulable_blocks(module: ModuleOp) -> Iterator[Block]:
    """Every block nested in `module` (function bodies and nested regions), outermost first.

    The list is snapshot first so callers may reorder ops while iterating.
    """
    blocks: list[Block] = []
    for op in module.walk():
        for region in op.regions:
            blocks.extend(region.blocks)
    yield from blocks


def check_dominance(module: ModuleOp) -> None:
    """Raise ScheduleError naming the first op that uses a value defined later in its block.

    xDSL's verifier does not check SSA dominance, and its parser accepts forward references.
    """
    for block in schedulable_blocks(module):
        ops, _ = block_ops(block)
        bad = first_forward_use(ops)  # as the block's DataflowGraph finds it, not built
        if bad is not None:
            op, late = ops[bad[0]], ops[bad[1]]
            values = ", ".join(f"%{r.name_hint}" for r in late.results if r.name_hint)
            what = f"a result of '{op_display_name(late)}'" + (f" ({values})" if values else "")
            raise ScheduleError(f"'{op_display_name(op)}' uses {what} before its definition", op)


# annotations that describe one op's own timing and are meaningless for a fused op
_PER_OP_ATTRS = frozenset({*attrs.TIMING, attrs.PART})


def _common_attributes(members: Sequence[Operation]) -> dict[str, Attribute]:
    """Discardable attributes every member carries with the same value (e.g. `lancet.role`),
    except per-op timings."""
    common = {k: v for k, v in members[0].attributes.items() if k not in _PER_OP_ATTRS}
    for op in members[1:]:
        common = {k: v for k, v in common.items() if op.attributes.get(k) == v}
    effects = _joined_effects(members)
    if effects is not None:  # the fused op keeps every member's place among their writes
        common[attrs.EFFECTS] = effects
    return common


def _joined_effects(members: Sequence[Operation]) -> Attribute | None:
    """The `lancet.effects` of an op doing all `members`' work: every resource a member
    names, written where one writes it (None: no member names any)."""
    if not any(attrs.EFFECTS in op.attributes for op in members):
        return None
    joined: dict[str, bool] = {}
    for op in members:
        for name, writes in named_effects(op).items():
            joined[name] = joined.get(name, False) or writes
    entries = sorted(f"{'write' if w else 'read'}:{name}" for name, w in joined.items())
    return ArrayAttr([StringAttr(e) for e in entries])


def _sections(op: Operation) -> tuple[tuple[list, list], tuple[list, list]]:
    """((data operands, count operands), (data results, count results)) of a collective;
    only all_to_allv has counts."""
    ins, outs = list(op.operands), list(op.results)
    if not isinstance(op, AllToAllVOp):
        return (ins, []), (outs, [])
    h = len(ins) // 2
    return (ins[:h], ins[h:]), (outs[:h], outs[h:])


def fused_collective(members: Sequence[Operation]) -> tuple[Operation, list[SSAValue]]:
    """A new, detached collective fusing `members` (see `fuse_collectives`) and the members'
    results in the order of its results."""
    first = members[0]
    # all_to_allv lists N data operands before N counts: keep data and counts apart
    sections = [_sections(op) for op in members]
    operands = [v for part in (0, 1) for ins, _ in sections for v in ins[part]]
    olds = [r for part in (0, 1) for _, outs in sections for r in outs[part]]
    kind = cast(type[CollectiveOp], type(first))  # members are collectives of one kind
    fused = kind(operands, [r.type for r in olds], properties=dict(first.properties))
    fused.attributes.update(_common_attributes(members))
    if any(attrs.FILL in op.attributes for op in members):  # members filled differently
        set_fill(fused, fused_fill(cast(Sequence[CollectiveOp], members)))
    return fused, olds


def member_signature(op: Operation) -> tuple:
    """What a collective brings to `fused_collective` (its kind, operand and result types,
    properties and attributes but per-op timings): groups whose members' signatures are
    equal, in order, fuse into equal ops (the fused op's types, properties, common
    attributes and fill are functions of these alone), which cost the same."""
    return (
        type(op), tuple(v.type for v in op.operands), tuple(r.type for r in op.results),
        tuple(sorted(op.properties.items())),
        tuple(sorted((k, v) for k, v in op.attributes.items() if k not in _PER_OP_ATTRS)),
    )  # fmt: skip


def fuse_collectives(members: Sequence[Operation]) -> Operation:
    """Replace compatible collectives by one variadic collective of the same kind.

    The fused op takes the members' operands in member order (for all_to_allv: every data
    operand in member order, then every count operand), copies the first member's
    properties and the attributes every member shares, and is inserted where the last member
    was; uses are rewired and the members erased. Members of different `lancet.fill` give the
    fused op their payload-weighted mean fill. The block may need a topological re-sort
    afterwards (consumers of early members can precede the fused op).
    """
    last = members[-1]
    block = last.parent_block()
    assert block is not None
    fused, olds = fused_collective(members)
    block.insert_op_before(fused, last)
    for old, new in zip(olds, fused.results, strict=True):
        old.replace_all_uses_with(new)
    for op in members:
        op.detach()
        op.erase()
    return fused
