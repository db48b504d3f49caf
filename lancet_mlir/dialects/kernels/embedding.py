"""Embedding kernels: the row gather `embedding` and its scatter-add gradient `embedding_dw`."""

from __future__ import annotations

from lancet_mlir.dialects.kernels.base import (
    PARTIAL,
    Kernel,
    KernelError,
    Params,
    ParamSpec,
    PartitionCombo,
    Sigs,
    TensorSig,
    register,
)
from lancet_mlir.dialects.kernels.rules import expect_float, expect_int, expect_rank, zero_flops
from lancet_mlir.dialects.vocab import Role


def _embedding_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    table, ids = ins
    expect_rank(table, 2, "table")
    expect_float(table, "table")
    expect_int(ids, "ids")
    return [TensorSig((*ids.shape, table.shape[1]), table.dtype)]


def _embedding_partition(ins: Sigs, outs: Sigs, params: Params) -> list[PartitionCombo]:
    ids = ins[1]
    combos: list[PartitionCombo] = [((None, i), (i,)) for i in range(ids.rank)]
    combos.append(((1, None), (ids.rank,)))
    return combos


register(
    Kernel(
        name="embedding",
        num_inputs=2,
        input_names=("table", "ids"),
        params={},
        infer=_embedding_infer,
        flops=zero_flops,
        # a gather reads only the selected rows: ids + rows read + output written
        bytes_moved=lambda ins, outs, p: float(ins[1].nbytes + 2 * outs[0].nbytes),
        partition=_embedding_partition,
        role=Role.FWD,
        doc="(table [V, M], ids int [...]) -> table[ids] [..., M]",
    )
)


def _embedding_dw_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    dy, ids = ins
    expect_float(dy, "dy")
    expect_int(ids, "ids")
    if dy.shape != (*ids.shape, *dy.shape[-1:]) or dy.rank != ids.rank + 1:
        raise KernelError(f"dy shape {dy} must be ids shape {ids} plus one trailing dim")
    if params["num_embeddings"] < 1:
        raise KernelError("num_embeddings must be >= 1")
    return [TensorSig((params["num_embeddings"], dy.shape[-1]), dy.dtype)]


def _embedding_dw_partition(ins: Sigs, outs: Sigs, params: Params) -> list[PartitionCombo]:
    ids = ins[1]
    combos: list[PartitionCombo] = [((i, i), (PARTIAL,)) for i in range(ids.rank)]
    combos.append(((ids.rank, None), (1,)))
    return combos


register(
    Kernel(
        name="embedding_dw",
        num_inputs=2,
        input_names=("dy", "ids"),
        params={"num_embeddings": ParamSpec(int)},
        infer=_embedding_dw_infer,
        flops=lambda ins, outs, p: float(ins[0].numel),
        partition=_embedding_dw_partition,
        role=Role.DW,
        doc="(dy [..., M], ids [...]; num_embeddings V) -> d table [V, M] (scatter-add)",
    )
)
