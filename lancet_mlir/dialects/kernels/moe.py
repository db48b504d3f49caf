"""Mixture-of-experts kernels: the GShard gate (switch / top2, capacity-limited) and its
gradient, the windowed switch gate of one token part (and its gradient), and the dispatch /
combine contractions over the routing tensor [S, E, C].

Token parts (`moe_gate_window`): cutting S tokens into consecutive parts and threading the
per-expert slot counter `offsets` from part to part gives every token the capacity slot
`moe_gate` gives it (p = offsets[e] + r), but each part writes slot r of a [E, C] *window*,
so part k's kept tokens of expert e are the leading counts[e] rows of its window (what a
`comm.all_to_allv` with counts [G, E_local] moves). Only the switch gate can be cut so: top2
places every second choice after all first choices of the whole batch."""

from __future__ import annotations

from lancet_mlir.dialects.kernels.base import (
    Kernel,
    KernelError,
    Params,
    ParamSpec,
    Sigs,
    TensorSig,
    register,
)
from lancet_mlir.dialects.kernels.rules import (
    contract_infer,
    contract_sizes,
    einsum_partition,
    expect_float,
    expect_int,
    expect_rank,
)
from lancet_mlir.dialects.vocab import Role

_GATE_PARAMS = {
    "gate": ParamSpec(str, "switch", choices=("switch", "top2")),
    "capacity": ParamSpec(int),
}


def _moe_gate_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    logits = ins[0]
    expect_rank(logits, 2, "logits")
    expect_float(logits, "logits")
    if params["capacity"] < 1:
        raise KernelError(f"capacity must be >= 1, got {params['capacity']}")
    if params["gate"] == "top2" and logits.shape[1] < 2:
        raise KernelError("top2 gating needs at least 2 experts")
    s, e = logits.shape
    out = TensorSig((s, e, params["capacity"]), logits.dtype)
    return [out, out]


register(
    Kernel(
        name="moe_gate",
        num_inputs=1,
        input_names=("logits",),
        params=_GATE_PARAMS,
        infer=_moe_gate_infer,
        # softmax (5/elt) + top-k scans and cumsums (~4/elt per choice); outputs are written
        flops=lambda ins, outs, p: 13.0 * ins[0].numel,
        role=Role.FWD,
        doc=(
            "(logits [S, E]; gate switch|top2, capacity C) -> (combine [S, E, C], "
            "dispatch mask [S, E, C]); GShard positions, tokens over capacity dropped, "
            "top2 gates renormalised over the kept choices"
        ),
    )
)


def _moe_gate_dx_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    dcombine, logits = ins
    (out, _) = _moe_gate_infer([logits], params)
    if dcombine != out:
        raise KernelError(f"dcombine shape {dcombine} must be {out}")
    return [logits]


register(
    Kernel(
        name="moe_gate_dx",
        num_inputs=2,
        input_names=("dcombine", "logits"),
        params=_GATE_PARAMS,
        infer=_moe_gate_dx_infer,
        flops=lambda ins, outs, p: 13.0 * ins[1].numel,
        role=Role.DX,
        doc="(dcombine [S, E, C], logits [S, E]; gate, capacity) -> dlogits [S, E]",
    )
)

_WINDOW_TOP2 = (
    "moe_gate_window supports the switch gate only: top2 places second choices after every "
    "token's first choice, so a part's slots depend on later tokens"
)


def _moe_gate_window_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    logits, offsets = ins
    if params["gate"] != "switch":
        raise KernelError(_WINDOW_TOP2)
    combine, dispatch = _moe_gate_infer([logits], params)
    expect_rank(offsets, 1, "offsets")
    expect_int(offsets, "offsets")
    experts = logits.shape[1]
    if offsets.shape != (experts,):
        raise KernelError(f"offsets shape {offsets} must be [{experts}] (one per expert)")
    counts = TensorSig((experts,), "i64")
    return [combine, dispatch, counts, counts]


