"""The StableHLO import driver: collectives, world size, cost annotations, dead callees."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    SymbolRefAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Block, Operation
from xdsl.pattern_rewriter import PatternRewriteWalker

from lancet_mlir import attrs
from lancet_mlir.cost.hlo_costs import HloCostModel, hlo_attr, hlo_kind
from lancet_mlir.dialects.comm import CollectiveOp, module_world_size
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.importers.stablehlo.lowering import (
    COLLECTIVES,
    UNSUPPORTED_COLLECTIVES,
    replica_groups,
)
from lancet_mlir.importers.stablehlo.patterns import ConvertAsyncCollective, ConvertCollective
from lancet_mlir.support.errors import UserError


@dataclass
class ImportSummary:
    """What `import_stablehlo` did."""

    collectives: dict[str, int] = field(default_factory=dict)
    """Comm ops created, by comm kind (`allreduce`, ...), in first-seen order."""
    async_pairs: int = 0
    glue_ops: int = 0
    annotated_ops: int = 0
    world_size: int | None = None


def import_stablehlo(module: ModuleOp, world_size: int | None = None) -> ImportSummary:
    """Rewrite `module` in place (see the package docstring); returns a summary.

    Raises UserError naming the HLO op when a collective cannot be imported.
    """
    summary = ImportSummary()
    ops = list(module.walk())
    for op in ops:
        if hlo_kind(op) in UNSUPPORTED_COLLECTIVES:
            raise UserError(f"{op_display_name(op)}: unsupported collective", op=op)
        name = op_display_name(op)
        if name in SDY_COLLECTIVES:  # costed as compute they would hide the communication
            raise UserError(
                f"{name}: Shardy's explicit collectives are not imported (lower the module "
                "with JAX's shard_map or export it after Shardy's propagation, as "
                "stablehlo collectives)",
                op=op,
            )
    collectives = [op for op in ops if hlo_kind(op) in COLLECTIVES]
    summary.world_size = _world_size(module, collectives, world_size)
    if summary.world_size is None:
        everyone = next((op for op in collectives if replica_groups(op) is None), None)
        if everyone is not None:  # all ranks of a world of no known size cannot be costed
            raise UserError(
                f"{op_display_name(everyone)}: empty replica_groups (all ranks) but the world "
                "size is unknown (no mhlo.num_partitions / num_replicas, no lancet.world_size): "
                "pass import-stablehlo{world-size=N}",
                op=everyone,
            )
    if summary.world_size is not None:
        module.attributes[attrs.WORLD_SIZE] = IntegerAttr(summary.world_size, i64)

    funcs = _functions(module)
    async_pattern = ConvertAsyncCollective(funcs)
    _walk_once(module, async_pattern)
    summary.async_pairs = async_pattern.converted
    _refuse_wrapped_collectives(module, funcs)
    _erase_unreferenced(module, funcs, async_pattern.callees)
    _walk_once(module, ConvertCollective())

    for op in module.walk():
        if isinstance(op, CollectiveOp):
            summary.collectives[op.KIND] = summary.collectives.get(op.KIND, 0) + 1
        elif attrs.IMPORT_GLUE in op.attributes:
            summary.glue_ops += 1
    funcs = _functions(module)
    costs = HloCostModel(funcs)
    for func in funcs.values():
        for region in func.regions:
            for block in region.blocks:
                summary.annotated_ops += _annotate(block, costs)
    return summary


SDY_COLLECTIVES = frozenset(f"sdy.{k}" for k in (
    "all_gather", "all_reduce", "all_slice", "all_to_all", "collective_permute",
    "reduce_scatter"))  # fmt: skip
"""Shardy's explicit collectives (axis-based, no replica groups): refused, never compute."""


def _refuse_wrapped_collectives(module: ModuleOp, funcs: dict[str, Operation]) -> None:
    """UserError for an `async_start` left unconverted (it wraps more than one collective)
    whose body, or called computation, holds a collective: costed as compute it would hide
    that communication from the scheduler."""
    for op in module.walk():
        if hlo_kind(op) != "async_start":
            continue
        callee = hlo_attr(op, "called_computation")
        bodies = [*op.regions]
        if isinstance(callee, SymbolRefAttr) and callee.root_reference.data in funcs:
            bodies += funcs[callee.root_reference.data].regions
        for region in bodies:
            for inner in region.walk():
                if hlo_kind(inner) in COLLECTIVES:
                    raise UserError(
                        f"{op_display_name(op)}: wraps {op_display_name(inner)} together with "
                        "other ops; only an async pair of one collective is imported",
                        op=op,
                    )


