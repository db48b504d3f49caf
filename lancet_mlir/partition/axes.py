"""Split-axis inference: a small exact constraint solver over the registry's rules.

Lancet solves the split axis of every op of a region with CP-SAT (lancet-algorithms.md
§8.4); here the model is small enough for an exact branch-and-bound search on plain data.

A value of a partitioned region is chunked along `(axis, groups)`: the dimension `axis`
holds `groups` consecutive blocks (one per rank after an all-to-all; 1 = contiguous) and
part k holds the k-th of n consecutive row ranges of every block B, of
`base.part_sizes(B, n)` rows (n need not divide B: the first B mod n parts get one row
more). An op joins the region with one
*option*: a chunking (or `None` = used whole, `PARTIAL` = per-part partial sums) per
operand and result, derived from

* compute ops: the registry's partition combinations (`rules.partition_combos`); blocks
  (groups > 1) pass through an op only when every split dimension keeps its size, so rows
  line up one to one;
* a single-tensor `comm.all_to_all` (split s, concat c): any other axis passes through
  unchanged; a contiguous chunking along c becomes G blocks (G = group size: chunk k of
  every rank); G blocks along s become contiguous again (the returning all-to-all);
* a single-tensor `comm.all_to_all` whose split and concat axes coincide (PyTorch's
  `all_to_all_single`: the rows of rank j's chunk go to rank j and come back in rank order
  along the same axis): g blocks along s stay g blocks, for every g that is a multiple of
  G and divides the dimension (the capacity slots of each local expert of each rank's
  chunk are the blocks of g = ranks x local experts); the solver tries one such g at a
  time, the fewest blocks first, and keeps the first that a region takes (more blocks
  would only cut the same slots finer);
* in a block with such an all-to-all, a reshape also takes a chunking whose blocks it keeps
  as whole rows of one dimension (`blocks.reshaped_chunking`: `[R, d]` in blocks of the
  capacity slots viewed as `[ranks, experts, capacity, d]` is contiguous along capacity,
  `[experts, ranks x capacity, d]` is G blocks), among the block counts in use (1, G and
  the all-to-all's g: a reshape to any other count is not followed); a block without such
  an all-to-all keeps the registry's reshape rule alone (as before);

Part counts: n parts need at least one row per part of every split block, and an op
whose split blocks differ in size (a reshape merging dimensions) keeps its rows in line
only when n divides every one of them; otherwise uneven parts of equal blocks line up row
for row (`fits_parts`).

Constraints: an op in the region reads every region-produced operand with exactly the
producer's chunking (never `None`, never a `PARTIAL` value); operands from outside the
region are split at the border (or used whole); every result is split or `PARTIAL`.
The region must be pipelinable: no path leaves it and re-enters it (an op left out
that reads the region's results would otherwise be a barrier inside the pipeline); paths
are checked within `candidates`, so pass a contiguous range of program order. Ops that
cannot satisfy the constraints are left out: the region shrinks instead of failing. The
search maximises the total weight (e.g. time) of the ops in the region; required ops
(`anchors`) must be in it. Deterministic: options are tried in registry order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from xdsl.ir import Operation, SSAValue

from lancet_mlir.dialects.comm import AllToAllOp
from lancet_mlir.dialects.comp import ReshapeOp
from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.partition.base import shape_of, value_ref
from lancet_mlir.partition.blocks import reshaped_chunking
from lancet_mlir.partition.rules import PARTIAL, partition_combos

Chunking = tuple[int, int]
"""(axis, groups) of a chunked value."""

Slot = Chunking | str | None
"""How one operand or result is partitioned: a chunking, `PARTIAL` or `None` (whole)."""

Option = tuple[tuple[Slot, ...], tuple[Slot, ...]]
"""(operand slots, result slots) of one way for an op to join a region."""

_SEARCH_BUDGET = 200_000
"""Search steps before the best region found so far is returned (deterministic)."""


@dataclass(frozen=True)
class AxisSolution:
    """The region found: the option of every op in it (node -> option), by node order."""

    options: dict[int, Option]
    weight: float
    exact: bool
    """False when the search budget ran out (the solution is then the best found)."""

    @property
    def nodes(self) -> list[int]:
        """The ops in the region, in node (program) order."""
        return sorted(self.options)


def _a2a_group(op: AllToAllOp) -> tuple[int, int, int] | None:
    """(split, concat, group size) of a single-tensor all-to-all, else None (split = concat:
    the group size of the op, when it divides the split dimension)."""
    if len(op.inputs) != 1:
        return None
    s, c = op.split_axis.value.data, op.concat_axis.value.data
    ins, outs = shape_of(op.operands[0]), shape_of(op.results[0])
    if ins is None or outs is None:
        return None
    if s == c:
        size = op.group_size()
        if size is None or size < 2 or ins[s] % size:
            return None
        return s, c, size
    if ins[c] < 1:
        return None
    return s, c, outs[c] // ins[c]


def _flat_groups(op: AllToAllOp) -> list[int]:
    """The block counts of an all-to-all with split = concat: multiples of the group size
    that divide the split dimension."""
    info = _a2a_group(op)
    if info is None or info[0] != info[1]:
        return []
    s, _, size = info
    rows = (shape_of(op.operands[0]) or ())[s]
    return [g for g in range(size, rows + 1, size) if rows % g == 0]


def _a2a_options(op: AllToAllOp, groups: Sequence[int]) -> list[Option]:
    info = _a2a_group(op)
    if info is None:
        return []
    s, c, size = info
    rank = len(shape_of(op.operands[0]) or ())
    if s == c:
        rows = (shape_of(op.operands[0]) or ())[s]
        options: list[Option] = [
            (((s, g),), ((s, g),)) for g in groups if g % size == 0 and rows % g == 0
        ]
    else:
        options = [(((c, 1),), ((c, size),)), (((s, size),), ((s, 1),))]
    for axis in range(rank):
        if axis not in (s, c):
            options += [(((axis, g),), ((axis, g),)) for g in groups]
    return options


def _reshape_shapes(op: Operation) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    if not isinstance(op, ReshapeOp) or len(op.operands) != 1:
        return None
    old, new = shape_of(op.operands[0]), shape_of(op.results[0])
    return None if old is None or new is None else (tuple(old), tuple(new))


def _block_reshapes(op: Operation, groups: Sequence[int]) -> list[Option]:
    """A reshape's chunkings that keep their blocks whole rows (module doc)."""
    shapes = _reshape_shapes(op)
    if shapes is None:
        return []
    old, new = shapes
    options: list[Option] = []
    for axis in range(len(old)):
        for g in groups:
            out = reshaped_chunking((axis, g), old, new)
            if out is not None and out[1] in groups:
                options.append((((axis, g),), (out,)))
    return options


