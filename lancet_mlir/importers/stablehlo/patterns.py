"""The collective conversions as xDSL rewrite patterns.

* `ConvertAsyncCollective` matches an `*.async_start` wrapping exactly one collective (in its
  region, or named by `called_computation`: MHLO's form) and replaces the start, its
  `async_update`s and its `async_done` by ONE comm op at the start's position.
* `ConvertCollective` matches a synchronous HLO collective and replaces it in place.

Both are applied once per op (`PatternRewriteWalker(..., apply_recursively=False)`), async
pairs first: a collective wrapped by an async start must be converted as part of its pair.
Ops are HLO ops of unregistered dialects, so the patterns match on `hlo_kind`, not on a type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects.builtin import SymbolRefAttr, UnitAttr
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from lancet_mlir import attrs
from lancet_mlir.cost.hlo_costs import hlo_attr, hlo_kind, leaf_types
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.importers.stablehlo.lowering import (
    COLLECTIVES,
    insert_lowered,
    leaves,
    lower,
    place_split,
    rewire,
    verify_comm,
)
from lancet_mlir.support.errors import UserError, about_op


@dataclass
class _AsyncBody:
    """The collective wrapped by an async_start and how its values map to the outside."""

    collective: Operation
    operands: list[SSAValue]
    result_order: list[int]
    callee: str | None


def _async_body(start: Operation, funcs: dict[str, Operation]) -> _AsyncBody | None:
    """The single collective an async_start wraps, or None when it wraps anything else."""
    where = op_display_name(start)
    callee_attr = hlo_attr(start, "called_computation")
    callee = None
    if start.regions and start.regions[0].blocks.first is not None:
        block = start.regions[0].blocks.first
    elif isinstance(callee_attr, SymbolRefAttr):
        callee = callee_attr.root_reference.data
        func = funcs.get(callee)
        if func is None:
            raise UserError(f"{where}: called computation @{callee} not found")
        block = func.regions[0].blocks.first
    else:
        return None
    if block is None:
        return None
    ops = list(block.ops)
    collectives = [o for o in ops if hlo_kind(o) in COLLECTIVES]
    others = [o for o in ops[:-1] if o not in collectives and hlo_kind(o) != "tuple"]
    if len(collectives) != 1 or others:
        return None
    collective = collectives[0]
    outer = list(start.operands)
    operands: list[SSAValue] = []
    for v in collective.operands:
        if isinstance(v, BlockArgument) and v.block is block:
            v = outer[v.index]
        elif isinstance(v.owner, Operation) and v.owner.parent_block() is block:
            return None  # computed inside the wrapper: not a plain collective
        operands.extend(leaves(v, where))
    flat_results: list[SSAValue] = list(collective.results)
    order: list[int] = []
    for v in ops[-1].operands:
        for leaf in _inner_leaves(v, block):
            if leaf not in flat_results:
                raise UserError(f"{where}: wrapped region returns a non-collective value")
            order.append(flat_results.index(leaf))
    return _AsyncBody(collective, operands, order, callee)


def _inner_leaves(value: SSAValue, block: Block) -> list[SSAValue]:
    owner = value.owner
    if (
        isinstance(owner, Operation)
        and owner.parent_block() is block
        and hlo_kind(owner) == "tuple"
    ):
        return [leaf for v in owner.operands for leaf in _inner_leaves(v, block)]
    return [value]


def _async_chain(start: Operation) -> tuple[list[Operation], Operation]:
    """(async_update ops, async_done op) following the start's token."""
    where = op_display_name(start)
    if len(start.results) != 1:
        raise UserError(f"{where}: expected one async token result")
    updates: list[Operation] = []
    token = start.results[0]
    while True:
        users = [use.operation for use in token.uses]
        if len(users) != 1:
            raise UserError(f"{where}: async token must have exactly one user, has {len(users)}")
        user = users[0]
        kind = hlo_kind(user)
        if kind == "async_done":
            return updates, user
        if kind != "async_update":
            raise UserError(f"{where}: async token used by '{op_display_name(user)}'")
        updates.append(user)
        token = user.results[0]


def _check_done_types(done: Operation, wrapped: list[Attribute], collective: Operation) -> None:
    """UserError when the async_done does not return what the wrapped collective computes
    (a mismatched pair would otherwise surface later as an unrelated type error)."""
    got = [leaf for r in done.results for leaf in leaf_types(r.type)]
    if got != wrapped:
        raise UserError(
            f"{op_display_name(done)}: returns ({', '.join(map(str, got))}) but the wrapped "
            f"{op_display_name(collective)} computes ({', '.join(map(str, wrapped))})",
            op=done,
        )


@dataclass
class ConvertAsyncCollective(RewritePattern):
    """An async start/update/done chain wrapping one collective -> one comm op at the start.

    Async wrappers of anything else stay as they are (compute). `converted` counts the
    pairs converted; `callees` lists the called computations they named (MHLO's form), which
    the driver erases once nothing else references them.
    """

    funcs: dict[str, Operation]
    converted: int = 0
    callees: list[str] = field(default_factory=list)

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        """Convert `op` when it is an async_start wrapping exactly one collective."""
        if hlo_kind(op) != "async_start":
            return
        with about_op(op):
            self._convert(op, rewriter)

    def _convert(self, op: Operation, rewriter: PatternRewriter) -> None:
        body = _async_body(op, self.funcs)
        if body is None:
            return
        updates, done = _async_chain(op)
        if done.parent_block() is not op.parent_block():
            raise UserError(f"{op_display_name(op)}: async_done is in a different block", op=done)
        inner_types = [leaf for r in body.collective.results for leaf in leaf_types(r.type)]
        _check_done_types(done, [inner_types[i] for i in body.result_order], body.collective)
        lowered = lower(body.collective, body.operands, inner_types)
        insert_lowered(rewriter, lowered, op)
        results = [lowered.results[i] for i in body.result_order]
        rewire(rewriter, list(done.results), results, op_display_name(done))
        lowered.comm.attributes[attrs.HLO_ASYNC] = UnitAttr()
        for dead in (done, *reversed(updates), op):
            rewriter.erase(dead)
        place_split(rewriter, lowered)
        verify_comm(lowered.comm, op_display_name(body.collective))
        self.converted += 1
        if body.callee:
            self.callees.append(body.callee)


@dataclass
class ConvertCollective(RewritePattern):
    """A synchronous HLO collective -> its comm op, in place (tuples flattened)."""

    converted: int = 0

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        """Convert `op` when it is an HLO all_reduce/all_gather/reduce_scatter/all_to_all."""
        if hlo_kind(op) not in COLLECTIVES:
            return
        with about_op(op):
            self._convert(op, rewriter)

    def _convert(self, op: Operation, rewriter: PatternRewriter) -> None:
        where = op_display_name(op)
        operands = [leaf for v in op.operands for leaf in leaves(v, where)]
        types = [leaf for r in op.results for leaf in leaf_types(r.type)]
        lowered = lower(op, operands, types)
        insert_lowered(rewriter, lowered, op)
        rewire(rewriter, list(op.results), lowered.results, where)
        rewriter.erase(op)
        place_split(rewriter, lowered)
        verify_comm(lowered.comm, where)
        self.converted += 1
