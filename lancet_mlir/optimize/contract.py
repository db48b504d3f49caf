"""The problem after fusing groups of collectives, as plain data."""

from __future__ import annotations

from collections.abc import Sequence

from lancet_mlir.graph.core import Problem


def contract(
    problem: Problem, groups: Sequence[Sequence[int]], fused_durations: Sequence[float]
) -> tuple[Problem, list[int]]:
    """Merge each group into its last member; returns the new problem and, for each new
    node, its old index (nodes keep their relative order; the fused op is the last member).
    """
    n = len(problem)
    rep = list(range(n))
    duration = list(problem.durations)
    for group, fused in zip(groups, fused_durations, strict=True):
        last = group[-1]
        for m in group:
            rep[m] = last
        duration[last] = fused
    kept = [v for v in range(n) if rep[v] == v]
    new_index = {v: k for k, v in enumerate(kept)}
    preds: list[set[int]] = [set() for _ in kept]
    for v in range(n):
        target = new_index[rep[v]]
        for p in problem.preds[v]:
            if rep[p] != rep[v]:
                preds[target].add(new_index[rep[p]])
    pred_lists = [sorted(s) for s in preds]
    succs: list[list[int]] = [[] for _ in kept]
    for c, ps in enumerate(pred_lists):
        for p in ps:
            succs[p].append(c)

    def kept_flags(flags: list | None) -> list | None:
        return None if flags is None else [flags[v] for v in kept]

    # the fused nodes are collectives: every copy, host sync and virtual node is kept as is
    contracted = Problem(
        pred_lists,
        succs,
        [problem.comm_kind[v] for v in kept],
        [duration[v] for v in kept],
        [problem.role[v] for v in kept],
        kept_flags(problem.copy_queue),
        kept_flags(problem.is_host_sync),
        kept_flags(problem.is_virtual),
    )
    return contracted, kept
