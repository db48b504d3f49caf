"""Writes the modules of this folder (run from the repo root:
`.venv/bin/python test/data/runtime/make_modules.py`). Hand-designed for the runtime tests.

`moe_step_*`: small MoE training steps:
dense FFN block + layer norm + switch-gated MoE layer (gate, dispatch, all_to_all, expert
batch_matmul, all_to_all, combine) + cross-entropy loss, its backward pass, data-parallel
gradient allreduces and (optionally) SGD updates. Expert weights are not synchronised
(expert parallel); every other parameter is replicated.
"""

from __future__ import annotations

import os
import re


def moe_step(
    world: int,
    experts_per_rank: int,
    dtype: str,
    updates: bool,
    tokens: int = 8,
    model: int = 4,
    ffn: int = 8,
    capacity: int = 4,
) -> str:
    """MLIR text of one training step (see the module doc)."""
    g, epr, s, m, f, c = world, experts_per_rank, tokens, model, ffn, capacity
    e = g * epr

    def t(*shape: int, dt: str = dtype) -> str:
        return "tensor<" + "".join(f"{d}x" for d in shape) + dt + ">"

    lines: list[str] = []

    def op(
        res: str, name: str, args: str, ins: list[str], outs: list[str], attrs: str = ""
    ) -> None:
        attr = f" {{{attrs}}}" if attrs else ""
        out = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
        lines.append(f"    {res} = {name} {args}{attr} : ({', '.join(ins)}) -> {out}")

    X, L, W1, B1, W2, G, B = t(s, m), t(s, dt="i64"), t(m, f), t(f), t(f, m), t(m), t(m)
    WG, WE = t(m, e), t(epr, m, m)
    SF, SE, SEC, ECM, LOC = t(s, f), t(s, e), t(s, e, c), t(e, c, m), t(epr, g * c, m)
    sc = "f64" if dtype == "f64" else "f32"
    args = [
        f"%x: {X}",
        f"%labels: {L} {{lancet.max_int = {m} : i64}}",
        f"%w1: {W1} {{lancet.init_scale = 0.5 : f64}}",
        f"%b1: {B1} {{lancet.init_scale = 0.1 : f64}}",
        f"%w2: {W2} {{lancet.init_scale = 0.5 : f64}}",
        f"%gamma: {G}",
        f"%beta: {B} {{lancet.init_scale = 0.1 : f64}}",
        f"%wg: {WG} {{lancet.init_scale = 0.5 : f64}}",
        f"%we: {WE} {{lancet.init_scale = 0.5 : f64}}",
    ]
    # forward
    op("%h1", "comp.matmul", "%x, %w1", [X, W1], [SF])
    op("%h1b", "comp.bias_add", "%h1, %b1", [SF, B1], [SF])
    op("%a1", "comp.gelu", "%h1b", [SF], [SF])
    op("%h2", "comp.matmul", "%a1, %w2", [SF, W2], [X])
    op("%r", "comp.add", "%h2, %x", [X, X], [X])
    op("%n", "comp.layer_norm", "%r, %gamma, %beta", [X, G, B], [X])
    op("%logits", "comp.matmul", "%n, %wg", [X, WG], [SE])
    op("%comb, %disp", "comp.moe_gate", "%logits", [SE], [SEC, SEC], f"capacity = {c} : i64")
    op("%ein", "comp.moe_dispatch", "%n, %disp", [X, SEC], [ECM])
    lines.append(f"    %a = comm.all_to_all %ein split 0 concat 1 : ({ECM}) -> {LOC}")
    op("%he", "comp.batch_matmul", "%a, %we", [LOC, WE], [LOC])
    lines.append(f"    %b = comm.all_to_all %he split 1 concat 0 : ({LOC}) -> {ECM}")
    op("%y", "comp.moe_combine", "%b, %comb", [ECM, SEC], [X])
    op("%o", "comp.add", "%y, %n", [X, X], [X])
    op("%loss", "comp.cross_entropy", "%o, %labels", [X, L], [f"tensor<{sc}>"])
    # backward
    op("%do", "comp.cross_entropy_dx", "%o, %labels", [X, L], [X])
    op("%db", "comp.moe_combine_dx", "%do, %comb", [X, SEC], [ECM])
    op("%dcomb", "comp.moe_combine_dw", "%do, %b", [X, ECM], [SEC])
    lines.append(f"    %dhe = comm.all_to_all %db split 0 concat 1 : ({ECM}) -> {LOC}")
    op("%da", "comp.batch_matmul_dx", "%dhe, %we", [LOC, WE], [LOC])
    op("%dwe", "comp.batch_matmul_dw", "%a, %dhe", [LOC, LOC], [WE])
    lines.append(f"    %dein = comm.all_to_all %da split 1 concat 0 : ({LOC}) -> {ECM}")
    op("%dn1", "comp.moe_dispatch_dx", "%dein, %disp", [ECM, SEC], [X])
    op("%dlogits", "comp.moe_gate_dx", "%dcomb, %logits", [SEC, SE], [SE], f"capacity = {c} : i64")
    op("%dn2", "comp.matmul_dx", "%dlogits, %wg", [SE, WG], [X])
    op("%dwg", "comp.matmul_dw", "%n, %dlogits", [X, SE], [WG])
    op("%dn_a", "comp.add", "%dn1, %dn2", [X, X], [X])
    op("%dn", "comp.add", "%dn_a, %do", [X, X], [X])
    op("%dr", "comp.layer_norm_dx", "%dn, %r, %gamma", [X, X, G], [X])
    op("%dgamma, %dbeta", "comp.layer_norm_dw", "%dn, %r", [X, X], [G, B])
    op("%da1", "comp.matmul_dx", "%dr, %w2", [X, W2], [SF])
    op("%dw2", "comp.matmul_dw", "%a1, %dr", [SF, X], [W2])
    op("%dh1b", "comp.gelu_dx", "%da1, %h1b", [SF, SF], [SF])
    op("%db1", "comp.reduce_sum", "%dh1b", [SF], [B1], "axes = array<i64: 0>")
    op("%dw1", "comp.matmul_dw", "%x, %dh1b", [X, SF], [W1])
    op("%dx1", "comp.matmul_dx", "%dh1b, %w1", [SF, W1], [X])
    op("%dx", "comp.add", "%dx1, %dr", [X, X], [X])
    # data-parallel gradient synchronisation of the replicated parameters
    for name, ty in (
        ("dwg", WG),
        ("dgamma", G),
        ("dbeta", B),
        ("dw2", W2),
        ("db1", B1),
        ("dw1", W1),
    ):
        lines.append(f"    %s{name} = comm.allreduce %{name} : ({ty}) -> {ty}")
    params = [
        ("w1", W1, "sdw1"),
        ("b1", B1, "sdb1"),
        ("w2", W2, "sdw2"),
        ("gamma", G, "sdgamma"),
        ("beta", B, "sdbeta"),
        ("wg", WG, "sdwg"),
        ("we", WE, "dwe"),
    ]
    if updates:
        for p, ty, grad in params:
            op(
                f"%new_{p}",
                "comp.sgd_update",
                f"%{p}, %{grad}",
                [ty, ty],
                [ty],
                "lr = 1.000000e-01 : f64",
            )
        rets = [f"%new_{p}" for p, _, _ in params]
    else:
        rets = [f"%{grad}" for _, _, grad in params]
    rtypes = [f"tensor<{sc}>", X] + [ty for _, ty, _ in params]
    head = (
        f"builtin.module attributes {{lancet.world_size = {g} : i64}} {{\n"
        f"  func.func @train_step({', '.join(args)}) -> ({', '.join(rtypes)}) {{"
    )
    ret = f"    func.return %loss, %dx, {', '.join(rets)} : {', '.join(rtypes)}"
    return "\n".join([head, *lines, ret, "  }", "}", ""])