def _sizes_kept(op: Operation, cin: tuple, cout: tuple) -> bool:
    """True when every split dimension of the combination has one common size."""
    sizes = set()
    for values, axes in ((op.operands, cin), (op.results, cout)):
        for v, ax in zip(values, axes, strict=True):
            if isinstance(ax, int):
                shape = shape_of(v)
                sizes.add(None if shape is None else shape[ax])
    return len(sizes) == 1 and None not in sizes


def _blocks(op: Operation, option: Option) -> tuple[int, ...]:
    """The block sizes (dimension / groups) that `option` splits, in slot order."""
    blocks: list[int] = []
    for values, slots in ((op.operands, option[0]), (op.results, option[1])):
        for v, s in zip(values, slots, strict=True):
            if isinstance(s, tuple):
                blocks.append((shape_of(v) or (0,) * (s[0] + 1))[s[0]] // s[1])
    return tuple(blocks)


def fits_parts(blocks: Sequence[int], n: int) -> bool:
    """True when `n` parts can split blocks of these sizes of one op: at least one row per
    part, and n divides them all unless they are all equal (then part k has the same rows
    in every one)."""
    if not blocks:
        return True
    if min(blocks) < n:
        return False
    return len(set(blocks)) == 1 or all(b % n == 0 for b in blocks)


def op_options(op: Operation, groups: Sequence[int] = (1,), blocks: bool = False) -> list[Option]:
    """Every way for `op` to join a region, given the block counts in use (1 first);
    `blocks`: a reshape also keeps blocks as whole rows (module doc)."""
    if isinstance(op, AllToAllOp):
        return _a2a_options(op, groups)
    options: list[Option] = []
    for cin, cout in partition_combos(op):
        if any(ax is None for ax in cout):
            continue  # an op in a region splits (or partially sums) every result
        for g in groups:
            if g > 1 and not _sizes_kept(op, cin, cout):
                continue

            def slot(ax: object, g: int = g) -> Slot:
                return (ax, g) if isinstance(ax, int) else ax  # type: ignore[return-value]

            options.append((tuple(slot(a) for a in cin), tuple(slot(a) for a in cout)))
    if blocks:
        options += [o for o in _block_reshapes(op, groups) if o not in options]
    return options


def _keeps_fixed(op: Operation, option: Option, fixed: Mapping[SSAValue, Slot] | None) -> bool:
    """True when `option` gives every pinned value of `op` its pinned slot."""
    if not fixed:
        return True
    for values, slots in ((op.operands, option[0]), (op.results, option[1])):
        for v, s in zip(values, slots, strict=True):
            if v in fixed and fixed[v] != s:
                return False
    return True


def solve_axes(
    graph: DataflowGraph,
    candidates: Sequence[int],
    anchors: Sequence[int] = (),
    weights: Mapping[int, float] | None = None,
    parts: int = 2,
    budget: int = _SEARCH_BUDGET,
    cache: dict[tuple[int, tuple[int, ...]], list[tuple[Option, tuple[int, ...]]]] | None = None,
    fixed: Mapping[SSAValue, Slot] | None = None,
    partial: bool = True,
) -> AxisSolution | None:
    """The heaviest region within `candidates` that contains every anchor and that `parts`
    parts can split (`fits_parts` for every op); None when the anchors cannot all join one
    region. Weights default to 1 per op. `cache` may carry the ops' options between calls
    on the same graph. `fixed` pins the slot of values: an op of the region that reads or
    produces one of them must take it with exactly that slot (e.g. a region whose border
    value is to come out, or go in, split along the token axis). `partial=False` leaves out
    ops whose results would be per-part partial sums (weight gradients stay whole)."""
    nodes = sorted(set(candidates) | set(anchors))
    base = [1]
    flat: list[int] = []
    for i in nodes:
        op = graph.ops[i]
        info = _a2a_group(op) if isinstance(op, AllToAllOp) else None
        if info is not None and info[2] not in base:
            base.append(info[2])
        if info is not None and info[0] == info[1]:
            assert isinstance(op, AllToAllOp)
            flat += [g for g in _flat_groups(op) if g not in flat]
    cache = {} if cache is None else cache
    args = (cache, weights, parts, budget, fixed, partial)
    if not flat:
        return _branch_and_bound(graph, nodes, set(anchors), sorted(base), False, *args)
    # split = concat: one block count of the all-to-alls at a time, the fewest blocks (the
    # largest, e.g. one per expert of each rank's chunk) first; the first that a region
    # takes is kept (more blocks only cut the same slots finer)
    for g in sorted(flat):
        groups = sorted(set(base) | {g})
        found = _branch_and_bound(graph, nodes, set(anchors), groups, True, *args)
        if found is not None:
            return found
    return None


def _branch_and_bound(
    graph: DataflowGraph,
    nodes: list[int],
    required: set[int],
    groups: list[int],
    flat: bool,
    cache: dict[tuple[int, tuple[int, ...]], list[tuple[Option, tuple[int, ...]]]],
    weights: Mapping[int, float] | None,
    parts: int,
    budget: int,
    fixed: Mapping[SSAValue, Slot] | None,
    partial: bool,
) -> AxisSolution | None:
    """The search of `solve_axes` with the block counts `groups` (`flat`: the block
    counts of an all-to-all with split = concat are in use, module doc)."""
    for i in nodes:
        if (i, tuple(groups)) not in cache:
            op = graph.ops[i]
            cache[(i, tuple(groups))] = [(o, _blocks(op, o)) for o in op_options(op, groups, flat)]
    domains = {
        i: [
            o
            for o, blocks in cache[(i, tuple(groups))]
            if fits_parts(blocks, parts)
            and _keeps_fixed(graph.ops[i], o, fixed)
            and (partial or PARTIAL not in o[1])
        ]
        for i in nodes
    }
    w = {i: (1.0 if weights is None else float(weights.get(i, 0.0))) for i in nodes}
    operand_refs = {i: [value_ref(graph, v) for v in graph.ops[i].operands] for i in nodes}
    suffix = [0.0] * (len(nodes) + 1)
    for t in range(len(nodes) - 1, -1, -1):
        # an op with no option can never join: its weight bounds nothing
        suffix[t] = suffix[t + 1] + (w[nodes[t]] if domains[nodes[t]] else 0.0)
    chosen: dict[int, Option] = {}
    downstream: set[int] = set()  # ops left out that read the region's results
    best: dict[int, Option] | None = None
    best_weight = -1.0
    steps = 0

    def fits(i: int, option: Option) -> bool:
        for ref, want in zip(operand_refs[i], option[0], strict=True):
            if ref is not None and ref[0] in downstream:
                return False  # the path would leave the region and come back
            if ref is None or ref[0] not in chosen:
                continue  # from outside the region: split at the border or used whole
            producer = chosen[ref[0]]
            have = producer[1][ref[1]]
            if have == PARTIAL or want is None or want != have:
                return False
        return True

    # with an all-to-all of split = concat (many block counts, module doc): an op left out
    # below the region from which a required op is reachable within `nodes` dooms the
    # branch (every op between them is left out below too, so the anchor cannot join);
    # cut there instead of trying every subset of the ops between
    reach: dict[int, bool] = {}
    position = {i: t for t, i in enumerate(nodes)}

    def doomed(i: int) -> bool:
        if not flat:
            return False
        if i not in reach:
            users = {r for r in nodes if any(ref is not None and ref[0] == i
                                             for ref in operand_refs[r])}  # fmt: skip
            reach[i] = any(
                u in required or doomed(u) for u in sorted(users, key=lambda u: position[u])
            )
        return reach[i]

    def search(t: int, weight: float) -> None:
        nonlocal best, best_weight, steps
        steps += 1
        if weight + suffix[t] <= best_weight or steps > budget:
            return
        if t == len(nodes):
            best, best_weight = dict(chosen), weight
            return
        i = nodes[t]
        for option in domains[i]:
            if fits(i, option):
                chosen[i] = option
                search(t + 1, weight + w[i])
                del chosen[i]
        if i in required:
            return
        below = any(r is not None and (r[0] in chosen or r[0] in downstream)
                    for r in operand_refs[i])  # fmt: skip
        if below and doomed(i):
            return  # an anchor reads it: the anchor could never join
        if below:
            downstream.add(i)
        search(t + 1, weight)
        downstream.discard(i)

    search(0, 0.0)
    if best is None:
        return None
    return AxisSolution(best, best_weight, steps <= budget)


def split_sizes(graph: DataflowGraph, solution: AxisSolution) -> list[tuple[int, int, int]]:
    """(node, block size, full size) of every split dimension of the region's operands and
    results (block size = dimension / groups), by node."""
    out: list[tuple[int, int, int]] = []
    for i, (ins, outs) in sorted(solution.options.items()):
        op = graph.ops[i]
        for values, slots in ((op.operands, ins), (op.results, outs)):
            for v, s in zip(values, slots, strict=True):
                if isinstance(s, tuple):
                    dim = (shape_of(v) or ())[s[0]]
                    out.append((i, dim // s[1], dim))
    return out


def part_counts(graph: DataflowGraph, solution: AxisSolution, max_parts: int) -> list[int]:
    """Every n in 2..max_parts that can split the region (§8.5, with uneven parts)."""
    return [n for n in range(2, max_parts + 1) if unfit(graph, solution, n) is None]


def _unfit_dim(graph: DataflowGraph, solution: AxisSolution, n: int) -> tuple[int, int, int] | None:
    """(node, block, dim) of the first dimension that `n` parts cannot split (see `unfit`)."""
    by_node: dict[int, list[tuple[int, int]]] = {}
    for i, block, dim in split_sizes(graph, solution):
        by_node.setdefault(i, []).append((block, dim))
    for i, sizes in by_node.items():
        blocks = [b for b, _ in sizes]
        if fits_parts(blocks, n):
            continue
        block, dim = min(sizes) if min(blocks) < n else next(s for s in sizes if s[0] % n)
        return i, block, dim
    return None


def unfit(graph: DataflowGraph, solution: AxisSolution, n: int) -> str | None:
    """Why `n` parts cannot split the region: the first dimension with fewer rows than
    parts, or that n does not divide while its op maps it onto a dimension of another
    size; None when n fits."""
    found = _unfit_dim(graph, solution, n)
    if found is None:
        return None
    i, block, dim = found
    name = graph.ops[i].results[0].name_hint if graph.ops[i].results else None
    what = f"'{name}'" if name else graph.ops[i].name
    per = f" ({dim // block} blocks of {block})" if block != dim else ""
    if block < n:
        return f"{n} parts exceed dimension {dim}{per} of {what}: one row per part at least"
    return (
        f"{n} parts do not divide dimension {dim}{per} of {what}, which its op maps "
        f"onto a dimension of another size"
    )


def unfit_op(graph: DataflowGraph, solution: AxisSolution, n: int) -> Operation | None:
    """The op whose dimension `unfit` names (None when n fits)."""
    found = _unfit_dim(graph, solution, n)
    return None if found is None else graph.ops[found[0]]
