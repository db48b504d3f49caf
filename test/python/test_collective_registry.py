"""The collective registry (`dialects/collectives.py`): one entry per kind, from which the
cost model, bucket fusion, dW scheduling and the Gantt chart derive their tables, and which
the op classes and both executors cover (issue 17, deliverable 3)."""

from __future__ import annotations

import pytest

from lancet_mlir.cost.comm_model import KINDS, canonical_kind
from lancet_mlir.dialects.collectives import (
    COLLECTIVES,
    Collective,
    collective,
    exchange_kinds,
    fusable_kinds,
    register_collective,
)
from lancet_mlir.dialects.comm import CollectiveOp, Comm
from lancet_mlir.dialects.vocab import CollectiveKind, Role
from lancet_mlir.graph.buckets import FUSABLE_KINDS
from lancet_mlir.graph.core import A2A_KINDS
from lancet_mlir.runtime.collectives import SIMULATED
from lancet_mlir.runtime.mpi import EXCHANGES
from lancet_mlir.sim.gantt import _KIND_CATEGORY, CATEGORY_COLORS


def test_every_kind_has_one_entry_an_op_class_and_both_implementations() -> None:
    assert list(COLLECTIVES) == list(CollectiveKind)
    classes = {op.KIND: op for op in Comm.operations if issubclass(op, CollectiveOp)}
    assert set(classes) == set(CollectiveKind)
    for kind, cls in classes.items():
        assert cls.name == f"comm.{kind}"
        assert cls.entry() is COLLECTIVES[kind]
    assert set(SIMULATED) == set(CollectiveKind)
    assert set(EXCHANGES) == set(CollectiveKind)
    for entry in COLLECTIVES.values():
        assert CATEGORY_COLORS[entry.category] == entry.colour
        assert _KIND_CATEGORY[entry.kind] == entry.category


def test_the_derived_tables_are_the_registry_ones() -> None:
    """The lists each layer used to keep by hand, now read from the registry (same values,
    same order: messages and tables keep their spelling)."""
    assert KINDS == ("allreduce", "allgather", "reduce_scatter", "all_to_all")
    assert FUSABLE_KINDS == fusable_kinds() == ("allreduce", "allgather", "reduce_scatter")
    assert A2A_KINDS == exchange_kinds() == {"all_to_all", "all_to_allv"}
    assert canonical_kind("All-Reduce") == CollectiveKind.ALLREDUCE
    assert canonical_kind("alltoallv") == "all_to_all"
    assert canonical_kind("broadcast") is None
    legend = [c for c in CATEGORY_COLORS if c not in ("forward", "backward", "dW", "optimizer")]
    assert legend == ["compute", "all-to-all", "all-reduce", "all-gather", "reduce-scatter",
                      "collective"]  # fmt: skip


def test_vocabulary_members_are_their_strings() -> None:
    assert Role.DX == "dx"
    assert f"{Role.UPDATE}" == "update"
    assert [str(r) for r in Role] == ["fwd", "dx", "dw", "update"]
    assert CollectiveKind.ALL_TO_ALLV == "all_to_allv"
    assert {CollectiveKind.ALLREDUCE: 1}["allreduce"] == 1  # hashes as its string


def test_lookups_and_duplicates_fail_with_one_line() -> None:
    assert collective("allgather").table_kind == CollectiveKind.ALLGATHER
    assert collective("all_to_allv").table_kind == CollectiveKind.ALL_TO_ALL
    with pytest.raises(KeyError, match="unknown collective kind 'broadcast' \\(known: allreduce"):
        collective("broadcast")
    with pytest.raises(ValueError, match="collective kind 'allreduce' is registered twice"):
        register_collective(
            Collective(CollectiveKind.ALLREDUCE, CollectiveKind.ALLREDUCE, (), fusable=True,
                       exchange=False, category="all-reduce", colour="#000000")
        )  # fmt: skip
