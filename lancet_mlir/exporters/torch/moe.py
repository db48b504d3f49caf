"""Partitioning of expert-parallel MoE layers on FX graphs (in progress)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch.fx import GraphModule

from lancet_mlir.importers.torch import ImportedGraph
from lancet_mlir.support.errors import UserError


def partition_moe(
    gm: GraphModule,
    imported: ImportedGraph,
    parts: str | int,
    *,
    world_size: int,
    group_ranks: Mapping[str, Sequence[Sequence[int]]] | None = None,
) -> tuple[GraphModule, ImportedGraph]:
    """Not available yet: raises UserError."""
    raise UserError("partition: MoE partitioning of FX graphs is not available yet")