def _walk_once(module: ModuleOp, pattern: ConvertAsyncCollective | ConvertCollective) -> None:
    """Apply `pattern` once to every op (its output never matches it again).

    The walker re-raises a pattern's exception with the module printed as a note; the
    exception itself (a UserError naming the HLO op) is what callers report.
    """
    PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(module)


def _erase_unreferenced(module: ModuleOp, funcs: dict[str, Operation], callees: list[str]) -> None:
    """Erase the called computations of converted async pairs that nothing references now."""
    if not callees:
        return
    referenced = _referenced_symbols(module)
    for name in dict.fromkeys(callees):
        if name not in referenced and name in funcs:
            dead = funcs.pop(name)
            dead.detach()
            dead.erase()


def _annotate(block: Block, costs: HloCostModel) -> int:
    """Set lancet.flops/lancet.bytes on every HLO compute op of `block` and of every block
    nested in its ops; returns how many ops were annotated.

    Ops nested in fusions and reduction regions are costed as if they ran alone: their
    enclosing op already carries the cost of the whole body, and the numbers only matter to
    passes that schedule such a region on its own (without them the cost model would warn).
    """
    count = 0
    last = block.last_op
    for op in block.ops:
        if isinstance(op, CollectiveOp) or (op is last and _is_terminator(op)):
            continue
        cost = costs.node(op) if attrs.TIME_US not in op.attributes else None
        if cost is not None:
            op.attributes[attrs.FLOPS] = FloatAttr(cost[0], f64)
            op.attributes[attrs.BYTES] = FloatAttr(cost[1], f64)
            count += 1
        for region in op.regions:
            for inner in region.blocks:
                count += _annotate(inner, costs)
    return count


def _is_terminator(op: Operation) -> bool:
    name = op_display_name(op)
    return name.endswith(".return") or name == "func.return" or name.endswith(".yield")


def _functions(module: ModuleOp) -> dict[str, Operation]:
    funcs: dict[str, Operation] = {}
    for op in module.body.block.ops:
        sym = op.properties.get("sym_name") or op.attributes.get("sym_name")
        if op_display_name(op) == "func.func" and isinstance(sym, StringAttr):
            funcs[sym.data] = op
    return funcs


def _world_size(
    module: ModuleOp, collectives: Sequence[Operation], override: int | None
) -> int | None:
    if override is not None:
        return override
    existing = module_world_size(module)
    if existing is not None:
        return existing
    parts = module.attributes.get("mhlo.num_partitions")
    replicas = module.attributes.get("mhlo.num_replicas")
    if isinstance(parts, IntegerAttr) or isinstance(replicas, IntegerAttr):
        p = parts.value.data if isinstance(parts, IntegerAttr) else 1
        r = replicas.value.data if isinstance(replicas, IntegerAttr) else 1
        return p * r
    # groups [[0, 1], [2, 3]] are groups of 2 in a world of 4: the world spans every rank named
    spans = [
        max(r for group in g.rank_lists for r in group) + 1
        for op in collectives
        if (g := replica_groups(op)) is not None
    ]
    return max(spans) if spans else None


def _referenced_symbols(module: ModuleOp) -> set[str]:
    names: set[str] = set()
    stack: list[Attribute] = []
    for op in module.walk():
        stack.extend(op.properties.values())
        stack.extend(op.attributes.values())
    while stack:
        attr = stack.pop()
        if isinstance(attr, SymbolRefAttr):
            names.add(attr.root_reference.data)
        elif isinstance(attr, ArrayAttr):
            stack.extend(attr.data)
        elif isinstance(attr, DictionaryAttr):
            stack.extend(attr.data.values())
    return names


def graph_block(module: ModuleOp) -> Block:
    """The block holding the training step: the most collectives, then the most ops.

    For JAX output this is the body of `sdy.manual_computation` (shard_map), of the
    shard_map body function (GSPMD) or of `main` (XLA-compiled modules).
    """
    best: tuple[int, int] = (-1, -1)
    chosen: Block | None = None
    for op in module.walk():
        for region in op.regions:
            for block in region.blocks:
                n_ops = n_comm = 0
                for inner in block.ops:
                    n_ops += 1
                    n_comm += isinstance(inner, CollectiveOp)
                if (n_comm, n_ops) > best:
                    best, chosen = (n_comm, n_ops), block
    if chosen is None:
        raise UserError("module has no block")
    return chosen
