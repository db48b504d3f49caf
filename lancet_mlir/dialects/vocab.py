"""The project's vocabulary as types: op roles, collective kinds and copy queues.

Roles and kinds are `StrEnum`s, so a member equals, hashes and prints as its string
(`Role.DX == "dx"`, `f"{CollectiveKind.ALLREDUCE}"` is `allreduce`): the IR, profiles, comm
tables and reports keep their spelling, and code says what it means instead of repeating bare
strings. `CopyQueue` is an `IntEnum`: the simulator takes one small integer per node.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


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


class CopyQueue(IntEnum):
    """The copy-engine queue of a node (sim/engine.py "Copy engines"): GPUs have a copy engine
    per direction, so a host-to-device copy does not wait behind a device-to-host one. 0 is
    "not a copy" and 1 the queue of the rest, so a list of bools (`True`: a copy) reads as
    queues too."""

    NONE = 0
    """Not a copy."""
    OTHER = 1
    """Device to device, peer to peer, memset, or a copy of unknown direction."""
    HTOD = 2
    """Host to device."""
    DTOH = 3
    """Device to host."""

    @property
    def label(self) -> str:
        """The stream's display name: "copy", "copy HtoD", "copy DtoH"."""
        return {CopyQueue.HTOD: "copy HtoD", CopyQueue.DTOH: "copy DtoH"}.get(self, "copy")


__all__ = ["CollectiveKind", "CopyQueue", "Role"]
