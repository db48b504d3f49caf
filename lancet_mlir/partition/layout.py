"""What applying planned regions does to a block, as data (both `moe-partition` paths).

A plan replaces disjoint program-order ranges of the block by launch orders (the ranges'
other ops and the regions' detached new ops), reroutes every use of a region result outside
the replaced ops to its rebuilt value and erases the replaced originals. `layout` computes
that as data (`Layout`); `planned_graph` is the graph the block has once the layout is
applied and the rebuilds nobody reads are erased, built without touching the IR, so a pass
simulates it before deciding; `apply_layout` then changes the IR once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.ir import Operation, SSAValue

from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.graph.rewrite import relink
from lancet_mlir.partition.region import PartitionedRegion

Piece = tuple[Sequence[int], Sequence[Operation]]
"""A program-order range of nodes (consecutive) and the launch order that replaces it."""


@dataclass(frozen=True)
class Layout:
    """The block's new op sequence, the rerouting of region results to their rebuilt values
    (for every use outside the replaced ops) and the replaced original ops."""

    sequence: list[Operation]
    rename: dict[SSAValue, SSAValue]
    originals: list[Operation]


def layout(
    graph: DataflowGraph, pieces: Sequence[Piece], regions: Sequence[PartitionedRegion]
) -> Layout:
    """The layout of `pieces` (disjoint ranges, each replaced by its order) whose ops
    replace the nodes of `regions`."""
    starts: dict[int, tuple[int, Sequence[Operation]]] = {}
    for nodes, order in pieces:
        starts[nodes[0]] = (nodes[-1], order)
    originals = [graph.ops[i] for r in regions for i in r.nodes]
    rename: dict[SSAValue, SSAValue] = {
        graph.ops[i].results[j]: v for region in regions for (i, j), v in region.merged.items()
    }
    sequence: list[Operation] = []
    i = 0
    while i < len(graph.ops):
        if i in starts:
            last, order = starts[i]
            sequence += order
            i = last + 1
            continue
        sequence.append(graph.ops[i])
        i += 1
    return Layout(sequence, rename, originals)


def planned_graph(
    graph: DataflowGraph, planned: Layout, epilogues: Sequence[Operation]
) -> DataflowGraph:
    """The graph the block of `graph` has once `planned` is applied and the ops of
    `epilogues` (rebuilds, in creation order) nobody reads are erased as `erase_unused`
    does, built from the detached new ops without changing the IR."""
    doomed = set(planned.originals)
    renamed_to: dict[SSAValue, list[SSAValue]] = {}
    for old, new in planned.rename.items():
        renamed_to.setdefault(new, []).append(old)
    erased: set[Operation] = set()

    def used(v: SSAValue) -> bool:
        users = [u.operation for u in v.uses]
        users += [u.operation for old in renamed_to.get(v, ()) for u in old.uses]
        return any(u not in doomed and u not in erased for u in users)

    for op in reversed(epilogues):  # as `erase_unused` does, last first
        if not any(used(r) for r in op.results):
            erased.add(op)
    kept = [op for op in planned.sequence if op not in erased]
    return DataflowGraph.from_ops(kept, graph.block, graph.terminator, rename=planned.rename)


def apply_layout(graph: DataflowGraph, planned: Layout) -> None:
    """Apply `planned` to the block of `graph`: relink the block in the new sequence,
    reroute the rebuilt results and erase the original ops (then `erase_unused` drops the
    rebuilds nobody reads)."""
    block = graph.block
    assert block is not None
    doomed = set(planned.originals)
    for old, new in planned.rename.items():
        old.replace_uses_with_if(new, lambda use: use.operation not in doomed)
    relink(block, planned.sequence, graph.terminator)  # the originals are erased below
    for op in planned.originals:  # detached first: drop_all_references clears the parent only
        op.detach()
    for op in planned.originals:
        op.drop_all_references()
    for op in reversed(planned.originals):
        op.erase(safe_erase=False)
