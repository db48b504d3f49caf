"""PyTorch round trip on 2 real gloo ranks (one spawn for every check): the captured graph,
the optimized graph and eager autograd give `torch.equal` results for the capacity MoE, the
dropless MoE and the DDP MLP, and through `torch.compile` with the backend; the importer's
collective bytes equal what gloo sent."""

from __future__ import annotations

from functools import cache

import pytest
from torch_ranks import run_ranks

CHECKS = [
    "capacity",
    "capacity:2",
    "dropless",
    "mlp",
    "mlp:compile",
    "capacity:compile",
    "plan:auto",
]


@cache
def results() -> list[dict]:
    return run_ranks(CHECKS)


@pytest.mark.parametrize("name", ["capacity", "dropless", "mlp"])
def test_values_equal_eager(name: str) -> None:
    for rank in results():
        assert rank[name]["original_equal"]
        assert rank[name]["optimized_equal"]


def test_partitioned_capacity_moe_values() -> None:
    # 2 parts along the capacity axis: 1 layer's forward and backward all-to-all pairs,
    # each split in 2 (8 all-to-alls). Slicing and concatenation are exact and no sum is
    # split (weight gradients read the concatenated tensors), so only the matmul kernels'
    # blocking of fewer rows may differ: f32 tolerance 1e-5 (relative and absolute).
    for rank in results():
        got = rank["capacity:2"]
        assert got["all_to_alls"] == 8
        assert got["original_equal"]
        assert got["optimized_close"], got["max_abs_diff"]


def test_library_plan_values() -> None:
    # partition="auto": the partition library's plan (the forward pair in 2 parts along the
    # capacity axis, the backward pair whole: test_torch_plan.py) realised on the FX graph
    # and scheduled; 4 + 2 all-to-alls (the old uniform route had 4 or 8). Values as for
    # forced parts: f32 tolerance 1e-5 (relative and absolute).
    for rank in results():
        got = rank["plan:auto"]
        assert got["moe_plan"] == [("all_to_all_single", 2)]
        assert got["all_to_alls"] == 6
        assert got["original_equal"]
        assert got["optimized_close"], got["max_abs_diff"]


def test_compiled_backend_equal_eager() -> None:
    for rank in results():
        assert rank["mlp:compile"]["compiled_equal"]
        assert rank["mlp:compile"]["graphs"] == 1  # the whole step as one graph
        # the capacity MoE partitioned in 2 inside the backend: f32 tolerance as above
        assert rank["capacity:compile"]["moe_parts"] == [2]
        assert rank["capacity:compile"]["compiled_close"]


@pytest.mark.parametrize(("name", "sent"), [("capacity", 8704), ("mlp", 3264)])
def test_collective_bytes_equal_what_gloo_sent(name: str, sent: int) -> None:
    # mlp: 3 x (16x16 + 16) f32 gradients = 3264 bytes; capacity: 4 all-to-alls of 16x16
    # f32 (1024 B each) + the 7 dense gradients' 16+16+16*48+16*16+16+16+16*4 floats
    for rank in results():
        assert rank[name]["sent_bytes"] == rank[name]["imported_bytes"] == sent


def test_dropless_bytes_are_an_upper_bound() -> None:
    for rank in results():
        assert rank["dropless"]["sent_bytes"] <= rank["dropless"]["imported_bytes"]
