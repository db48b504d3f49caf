"""Where a split axis goes through a reshape, on plain shapes (one home for the partition
library's axis solver and the PyTorch exporter's FX rewriter).

A split axis is a factor of one dimension: dimension `dim` of a row-major shape is
`outer x size x inner` and the axis is the middle factor (`size` slots; part k of n takes
the k-th range of the slots in every `outer` block). A reshape keeps the elements in
row-major order, so the axis is the elements `stride = inner x prod(shape[dim + 1:])` apart,
`size` of them per block; after the reshape it is a factor of the one new dimension that
holds that stride, or nowhere (it straddles two dimensions: the reshape cannot be split so).
The partition library's chunking `(axis, groups)` is such a factor with `inner = 1` and
`outer = groups`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Desc:
    """The split axis of a tensor: dimension `dim` is `outer x size x inner` and the axis
    is the middle factor (`size` slots)."""

    dim: int
    size: int
    inner: int


def axis_stride(desc: Desc, shape: Sequence[int]) -> int:
    """Elements between consecutive axis slots in row-major order."""
    return desc.inner * math.prod(shape[desc.dim + 1 :])


def reshaped(desc: Desc, old: Sequence[int], new: Sequence[int]) -> Desc | None:
    """The axis after a (logical row-major) reshape from `old` to `new`, None if it splits."""
    stride = axis_stride(desc, old)
    for j in range(len(new)):
        below = math.prod(new[j + 1 :])
        if below <= stride < below * new[j]:
            if stride % below or new[j] % ((stride // below) * desc.size):
                return None
            return Desc(j, desc.size, stride // below)
    return None


def reshaped_chunking(
    chunking: tuple[int, int], old: Sequence[int], new: Sequence[int]
) -> tuple[int, int] | None:
    """The chunking `(axis, groups)` of a reshape's result from its input's (module doc),
    None when the blocks do not stay whole rows of one dimension of `new`."""
    axis, groups = chunking
    if not 0 <= axis < len(old) or groups < 1 or old[axis] % groups:
        return None
    block = old[axis] // groups
    if block < 1:
        return None
    moved = reshaped(Desc(axis, block, 1), old, new)
    if moved is None or moved.inner != 1:
        return None
    return moved.dim, new[moved.dim] // block


__all__ = ["Desc", "axis_stride", "reshaped", "reshaped_chunking"]
