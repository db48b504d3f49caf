"""`comp.moe_gate_window` / `_dx`: the switch gate of one token part, exact against `moe_gate`.

Cutting S tokens into n consecutive parts (`partition.base.part_sizes`) and threading the
per-expert offsets from zeros, each part's window slot r of expert e is the whole layer's
slot offsets_k[e] + r: mapped back, the parts' combine / dispatch are `moe_gate`'s bit for
bit, their dlogits concatenate to `moe_gate_dx`'s, and dispatching / combining per window
gives the whole layer's expert input and output.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.dialects.kernels import KernelError, TensorSig, get_kernel
from lancet_mlir.partition.base import part_sizes
from lancet_mlir.runtime.kernels import run_kernel

TOP2 = (
    "moe_gate_window supports the switch gate only: top2 places second choices after every "
    "token's first choice, so a part's slots depend on later tokens"
)


def run(name: str, *arrays: Any, **params: Any) -> list[np.ndarray]:
    return run_kernel(name, list(arrays), params)


def test_hand_computed_two_parts() -> None:
    # experts by token: 0, 0, 1, 0, 1 (as test_kernels' moe_gate example), capacity 2
    logits = np.array([[1, 0], [2, 0], [0, 1], [3, 0], [0, 5]], dtype=np.float32)
    combine, dispatch, counts, nxt = run("moe_gate_window", logits[:2], np.zeros(2, np.int64),
                                         capacity=2)  # fmt: skip
    assert (combine.dtype, dispatch.dtype, counts.dtype, nxt.dtype) == (
        np.float32,
        np.float32,
        np.int64,
        np.int64,
    )
    assert counts.tolist() == [2, 0]
    assert nxt.tolist() == [2, 0]
    assert dispatch[0, 0, 0] == dispatch[1, 0, 1] == 1
    assert dispatch.sum() == 2
    assert combine[0, 0, 0] == pytest.approx(1 / (1 + math.exp(-1)), rel=1e-6)
    # part 2 starts with expert 0 full: token 3 is dropped; tokens 2 and 4 take window
    # slots 0 and 1 of expert 1 (absolute slots 0 + 0 and 0 + 1)
    combine, dispatch, counts, nxt = run("moe_gate_window", logits[2:], nxt, capacity=2)
    assert counts.tolist() == [0, 2]
    assert nxt.tolist() == [2, 2]
    expect = np.zeros((3, 2, 2))
    expect[0, 1, 0] = expect[2, 1, 1] = 1
    np.testing.assert_array_equal(dispatch, expect)
    assert combine[2, 1, 1] == pytest.approx(1 / (1 + math.exp(-5)), rel=1e-6)
    assert combine[1].sum() == 0


def test_offsets_shift_the_slots_and_can_exceed_the_capacity() -> None:
    logits = np.array([[0, 1], [0, 2], [3, 0]], dtype=np.float64)  # experts 1, 1, 0
    # expert 1 has 2 of 3 slots taken: token 0 gets window slot 0 (absolute 2), token 1
    # is dropped; expert 0 is past its capacity (5 > 3): token 2 is dropped
    _, dispatch, counts, nxt = run("moe_gate_window", logits, np.array([5, 2]), capacity=3)
    assert counts.tolist() == [0, 1]
    assert nxt.tolist() == [5, 3]
    assert dispatch[0, 1, 0] == 1
    assert dispatch.sum() == 1
    with pytest.raises(KernelError, match="offsets must be >= 0, got -1"):
        run("moe_gate_window", logits, np.array([0, -1]), capacity=3)


def test_shape_rule() -> None:
    k = get_kernel("moe_gate_window")
    logits, offsets = TensorSig((6, 4), "bf16"), TensorSig((4,), "i64")
    combine = TensorSig((6, 4, 3), "bf16")
    counts = TensorSig((4,), "i64")
    assert k.infer([logits, offsets], {"capacity": 3}) == [combine, combine, counts, counts]
    assert k.infer([logits, TensorSig((4,), "i32")], {"capacity": 3})[2] == counts
    assert k.role == "fwd"
    assert (
        k.cost([logits, offsets], [combine, combine, counts, counts], {"capacity": 3})[0] == 13 * 24
    )
    with pytest.raises(KernelError) as err:
        k.infer([logits, offsets], {"capacity": 3, "gate": "top2"})
    assert str(err.value) == TOP2
    with pytest.raises(KernelError, match=r"offsets shape tensor<3xi64> must be \[4\]"):
        k.infer([logits, TensorSig((3,), "i64")], {"capacity": 3})
    with pytest.raises(KernelError, match="offsets must have dtype i32 or i64, got f32"):
        k.infer([logits, TensorSig((4,), "f32")], {"capacity": 3})
    with pytest.raises(KernelError, match="offsets must have rank 1"):
        k.infer([logits, TensorSig((4, 1), "i64")], {"capacity": 3})
    with pytest.raises(KernelError, match="logits must have a float dtype"):
        k.infer([TensorSig((6, 4), "i64"), offsets], {"capacity": 3})
    with pytest.raises(KernelError, match="capacity must be >= 1"):
        k.infer([logits, offsets], {"capacity": 0})
    dx = get_kernel("moe_gate_window_dx")
    assert dx.infer([combine, logits, offsets], {"capacity": 3}) == [logits]
    assert dx.role == "dx"
    with pytest.raises(KernelError) as err:
        dx.infer([combine, logits, offsets], {"capacity": 3, "gate": "top2"})
    assert str(err.value) == TOP2
    with pytest.raises(KernelError, match=r"dcombine shape tensor<6x4x2xbf16> must be"):
        dx.infer([TensorSig((6, 4, 2), "bf16"), logits, offsets], {"capacity": 3})


# ---- the key property: the parts reproduce the whole layer exactly ----------------------------


@st.composite
def layers(draw: st.DrawFn) -> tuple[np.ndarray, int, int]:
    """(logits [S, E], capacity, parts): small integer logits (many ties) or floats, and
    capacities small enough that tokens overflow."""
    s = draw(st.integers(1, 12))
    e = draw(st.integers(1, 5))
    capacity = draw(st.integers(1, 6))
    n = draw(st.integers(1, min(s, 5)))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    if draw(st.booleans()):
        logits = rng.integers(-1, 2, size=(s, e))  # ties everywhere
    else:
        logits = rng.normal(size=(s, e))
    return logits.astype(dtype), capacity, n


def cut(s: int, n: int) -> list[slice]:
    """The n consecutive token ranges of `part_sizes`."""
    bounds = np.cumsum([0, *part_sizes(s, n)])
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def to_absolute(window: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """A part's [S_k, E, C] window with slot r of expert e moved to slot offsets[e] + r
    (rows that would land past the capacity must be empty)."""
    out = np.zeros_like(window)
    cap = window.shape[2]
    for e, off in enumerate(offsets.tolist()):
        room = max(0, cap - off)
        out[:, e, off:] = window[:, e, :room]
        assert not window[:, e, room:].any()
    return out


@settings(max_examples=150, deadline=None)
@given(layers())
def test_parts_reproduce_moe_gate_bit_for_bit(layer: tuple[np.ndarray, int, int]) -> None:
    logits, capacity, n = layer
    whole_c, whole_d = run("moe_gate", logits, capacity=capacity)
    offsets = np.zeros(logits.shape[1], np.int64)
    parts_c, parts_d, total = [], [], 0
    for rows in cut(logits.shape[0], n):
        c, d, counts, nxt = run("moe_gate_window", logits[rows], offsets, capacity=capacity)
        # the kept rows of expert e are exactly the leading counts[e] window rows
        np.testing.assert_array_equal(d.sum(axis=(0, 2)), counts)
        for e, k in enumerate(counts.tolist()):
            np.testing.assert_array_equal(d[:, e, :k].sum(axis=0), np.ones(k))
        np.testing.assert_array_equal(nxt, offsets + counts)
        parts_c.append(to_absolute(c, offsets))
        parts_d.append(to_absolute(d, offsets))
        total += int(counts.sum())
        offsets = nxt
    got_c, got_d = np.concatenate(parts_c), np.concatenate(parts_d)
    assert got_c.dtype == whole_c.dtype
    assert got_c.tobytes() == whole_c.tobytes()
    assert got_d.tobytes() == whole_d.tobytes()
    assert total == int(whole_d.sum())
    np.testing.assert_array_equal(offsets, whole_d.sum(axis=(0, 2)).astype(np.int64))


@settings(max_examples=100, deadline=None)
@given(layers(), st.integers(0, 2**16))
def test_part_gradients_concatenate_to_moe_gate_dx(layer: tuple[np.ndarray, int, int],
                                                   seed: int) -> None:  # fmt: skip
    logits, capacity, n = layer
    rng = np.random.default_rng(seed)
    dcombine = rng.normal(size=(*logits.shape, capacity)).astype(logits.dtype)
    whole = run("moe_gate_dx", dcombine, logits, capacity=capacity)[0]
    offsets = np.zeros(logits.shape[1], np.int64)
    parts = []
    for rows in cut(logits.shape[0], n):
        # the part's window of the (unwindowed) gradient: slot r of e = absolute offsets[e] + r;
        # slots past the capacity hold noise, which must not matter
        window = rng.normal(size=(rows.stop - rows.start, *dcombine.shape[1:])).astype(logits.dtype)
        for e, off in enumerate(offsets.tolist()):
            room = max(0, capacity - off)
            window[:, e, :room] = dcombine[rows, e, off:]
        parts.append(run("moe_gate_window_dx", window, logits[rows], offsets,
                         capacity=capacity)[0])  # fmt: skip
        offsets = run("moe_gate_window", logits[rows], offsets, capacity=capacity)[3]
    got = np.concatenate(parts)
    assert got.dtype == whole.dtype
    assert got.tobytes() == whole.tobytes()


@settings(max_examples=60, deadline=None)
@given(layers(), st.integers(1, 4))
def test_dispatch_and_combine_per_window_equal_the_whole_layer(
    layer: tuple[np.ndarray, int, int], hidden: int
) -> None:
    """Identity experts: each part dispatches its tokens into its window and combines them
    back; the windows moved to their absolute slots sum to the whole layer's expert input,
    and the parts' outputs are the whole layer's."""
    logits, capacity, n = layer
    x = np.random.default_rng(hidden).normal(size=(logits.shape[0], hidden)).astype(logits.dtype)
    whole_c, whole_d = run("moe_gate", logits, capacity=capacity)
    whole_in = run("moe_dispatch", x, whole_d)[0]
    whole_y = run("moe_combine", whole_in, whole_c)[0]
    offsets = np.zeros(logits.shape[1], np.int64)
    expert_in = np.zeros_like(whole_in)
    ys = []
    for rows in cut(logits.shape[0], n):
        c, d, _, nxt = run("moe_gate_window", logits[rows], offsets, capacity=capacity)
        window = run("moe_dispatch", x[rows], d)[0]  # [E, C, M]
        ys.append(run("moe_combine", window, c)[0])
        expert_in += to_absolute(window.transpose(2, 0, 1), offsets).transpose(1, 2, 0)  # [M, E, C]
        offsets = nxt
    np.testing.assert_array_equal(expert_in, whole_in)
    np.testing.assert_array_equal(np.concatenate(ys), whole_y)
