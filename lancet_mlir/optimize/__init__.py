"""Plain-data optimizers over a block's dataflow graph (integer nodes, duration lists).

A layer between `sim/` (which it uses to evaluate schedules) and `passes/` (thin glue that
builds a graph from the IR, calls these functions and applies the decision). Schedules are
handled as per-stream launch chains (compute, communication, and one per copy-engine queue
where the problem has copies; host syncs and virtual nodes are on no stream): with one
communication stream, no overlap slowdown and no launch overhead, the fixed-order makespan
depends only on these chains, not on how they interleave in the block (`optimize.chains`).
"""
