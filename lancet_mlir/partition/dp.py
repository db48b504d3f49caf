"""Lancet's dynamic program over ranges (lancet-algorithms.md §8.3), on plain data.

The op sequence is cut into K groups; a solution cuts the groups into consecutive ranges
of at most `window` groups and decides, per range, how it runs (partitioned or not). The
cost is additive over ranges (each range is costed in isolation, starting with its inputs
ready), so `dp[i] = min_j dp[j] + local(j, i)` over `i - window <= j < i` is exact.
The local cost is a parameter, so tests can mock it and the pass can plug in the phased
pipeline simulation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

LocalCost = Callable[[int, int], float]
"""local(j, i): cost of running groups [j, i) as one range (the best choice inside it)."""


@dataclass(frozen=True)
class RangePlan:
    """The optimal segmentation: total cost and the ranges [j, i) in order."""

    cost: float
    ranges: list[tuple[int, int]]


def best_ranges(num_groups: int, window: int, local: LocalCost) -> RangePlan:
    """Minimise the sum of `local(j, i)` over a segmentation of groups [0, num_groups)
    into ranges of at most `window` groups.

    Each local cost is evaluated once (O(K·W) calls). Ties keep the longest last range
    (smallest j), so equal-cost plans partition larger ranges; the result is deterministic.
    """
    if num_groups < 0 or window < 1:
        raise ValueError(f"need num_groups >= 0 and window >= 1, got {num_groups}, {window}")
    best = [0.0] + [float("inf")] * num_groups
    cut = [0] * (num_groups + 1)
    for i in range(1, num_groups + 1):
        for j in range(max(0, i - window), i):
            cost = best[j] + local(j, i)
            if cost < best[i]:
                best[i], cut[i] = cost, j
    ranges: list[tuple[int, int]] = []
    i = num_groups
    while i > 0:
        ranges.append((cut[i], i))
        i = cut[i]
    return RangePlan(best[num_groups], ranges[::-1])
