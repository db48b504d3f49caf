"""Rules shared by the kernel families: argument checks, FLOP helpers, partition helpers and
the contraction-spec language ("mk,kn->mn") of the matmul and MoE kernels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lancet_mlir.dialects.kernels.base import (
    INT_DTYPES,
    PARTIAL,
    Axis,
    CostFn,
    DType,
    KernelError,
    Params,
    PartitionCombo,
    Sigs,
    TensorSig,
    is_float,
)

# ---- checks ---------------------------------------------------------------------------------


def expect_rank(sig: TensorSig, rank: int, what: str) -> None:
    """KernelError unless `sig` has rank `rank` (`what` names the tensor)."""
    if sig.rank != rank:
        raise KernelError(f"{what} must have rank {rank}, got {sig}")


def expect_min_rank(sig: TensorSig, rank: int, what: str) -> None:
    """KernelError unless `sig` has rank >= `rank`."""
    if sig.rank < rank:
        raise KernelError(f"{what} must have rank >= {rank}, got {sig}")


def expect_float(sig: TensorSig, what: str) -> None:
    """KernelError unless `sig` has a floating-point dtype."""
    if not is_float(sig.dtype):
        raise KernelError(f"{what} must have a float dtype, got {sig.dtype}")


def expect_int(sig: TensorSig, what: str) -> None:
    """KernelError unless `sig` has dtype i32 or i64."""
    if sig.dtype not in INT_DTYPES:
        raise KernelError(f"{what} must have dtype i32 or i64, got {sig.dtype}")


def same_dtype(sigs: Sigs) -> DType:
    """The common dtype of `sigs`; KernelError when they differ."""
    for s in sigs[1:]:
        if s.dtype != sigs[0].dtype:
            raise KernelError(f"dtype mismatch: {sigs[0].dtype} vs {s.dtype}")
    return sigs[0].dtype


def same_shape(sigs: Sigs, names: Sequence[str]) -> None:
    """KernelError unless every sig has the shape of the first (`names` for messages)."""
    for s, n in zip(sigs[1:], names[1:], strict=True):
        if s.shape != sigs[0].shape:
            raise KernelError(f"{n} shape {s} differs from {names[0]} shape {sigs[0]}")


def norm_axis(axis: int, rank: int) -> int:
    """`axis` (negative counts from the end) as 0..rank-1; KernelError when out of range."""
    if not -rank <= axis < rank:
        raise KernelError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def per_element(k: float, of_output: int = 0) -> CostFn:
    """FLOP rule: `k` operations per element of output `of_output`."""

    def flops(ins: Sigs, outs: Sigs, params: Params) -> float:
        return k * outs[of_output].numel

    return flops


def zero_flops(ins: Sigs, outs: Sigs, params: Params) -> float:
    """FLOP rule of data-movement kernels."""
    return 0.0


# ---- partition helpers ----------------------------------------------------------------------


def elementwise_partition(
    ins: Sigs, outs: Sigs, exclude: Sequence[int] = ()
) -> list[PartitionCombo]:
    """Split every output along the same axis i; broadcast inputs align from the right.

    An input whose dimension aligned with i is missing or of size 1 (broadcast) is not split.
    Output axes in `exclude` (normalised) are never split.
    """
    out = outs[0]
    combos: list[PartitionCombo] = []
    for i in range(out.rank):
        if i in exclude:
            continue
        in_axes: list[Axis] = []
        for s in ins:
            j = i - (out.rank - s.rank)
            in_axes.append(j if j >= 0 and s.shape[j] == out.shape[i] else None)
        combos.append((tuple(in_axes), (i,) * len(outs)))
    return combos


def elementwise_rule(ins: Sigs, outs: Sigs, params: Mapping[str, Any]) -> list[PartitionCombo]:
    """Partition rule of the parameter-free elementwise kernels (see elementwise_partition)."""
    return elementwise_partition(ins, outs)


def einsum_partition(spec: str, ins: Sigs) -> list[PartitionCombo]:
    """Partition rule of a contraction `spec` such as "mk,kn->mn" (linear in each input).

    Splitting one index letter splits every input holding it; the output is split along
    that letter, or is a PARTIAL sum when the letter is contracted away.
    """
    in_specs, out_spec = parse_spec(spec)
    letters = dict.fromkeys(c for s in (*in_specs, out_spec) for c in s)
    combos: list[PartitionCombo] = []
    for c in letters:
        in_axes = tuple(s.index(c) if c in s else None for s in in_specs)
        out_axis: Axis = out_spec.index(c) if c in out_spec else PARTIAL
        combos.append((in_axes, (out_axis,)))
    return combos


def rows_partition(
    nrows: int, n_ins: int, whole: Sequence[int], outs: Sequence[Axis] | None
) -> list[PartitionCombo]:
    """Combos splitting leading axis i (< nrows) of every input not in `whole`; the outputs
    are split along i too, or take the fixed axes `outs` (e.g. PARTIAL for reductions)."""
    combos: list[PartitionCombo] = []
    for i in range(nrows):
        in_axes = tuple(None if j in whole else i for j in range(n_ins))
        combos.append((in_axes, tuple(outs) if outs is not None else (i,)))
    return combos


# ---- contractions ----------------------------------------------------------------------------

_DIM_LABELS = {
    "b": "batch",
    "m": "row",
    "n": "column",
    "k": "contraction",
    "s": "token",
    "e": "expert",
    "c": "capacity",
    "h": "hidden",
}


def parse_spec(spec: str) -> tuple[list[str], str]:
    """("mk,kn->mn") -> (["mk", "kn"], "mn")."""
    lhs, out = spec.split("->")
    return lhs.split(","), out


def contract_infer(spec: str, ins: Sigs, names: Sequence[str]) -> TensorSig:
    """Shape rule of a contraction: ranks match the spec and shared letters agree."""
    in_specs, out_spec = parse_spec(spec)
    sizes: dict[str, int] = {}
    for sig, letters, name in zip(ins, in_specs, names, strict=True):
        expect_rank(sig, len(letters), name)
        expect_float(sig, name)
        for letter, dim in zip(letters, sig.shape, strict=True):
            if sizes.setdefault(letter, dim) != dim:
                label = _DIM_LABELS.get(letter, letter)
                raise KernelError(f"{label} dims differ: {sizes[letter]} vs {dim}")
    return TensorSig(tuple(sizes[c] for c in out_spec), ins[0].dtype)


def contract_sizes(spec: str, ins: Sigs) -> dict[str, int]:
    """Size of every index letter of a contraction, read from the input sigs."""
    in_specs, _ = parse_spec(spec)
    return {
        c: d
        for sig, s in zip(ins, in_specs, strict=True)
        for c, d in zip(s, sig.shape, strict=True)
    }
