"""Plain-data optimizers over a block's dataflow graph (integer nodes, duration lists).

A layer between `sim/` (which it uses to evaluate schedules) and `passes/` (thin glue that
builds a graph from the IR, calls these functions and applies the decision). Schedules are
handled as a pair of per-stream launch chains (compute, communication): with one
communication stream and no overlap slowdown, the fixed-order makespan depends only on
these chains, not on how they interleave in the block.
"""
