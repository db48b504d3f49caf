"""Capture one training step as one FX graph of ATen ops: `make_fx` under a fake process group."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch.distributed as dist
from torch.fx import GraphModule
from torch.fx.experimental.proxy_tensor import make_fx

from lancet_mlir.support.errors import UserError


def capture(
    step: Callable[..., Any], args: Sequence[Any], *, world_size: int, rank: int = 0
) -> GraphModule:
    """`make_fx(step, tracing_mode="fake")(*args)` as rank `rank` of a fake world of
    `world_size` ranks (the default group, named '0', as under gloo or NCCL).

    A process group already initialised is used as it is (its world size must match);
    otherwise a fake one is created and destroyed afterwards.
    """
    own = not dist.is_initialized()
    if own:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    elif dist.get_world_size() != world_size:
        raise UserError(
            f"world_size {world_size} differs from the initialised process group's "
            f"{dist.get_world_size()}"
        )
    try:
        return make_fx(step, tracing_mode="fake")(*args)
    finally:
        if own:
            dist.destroy_process_group()
