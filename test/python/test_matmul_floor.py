"""The matmul latency floor of devices without a matmul table (cost/devices.py `min_matmul_us`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.cost.devices import get_device
from lancet_mlir.cost.roofline import load_matmul_calibration, matmul_time_us, roofline_time_us

SMALL_FLOPS = 2.0 * 16 * 512 * 512  # a batch-16 MLP layer: 8.4 MFLOP
SMALL_BYTES = 4.0 * (16 * 512 + 512 * 512 + 16 * 512)  # f32 A, B, C: 1.1 MB


@pytest.mark.parametrize("device", ["v100", "a100", "gb200"])
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_small_matmul_floored_at_5us(device: str, dtype: str) -> None:
    """Tableless devices: a tiny matmul costs 5 us (its roofline is 0.03-1.5 us), not the 2 us
    launch floor."""
    dev = get_device(device)
    assert dev.matmul_table is None
    assert roofline_time_us(SMALL_FLOPS, SMALL_BYTES, dtype, dev) < 2.0
    assert matmul_time_us(SMALL_FLOPS, SMALL_BYTES, dtype, dev) == 5.0


def test_large_matmul_and_empty_unchanged() -> None:
    """A large V100 matmul keeps its roofline: 2 x 4096^3 FLOP at 0.75 x 15.7 TFLOP/s; an op
    with no FLOPs and no bytes stays free."""
    v100 = get_device("v100")
    flops = 2.0 * 4096**3
    assert matmul_time_us(flops, 0.0, "f32", v100) == pytest.approx(flops / (0.75 * 15.7e12) * 1e6)
    assert matmul_time_us(0.0, 0.0, "f32", v100) == 0.0


def test_table_devices_use_their_curve() -> None:
    """The H100 keeps its measured curve (the floor the 5 us is taken from: 4.992 us at 33.5
    MFLOP in its table)."""
    h100 = get_device("h100")
    curve = load_matmul_calibration("matmul_h100.csv")["bf16"]
    assert curve(33554432.0) == pytest.approx(4.992)
    assert matmul_time_us(SMALL_FLOPS, SMALL_BYTES, "bf16", h100) == pytest.approx(
        max(curve(SMALL_FLOPS), SMALL_BYTES / (0.8 * 3350e9) * 1e6)
    )


@settings(max_examples=60, deadline=None)
@given(
    flops=st.floats(0, 1e13),
    nbytes=st.floats(0, 1e10),
    dtype=st.sampled_from(["f32", "f16", "f64"]),
)
def test_floor_is_max_of_roofline_and_5us(flops: float, nbytes: float, dtype: str) -> None:
    """On a tableless device a matmul is max(roofline, 5 us) unless it does nothing at all."""
    a100 = get_device("a100")
    roof = roofline_time_us(flops, nbytes, dtype, a100)
    expected = max(roof, 5.0) if roof > 0 else 0.0
    assert matmul_time_us(flops, nbytes, dtype, a100) == expected