def collectives(world: int) -> str:
    """Every collective kind, fused operands, groups, all_to_allv and f16/i32 payloads."""
    half = world // 2
    pairs = "[" + ", ".join(f"[{r}, {r + half}]" for r in range(half)) + "]"
    w = world
    body = f"""
    %s1, %s2 = comm.allreduce %x, %y : (tensor<4x{2 * w}xf32>, tensor<3xf32>) -> (tensor<4x{2 * w}xf32>, tensor<3xf32>)
    %m1 = comm.allreduce %x reduce max : (tensor<4x{2 * w}xf32>) -> tensor<4x{2 * w}xf32>
    %m2 = comm.allreduce %y reduce prod group <{pairs}> : (tensor<3xf32>) -> tensor<3xf32>
    %m3 = comm.allreduce %h reduce avg : (tensor<5xf16>) -> tensor<5xf16>
    %m4 = comm.allreduce %k reduce avg : (tensor<6xi32>) -> tensor<6xi32>
    %m5 = comm.allreduce %y reduce min : (tensor<3xf32>) -> tensor<3xf32>
    %g1 = comm.allgather %x axis 1 : (tensor<4x{2 * w}xf32>) -> tensor<4x{2 * w * w}xf32>
    %g2 = comm.allgather %y group <{pairs}> : (tensor<3xf32>) -> tensor<6xf32>
    %r1 = comm.reduce_scatter %x reduce avg axis 1 : (tensor<4x{2 * w}xf32>) -> tensor<4x2xf32>
    %r2 = comm.reduce_scatter %h : (tensor<5xf16>) -> tensor<5xf16>
    %a1 = comm.all_to_all %x split 1 concat 0 : (tensor<4x{2 * w}xf32>) -> tensor<{4 * w}x2xf32>
    %a2 = comm.all_to_all %z split 0 concat 1 group <{pairs}> : (tensor<4x3xf32>) -> tensor<2x6xf32>
    %v1, %c1 = comm.all_to_allv %d, %n : (tensor<{w}x3x2xf32>, tensor<{w}xi64>) -> (tensor<{w}x3x2xf32>, tensor<{w}xi64>)"""
    if world == 2:  # a reduce_scatter over a group of 2 needs even dims; keep shapes simple
        body = body.replace(
            "%r2 = comm.reduce_scatter %h : (tensor<5xf16>) -> tensor<5xf16>",
            "%r2 = comm.reduce_scatter %z : (tensor<4x3xf32>) -> tensor<2x3xf32>",
        )
    else:
        body = body.replace(
            "%r2 = comm.reduce_scatter %h : (tensor<5xf16>) -> tensor<5xf16>",
            "%r2 = comm.reduce_scatter %z : (tensor<4x3xf32>) -> tensor<1x3xf32>",
        )
    results = re.findall(r"%(\w+)(?:, %(\w+))? = comm", body)
    names = [n for pair in results for n in pair if n]
    types = {}
    for line in body.strip().splitlines():
        lhs, rhs = line.split(" = ")
        outs = rhs.rsplit("-> ", 1)[1].strip("() ")
        for name, ty in zip(
            [v.strip(" %") for v in lhs.split(",")],
            re.findall(r"tensor<[^>]*>", outs),
            strict=False,
        ):
            types[name] = ty
    args = (
        f"%x: tensor<4x{2 * w}xf32>, %y: tensor<3xf32>, %z: tensor<4x3xf32>, %h: tensor<5xf16>, "
        f"%k: tensor<6xi32> {{lancet.max_int = 100 : i64}}, %d: tensor<{w}x3x2xf32>, "
        f"%n: tensor<{w}xi64> {{lancet.max_int = 4 : i64}}"
    )
    rtypes = ", ".join(types[n] for n in names)
    return (
        f"builtin.module attributes {{lancet.world_size = {world} : i64}} {{\n"
        f"  func.func @collectives({args}) -> ({rtypes}) {{{body}\n"
        f"    func.return {', '.join('%' + n for n in names)} : {rtypes}\n  }}\n}}\n"
    )


FILES = {
    # (world, experts per rank, dtype, updates)
    "moe_step_w1.mlir": (1, 2, "f32", True),
    "moe_step_w4.mlir": (4, 1, "f32", True),
    "moe_grad_w2_f64.mlir": (2, 1, "f64", False),
}

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    for world in (2, 4):
        with open(os.path.join(here, f"collectives_w{world}.mlir"), "w") as fh:
            fh.write(
                f"// Every collective kind on {world} ranks; written by "
                "test/data/runtime/make_modules.py.\n" + collectives(world)
            )
    for fname, (world, epr, dtype, updates) in FILES.items():
        header = (
            f"// Small MoE training step (world {world}, {epr} expert(s) per rank, {dtype}); "
            "written by test/data/runtime/make_modules.py.\n"
        )
        with open(os.path.join(here, fname), "w") as fh:
            fh.write(header + moe_step(world, epr, dtype, updates))
