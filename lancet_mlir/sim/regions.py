"""How an op with regions (or a call) is costed from its bodies (issue 17, deliverable 5).

`body_plan(op)` says which simulated blocks make up one execution of `op` and how many times
each runs, so `sim/blocks.py` can cost the op as the simulated makespan of its bodies:

* `scf.execute_region`, `sdy.manual_computation`, `sdy.named_computation`: the body once
  (each block of the region once);
* `scf.if`, `scf.index_switch`, `stablehlo.if` / `case` (and `mhlo.`): the most expensive
  branch (`Alternatives`);
* `scf.for` with constant bounds (`arith.constant` lower bound, upper bound and step): the
  body `ceil((ub - lb) / step)` times (0 when `ub <= lb`);
* `stablehlo.while` / `mhlo.while` in the canonical counter form JAX emits for `lax.scan`
  and `fori_loop`: the condition block is `constant N`, `compare LT (counter, N)`, `return`;
  the counter's initial operand is a constant `c0`; the body returns `add(counter,
  constant s)` with `s > 0`. It runs the body `ceil((N - c0) / s)` times and the condition
  once more than that;
* `scf.while`, or a loop not in that form: the bodies once, with a note (`BodyPlan.note`);
* `func.call` (and `stablehlo.call`) of a function of the module: the callee's body once;
  so is a `stablehlo.composite`'s `decomposition` (it is not a top-level function then).

Every other op with regions keeps the cost model's time. `mhlo.fusion` / `stablehlo.fusion`
are one kernel: their FLOPs are the body's and their bytes only what the fusion reads and
writes (`import-stablehlo` annotates them so), where costing the body op by op would charge
every intermediate to memory and a launch floor to each op (10 multiplies on 8192^2 f32 on an
H100: 3005 us against the kernel's 200 us). The bodies of `stablehlo.reduce`,
`sort`, `scatter`, `all_reduce`, `linalg.generic` ... are scalar computations applied per
element, whose cost the op's own numbers already hold. An op with an explicit
`lancet.time_us` keeps that time too (a measurement of the whole op).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue

from lancet_mlir import attrs
from lancet_mlir.graph.dataflow import op_display_name

ONCE_OPS = frozenset({"scf.execute_region", "sdy.manual_computation", "sdy.named_computation"})
"""Ops whose blocks run once, one after the other."""
ALTERNATIVE_OPS = frozenset({
    "scf.if", "scf.index_switch", "stablehlo.if", "stablehlo.case", "mhlo.if", "mhlo.case",
})  # fmt: skip
"""Ops that run one of their regions: costed as the most expensive."""
HLO_WHILE_OPS = frozenset({"stablehlo.while", "mhlo.while"})
CALL_OPS = frozenset({"func.call", "stablehlo.call", "mhlo.call", "stablehlo.composite",
                      "mhlo.composite"})  # fmt: skip
"""Ops that run a function of the module once: a call (`callee`), or a StableHLO composite,
whose `decomposition` function is what it computes."""


@dataclass(frozen=True)
class BodyPlan:
    """One execution of an op in terms of its bodies.

    `parts`: (block, runs) pairs whose simulated makespans add up (times `runs`);
    `alternatives`: when True, the op costs the largest `runs * makespan` of `parts`
    instead (one branch runs). `trips`: the loop's static trip count (None for non-loops and
    loops whose count is not static). `note`: why the cost may be off (a loop costed once).
    """

    parts: list[tuple[Block, int]] = field(default_factory=list)
    alternatives: bool = False
    trips: int | None = None
    note: str | None = None


def body_plan(op: Operation, functions: dict[str, Block]) -> BodyPlan | None:
    """How `op` is costed from its bodies, or None when the cost model's time stands.

    `functions`: the body block of each `func.func` of the module by symbol name (for calls).
    """
    if attrs.TIME_US in op.attributes:
        return None
    name = op_display_name(op)
    if name in CALL_OPS:
        callee = callee_name(op)
        block = functions.get(callee) if callee is not None else None
        return BodyPlan([(block, 1)]) if block is not None else None
    blocks = [b for r in op.regions for b in r.blocks]
    if not blocks:
        return None
    if name in ONCE_OPS:
        return BodyPlan([(b, 1) for b in blocks])
    if name in ALTERNATIVE_OPS:
        return BodyPlan([(b, 1) for b in blocks], alternatives=True)
    if name == "scf.for":
        trips = _scf_for_trips(op)
        if trips is None:
            return BodyPlan([(b, 1) for b in blocks], note="bounds are not constant")
        return BodyPlan([(b, trips) for b in blocks], trips=trips)
    if name in HLO_WHILE_OPS and len(blocks) == 2:
        trips = hlo_while_trips(op)
        if trips is None:
            return BodyPlan([(b, 1) for b in blocks],
                            note="not a counter loop with constant bounds")  # fmt: skip
        return BodyPlan([(blocks[0], trips + 1), (blocks[1], trips)], trips=trips)
    if name == "scf.while":
        return BodyPlan([(b, 1) for b in blocks], note="scf.while has no static trip count")
    return None


def callee_name(op: Operation) -> str | None:
    """The symbol a call op names (a composite's `decomposition`), or None."""
    attr = _prop(op, "callee")
    if attr is None:
        attr = _prop(op, "decomposition")
    if isinstance(attr, SymbolRefAttr):
        return attr.root_reference.data
    if isinstance(attr, StringAttr):
        return attr.data
    return None


def _prop(op: Operation, name: str) -> Attribute | None:
    """A property, else an attribute, of that name (an IntegerAttr of 0 is falsy: no `or`)."""
    attr = op.properties.get(name)
    return attr if attr is not None else op.attributes.get(name)


def constant_int(value: SSAValue) -> int | None:
    """The integer a value holds when an `arith.constant` or a scalar `stablehlo.constant`
    / `mhlo.constant` defines it; else None."""
    owner = value.owner
    if not isinstance(owner, Operation):
        return None
    name = op_display_name(owner)
    if name not in ("arith.constant", "stablehlo.constant", "mhlo.constant"):
        return None
    attr = _prop(owner, "value")
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    if isinstance(attr, DenseIntOrFPElementsAttr) and not attr.get_shape():
        found = attr.get_values()
        if len(found) == 1 and isinstance(found[0], int):
            return found[0]
    return None


def _ceil_trips(start: int, stop: int, step: int) -> int | None:
    if step <= 0:
        return None
    return max(0, math.ceil((stop - start) / step))


def _scf_for_trips(op: Operation) -> int | None:
    if len(op.operands) < 3:
        return None
    lb, ub, step = (constant_int(v) for v in op.operands[:3])
    if lb is None or ub is None or step is None:
        return None
    return _ceil_trips(lb, ub, step)


def hlo_while_trips(op: Operation) -> int | None:
    """The trip count of a `stablehlo.while` in JAX's canonical counter form (see the module
    doc), or None."""
    cond, body = (r.blocks.first for r in op.regions[:2])
    if cond is None or body is None:
        return None
    ops = list(cond.ops)
    if len(ops) < 2 or op_display_name(ops[-1]) not in ("stablehlo.return", "mhlo.return"):
        return None
    compare = ops[-1].operands[0].owner if ops[-1].operands else None
    if not isinstance(compare, Operation) or op_display_name(compare) not in (
        "stablehlo.compare",
        "mhlo.compare",
    ):
        return None
    if _direction(compare) != "LT" or len(compare.operands) != 2:
        return None
    counter, limit = compare.operands
    if not isinstance(counter, BlockArgument) or counter.block is not cond:
        return None
    stop = constant_int(limit)
    k = counter.index
    if stop is None or k >= len(op.operands):
        return None
    start = constant_int(op.operands[k])
    step = _counter_step(body, k)
    if start is None or step is None:
        return None
    return _ceil_trips(start, stop, step)


def _direction(compare: Operation) -> str | None:
    attr = _prop(compare, "comparison_direction")
    if attr is None:
        return None
    text = str(attr)  # `#stablehlo<comparison_direction LT>` (unregistered attribute)
    for direction in ("LT", "LE", "GT", "GE", "EQ", "NE"):
        if text.rstrip(">").endswith(" " + direction):
            return direction
    return None


def _counter_step(body: Block, k: int) -> int | None:
    """The constant the body adds to block argument `k` for its yielded value `k`."""
    last = body.last_op
    if last is None or k >= len(last.operands) or k >= len(body.args):
        return None
    add = last.operands[k].owner
    if not isinstance(add, Operation) or op_display_name(add) not in ("stablehlo.add", "mhlo.add"):
        return None
    a, b = add.operands
    if a is body.args[k]:
        return constant_int(b)
    if b is body.args[k]:
        return constant_int(a)
    return None
