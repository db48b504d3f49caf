"""The collective registry: one entry per collective kind.

An entry says everything the layers below need to know about a kind, so that no layer keeps
its own list: the comm-table key it is costed with (`cost/comm_model.py`), the names comm
tables, nccl-tests logs and profiler traces may call it, whether comm-bucket-fusion may merge
it (`graph/buckets.py`), whether it is an exchange whose window dW computation can fill
(`graph/core.py`), and its Gantt category and colour (`sim/gantt.py`). The op class of a
kind (`comm.py`) names its entry with `KIND`; the executors' implementations are registered by
kind in `runtime/collectives.py` (simulated ranks) and `runtime/mpi.py` (MPI ranks), which sit
below this layer. docs/design.md, "Adding a collective", gives the recipe.
"""

from __future__ import annotations

from dataclasses import dataclass

from lancet_mlir.dialects.vocab import CollectiveKind


@dataclass(frozen=True)
class Collective:
    """One collective kind.

    Attributes:
        kind: the kind (also the `comm.` op name without the dialect).
        table_kind: the comm-table key it is costed with (its own kind, or the kind whose
            curve it shares: all_to_allv is costed as all_to_all).
        aliases: other spellings that comm tables, logs and traces use for it (lower case).
        fusable: comm-bucket-fusion may merge several of it into one op.
        exchange: an expert-parallel exchange (all-to-all) whose window dW can fill.
        category: its Gantt legend label.
        colour: its Gantt colour.
    """

    kind: CollectiveKind
    table_kind: CollectiveKind
    aliases: tuple[str, ...]
    fusable: bool
    exchange: bool
    category: str
    colour: str


COLLECTIVES: dict[CollectiveKind, Collective] = {}
"""Every collective kind, in registration order (the order of tables and messages)."""


def register_collective(entry: Collective) -> Collective:
    """Add `entry` to the registry (ValueError when its kind is taken)."""
    if entry.kind in COLLECTIVES:
        raise ValueError(f"collective kind '{entry.kind}' is registered twice")
    COLLECTIVES[entry.kind] = entry
    return entry


def collective(kind: str) -> Collective:
    """The entry of `kind` (KeyError naming the known kinds)."""
    try:
        return COLLECTIVES[CollectiveKind(kind)]
    except ValueError:
        known = ", ".join(COLLECTIVES)
        raise KeyError(f"unknown collective kind '{kind}' (known: {known})") from None


def table_kinds() -> tuple[CollectiveKind, ...]:
    """The kinds with their own comm tables, in registry order."""
    return tuple(c.kind for c in COLLECTIVES.values() if c.table_kind == c.kind)


def fusable_kinds() -> tuple[CollectiveKind, ...]:
    """The kinds comm-bucket-fusion may merge, in registry order."""
    return tuple(c.kind for c in COLLECTIVES.values() if c.fusable)


def exchange_kinds() -> frozenset[CollectiveKind]:
    """The expert-parallel exchanges (all-to-all kinds)."""
    return frozenset(c.kind for c in COLLECTIVES.values() if c.exchange)


def kind_aliases() -> dict[str, CollectiveKind]:
    """Every spelling of every kind (its own and its aliases) -> its table kind."""
    out: dict[str, CollectiveKind] = {}
    for c in COLLECTIVES.values():
        for name in (c.kind, *c.aliases):
            out[name] = c.table_kind
    return out


K = CollectiveKind
for _entry in (
    Collective(K.ALLREDUCE, K.ALLREDUCE, ("all_reduce", "all-reduce"), fusable=True,
               exchange=False, category="all-reduce", colour="#DD8452"),
    Collective(K.ALLGATHER, K.ALLGATHER, ("all_gather", "all-gather"), fusable=True,
               exchange=False, category="all-gather", colour="#DA8BC3"),
    Collective(K.REDUCE_SCATTER, K.REDUCE_SCATTER, ("reducescatter", "reduce-scatter"),
               fusable=True, exchange=False, category="reduce-scatter", colour="#CCB974"),
    Collective(K.ALL_TO_ALL, K.ALL_TO_ALL, ("alltoall", "all-to-all"), fusable=False,
               exchange=True, category="all-to-all", colour="#C44E52"),
    Collective(K.ALL_TO_ALLV, K.ALL_TO_ALL, ("alltoallv",), fusable=False, exchange=True,
               category="all-to-all", colour="#C44E52"),
):  # fmt: skip
    register_collective(_entry)
del K

__all__ = [
    "COLLECTIVES",
    "Collective",
    "CollectiveKind",
    "collective",
    "exchange_kinds",
    "fusable_kinds",
    "kind_aliases",
    "register_collective",
    "table_kinds",
]
