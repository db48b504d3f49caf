"""The project's vocabulary as types: op roles and collective kinds.

Both are `StrEnum`s, so a member equals, hashes and prints as its string (`Role.DX == "dx"`,
`f"{CollectiveKind.ALLREDUCE}"` is `allreduce`): the IR, profiles, comm tables and reports keep
their spelling, and code says what it means instead of repeating bare strings.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """What a compute op does in the training step (its `lancet.role` annotation)."""

    FWD = "fwd"
    """Forward pass."""
    DX = "dx"
    """Backward pass: gradient of an activation (on the critical path)."""
    DW = "dw"
    """Backward pass: gradient of a weight (may be delayed into communication windows)."""
    UPDATE = "update"
    """Optimizer update of a parameter."""


class CollectiveKind(StrEnum):
    """The kind of a collective: its `comm.` op's name without the dialect, and the kind
    that comm tables, profiles and reports use (`dialects/collectives.py` holds one entry per
    kind)."""

    ALLREDUCE = "allreduce"
    ALLGATHER = "allgather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    ALL_TO_ALLV = "all_to_allv"


__all__ = ["CollectiveKind", "Role"]
