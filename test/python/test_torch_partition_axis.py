"""The split-axis algebra of the FX MoE partitioner (`exporters/torch/moe.py`), by property:
slicing a tensor along its axis and then reshaping the part gives what slicing the reshaped
tensor along the axis `_reshaped` computes gives, for random shapes and regroupings."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.exporters.torch.moe import Desc, _expanded, _part_shape, _reshaped


def _slice(x: torch.Tensor, desc: Desc, start: int, stop: int) -> torch.Tensor:
    shape = list(x.shape)
    view = x.reshape(_expanded(shape, desc, desc.size))
    part = view.narrow(desc.dim + 1, start, stop - start)
    return part.reshape(_part_shape(shape, desc, stop - start))


@st.composite
def cases(draw):
    outer = draw(st.integers(1, 3))
    size = draw(st.integers(2, 4))
    inner = draw(st.integers(1, 3))
    before = draw(st.lists(st.integers(1, 3), max_size=2))
    after = draw(st.lists(st.integers(1, 3), max_size=2))
    shape = [*before, outer * size * inner, *after]
    desc = Desc(len(before), size, inner)
    # a regrouping: the same elements as a list of factors merged into new dimensions
    factors = [*before, outer, size, inner, *after]
    cuts = sorted(set(draw(st.lists(st.integers(1, len(factors) - 1), max_size=4))))
    bounds = [0, *cuts, len(factors)]
    new = [math.prod(factors[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    start = draw(st.integers(0, size - 1))
    stop = draw(st.integers(start + 1, size))
    return shape, desc, new, start, stop


@settings(max_examples=200, deadline=None)
@given(cases())
def test_reshape_keeps_the_parts(case) -> None:
    shape, desc, new, start, stop = case
    x = torch.arange(math.prod(shape)).reshape(shape)
    moved = _reshaped(desc, shape, new)
    if moved is None:  # the axis straddles new dimensions: the partitioner gives up
        return
    assert new[moved.dim] % (moved.size * moved.inner) == 0
    part = _slice(x, desc, start, stop)
    again = _slice(x.reshape(new), moved, start, stop)
    assert torch.equal(part.reshape(again.shape), again)


def test_capacity_layout_by_hand() -> None:
    # rows [ranks=2, experts=2, capacity=4] x d=16, viewed as [2, 2, 4, 16]: capacity is dim 2
    assert _reshaped(Desc(0, 4, 1), [16, 16], [2, 2, 4, 16]) == Desc(2, 4, 1)
    # the whole chunk (experts x capacity = 8 slots) straddles two dimensions: refused
    assert _reshaped(Desc(0, 8, 1), [16, 16], [2, 2, 4, 16]) is None
    # [experts, ranks x capacity, d]: capacity innermost in dim 1
    assert _reshaped(Desc(2, 4, 1), [2, 2, 4, 16], [2, 8, 16]) == Desc(1, 4, 1)
