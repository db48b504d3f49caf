"""Matmul-family kernels: matmul, batch_matmul and their `_dx` / `_dw` gradient forms.

Each is a two-operand contraction whose spec ("mk,kn->mn", with transposes and a batch letter)
`matmul_spec` derives from the forward op's `transpose_a` / `transpose_b`; the gradient kernels
take the forward op's parameters, so their outputs are laid out like the forward operands.
"""

from __future__ import annotations

import math

from lancet_mlir.dialects.kernels.base import (
    Kernel,
    Params,
    PartitionCombo,
    Sigs,
    TensorSig,
    register,
)
from lancet_mlir.dialects.kernels.rules import (
    contract_infer,
    contract_sizes,
    einsum_partition,
    same_dtype,
)
from lancet_mlir.dialects.vocab import Role

MATMUL_KINDS = (Role.FWD, Role.DX, Role.DW)
"""Forward product, gradient of the first operand, gradient of the second (weight) operand."""

_NAMES = {Role.FWD: ("lhs", "rhs"), Role.DX: ("dy", "rhs"), Role.DW: ("lhs", "dy")}
_INPUTS = {Role.FWD: ("a", "b"), Role.DX: ("dy", "b"), Role.DW: ("a", "dy")}
"""The operand names of each kind (its op class's accessors), as the docs name them."""
_DOCS = {
    Role.FWD: "(a, b) -> a·b, with a/b transposed when transpose_a/transpose_b",
    Role.DX: "(dy, b) -> d a = dy·op(b)ᵀ, laid out like the forward a (params = forward's)",
    Role.DW: "(a, dy) -> d b = op(a)ᵀ·dy, laid out like the forward b (params = forward's)",
}


def matmul_spec(kind: str, batch: bool, ta: bool, tb: bool) -> str:
    """Contraction spec of a matmul-family kernel for the forward op's transposes.

    kind "fwd": y = op(a)·op(b); "dx": d a from (dy, b); "dw": d b from (a, dy), where the
    gradients are laid out like the forward operands (so transposes are undone).
    """
    a = "km" if ta else "mk"
    b = "nk" if tb else "kn"
    y = "mn"
    layouts: dict[str, tuple[tuple[str, str], str]] = {
        Role.FWD: ((a, b), y),
        Role.DX: ((y, b), a),
        Role.DW: ((a, y), b),
    }
    ins, out = layouts[kind]
    p = "b" if batch else ""
    return ",".join(p + s for s in ins) + "->" + p + out


def matmul_kernel_name(kind: str, batch: bool) -> str:
    """`matmul`, `batch_matmul_dx`, ... for a kind of MATMUL_KINDS."""
    return ("batch_matmul" if batch else "matmul") + ("" if kind == Role.FWD else f"_{kind}")


def _make_matmul(kind: Role, batch: bool) -> Kernel:
    """The spec of one matmul-family kernel."""

    def spec(params: Params) -> str:
        return matmul_spec(kind, batch, params["transpose_a"], params["transpose_b"])

    def infer(ins: Sigs, params: Params) -> list[TensorSig]:
        out = contract_infer(spec(params), ins, _NAMES[kind])
        same_dtype(ins)
        return [out]

    def flops(ins: Sigs, outs: Sigs, params: Params) -> float:
        return 2.0 * math.prod(contract_sizes(spec(params), ins).values())

    def partition(ins: Sigs, outs: Sigs, params: Params) -> list[PartitionCombo]:
        return einsum_partition(spec(params), ins)

    shape = "[B,M,K]x[B,K,N]->[B,M,N]" if batch else "[M,K]x[K,N]->[M,N]"
    return Kernel(
        name=matmul_kernel_name(kind, batch),
        num_inputs=2,
        input_names=_INPUTS[kind],
        params={"transpose_a": False, "transpose_b": False},
        infer=infer,
        flops=flops,
        partition=partition,
        role=kind,
        doc=f"{_DOCS[kind]}; forward {shape}",
    )


for _batch in (False, True):
    for _kind in MATMUL_KINDS:
        register(_make_matmul(_kind, _batch))
