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


@pytest.mark.parametrize("device", ["v100", "a100", "h100"])
def test_zero_flop_matmul_is_free(device: str) -> None:
    """0x512 . 512x512 (a zero-size dimension): 0 FLOPs, so 0 us, though B's 1 MiB is an
    operand (it cost the 5 us floor before, review #19 finding 14)."""
    nbytes = 4.0 * 512 * 512
    assert matmul_time_us(0.0, nbytes, "f32", get_device(device), 512.0) == 0.0
    assert matmul_time_us(0.0, nbytes, "bf16", get_device(device), 512.0) == 0.0


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
    """On a tableless device a matmul is max(roofline, 5 us) unless it does no arithmetic (0
    FLOPs: a zero-size dimension, whatever its operands' bytes) or nothing at all."""
    a100 = get_device("a100")
    roof = roofline_time_us(flops, nbytes, dtype, a100)
    expected = max(roof, 5.0) if roof > 0 and flops > 0 else 0.0
    assert matmul_time_us(flops, nbytes, dtype, a100) == expected


def _op_time(text: str, device: str) -> float:
    """The cost model's roofline estimate of the single op in `text` (a func body)."""
    from lancet_mlir.cost.roofline import op_roofline_us
    from lancet_mlir.dialects.comp import MatmulDwOp, MatmulOp
    from lancet_mlir.runtime.loader import parse_module_text

    module = parse_module_text(text).module
    op = next(o for o in module.walk() if isinstance(o, (MatmulOp, MatmulDwOp)))
    time = op_roofline_us(op, get_device(device))
    assert time is not None
    return time


def test_k_step_latency_of_small_gemms() -> None:
    """The serial K loop (devices.py `matmul_k_step_us`): a tableless device's matmul floor is
    5 us + 0.025 us per contracted element (V100, A100), K held at 4096."""
    v100 = get_device("v100")
    assert v100.matmul_k_step_us == 0.025
    # DLRM's 16 x 512 x 512 (M x K x N) f32 GEMM: 5 + 0.025 * 512 = 17.8 us (measured 15-23)
    assert matmul_time_us(SMALL_FLOPS, SMALL_BYTES, "f32", v100, 512.0) == pytest.approx(17.8)
    # its K = 16 sibling 512 x 16 x 512: 5 + 0.4 = 5.4 us (measured 5-6)
    assert matmul_time_us(SMALL_FLOPS, SMALL_BYTES, "f32", v100, 16.0) == pytest.approx(5.4)
    # K beyond 4096 is held there: 5 + 0.025 * 4096 = 107.4 us
    a100 = get_device("a100")
    assert matmul_time_us(1e6, 0.0, "f32", a100, 8192.0) == pytest.approx(107.4)
    # a large GEMM keeps its roofline (2 x 4096^3 FLOP: 11.7 ms against a 107 us floor)
    flops = 2.0 * 4096**3
    assert matmul_time_us(flops, 0.0, "f32", v100, 4096.0) == pytest.approx(
        flops / (0.75 * 15.7e12) * 1e6
    )
    # devices with a table take no K term: their curve is measured
    h100 = get_device("h100")
    assert h100.matmul_k_step_us == 0.0
    assert matmul_time_us(SMALL_FLOPS, SMALL_BYTES, "bf16", h100, 512.0) == matmul_time_us(
        SMALL_FLOPS, SMALL_BYTES, "bf16", h100
    )


def test_contraction_length_from_the_op() -> None:
    """K is the op's FLOPs over twice its outputs: a MoE gate's matmul (tokens x d x experts)
    contracts d, its weight gradient (d x tokens x experts) contracts the tokens."""
    gate = """func.func @f(%x: tensor<4096x1024xf32>, %w: tensor<1024x32xf32>) -> tensor<4096x32xf32> {
      %y = comp.matmul %x, %w : (tensor<4096x1024xf32>, tensor<1024x32xf32>) -> tensor<4096x32xf32>
      func.return %y : tensor<4096x32xf32>
    }"""
    # roofline 2*4096*1024*32 / (0.75 * 15.7e12) = 22.8 us (memory: 17.3 MB / 720 GB/s = 24.2
    # us) against the floor 5 + 0.025 * 1024 = 30.6 us
    assert _op_time(gate, "v100") == pytest.approx(30.6)
    dw = """func.func @f(%x: tensor<4096x1024xf32>, %g: tensor<4096x32xf32>) -> tensor<1024x32xf32> {
      %w = comp.matmul_dw %x, %g : (tensor<4096x1024xf32>, tensor<4096x32xf32>) -> tensor<1024x32xf32>
      func.return %w : tensor<1024x32xf32>
    }"""
    assert _op_time(dw, "v100") == pytest.approx(5.0 + 0.025 * 4096)
    # the H100 has a table: no K term, its curve at 268 MFLOP
    curve = load_matmul_calibration("matmul_h100.csv")["tf32"]
    assert _op_time(gate, "h100") == pytest.approx(
        max(
            curve(2.0 * 4096 * 1024 * 32),
            4.0 * (4096 * 1024 + 1024 * 32 + 4096 * 32) / (0.8 * 3350e9) * 1e6,
        )
    )