register(
    Kernel(
        name="moe_gate_window",
        num_inputs=2,
        input_names=("logits", "offsets"),
        params=_GATE_PARAMS,
        infer=_moe_gate_window_infer,
        flops=lambda ins, outs, p: 13.0 * ins[0].numel,
        role=Role.FWD,
        doc=(
            "(logits [S, E], offsets [E] int; gate switch, capacity C) -> (combine [S, E, C], "
            "dispatch [S, E, C], counts [E] i64, next_offsets [E] i64): the switch gate of one "
            "token part whose earlier parts filled offsets[e] slots of expert e; token t of "
            "expert e is kept iff offsets[e] + r < C, r = its rank among this part's tokens of "
            "e, and written to window slot r; counts = kept tokens per expert, next_offsets = "
            "offsets + counts"
        ),
    )
)


def _moe_gate_window_dx_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    dcombine, logits, offsets = ins
    combine = _moe_gate_window_infer([logits, offsets], params)[0]
    if dcombine != combine:
        raise KernelError(f"dcombine shape {dcombine} must be {combine}")
    return [logits]


register(
    Kernel(
        name="moe_gate_window_dx",
        num_inputs=3,
        input_names=("dcombine", "logits", "offsets"),
        params=_GATE_PARAMS,
        infer=_moe_gate_window_dx_infer,
        flops=lambda ins, outs, p: 13.0 * ins[1].numel,
        role=Role.DX,
        doc=(
            "(dcombine [S, E, C], logits [S, E], offsets [E] int; gate switch, capacity) -> "
            "dlogits [S, E]: the gradient of moe_gate_window's combine w.r.t. the logits"
        ),
    )
)

MOE_CONTRACTIONS: dict[str, str] = {
    "moe_dispatch": "sm,sec->ecm",
    "moe_combine": "ecm,sec->sm",
    "moe_dispatch_dx": "ecm,sec->sm",
    "moe_combine_dx": "sm,sec->ecm",
    "moe_combine_dw": "sm,ecm->sec",
}
"""Contraction spec of each dispatch/combine kernel (s token, e expert, c capacity slot,
m hidden): the runtime evaluates exactly these."""


def _make_moe(name: str, names: tuple[str, str], role: Role, doc: str) -> Kernel:
    """A dispatch/combine kernel: a two-operand contraction over the routing tensor."""
    spec = MOE_CONTRACTIONS[name]

    def infer(ins: Sigs, params: Params) -> list[TensorSig]:
        return [contract_infer(spec, ins, names)]

    def flops(ins: Sigs, outs: Sigs, params: Params) -> float:
        size = contract_sizes(spec, ins)
        return 2.0 * size["e"] * size["c"] * size["m"]

    return Kernel(
        name=name,
        num_inputs=2,
        input_names=names,
        params={},
        infer=infer,
        flops=flops,
        partition=lambda ins, outs, p: einsum_partition(spec, ins),
        role=role,
        doc=doc,
    )


for _args in (
    ("moe_dispatch", ("x", "dispatch"), Role.FWD,
     "(x [S, M], dispatch [S, E, C]) -> expert input [E, C, M]"),
    ("moe_combine", ("expert_out", "combine"), Role.FWD,
     "(expert_out [E, C, M], combine [S, E, C]) -> y [S, M]"),
    ("moe_dispatch_dx", ("d_expert_in", "dispatch"), Role.DX,
     "(d expert input [E, C, M], dispatch [S, E, C]) -> dx [S, M]"),
    ("moe_combine_dx", ("dy", "combine"), Role.DX,
     "(dy [S, M], combine [S, E, C]) -> d expert_out [E, C, M]"),
    ("moe_combine_dw", ("dy", "expert_out"), Role.DX,
     "(dy [S, M], expert_out [E, C, M]) -> d combine [S, E, C] (feeds moe_gate_dx)"),
):  # fmt: skip
    register(_make_moe(*_args))
