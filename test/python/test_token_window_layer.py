"""The token-window building blocks compose into an exact token-partitioned MoE layer.

A hand-written switch-gated MoE layer (2 ranks, 4 experts, 2 per rank, gelu as the expert)
against the same layer cut into token parts by hand: per part `comp.moe_gate_window`
(offsets threaded from zeros), a dispatch into the part's [E, C, M] window, a
`comm.all_to_allv` of [G, E_local, C, M] with [G, E_local] counts there and back, and a
combine of the window. The parts' outputs are the whole layer's, bit for bit, on 2 simulated
ranks and under `mpiexec -n 2` (`lancet-run --compare`). The parts carry `lancet.fill`, which
changes their cost but not their values.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import parse
from test_runtime_mpi import mpirun

from lancet_mlir.runtime.compare import compare_modules

M = 4  # hidden size


def t(*shape: int, dtype: str = "f32") -> str:
    return "tensor<" + "x".join(str(d) for d in shape) + f"x{dtype}>"


def whole_layer(s: int) -> str:
    """moe_gate -> dispatch -> all_to_all -> gelu -> all_to_all -> combine (capacity 3)."""
    return f"""builtin.module attributes {{lancet.world_size = 2 : i64}} {{
  func.func @main(%logits: {t(s, 4)}, %x: {t(s, M)}) -> {t(s, M)} {{
    %comb, %disp = comp.moe_gate %logits {{capacity = 3 : i64}} : ({t(s, 4)}) -> ({t(s, 4, 3)}, {t(s, 4, 3)})
    %xin = comp.moe_dispatch %x, %disp : ({t(s, M)}, {t(s, 4, 3)}) -> {t(4, 3, M)}
    %r = comp.reshape %xin {{shape = array<i64: 2, 2, 3, {M}>}} : ({t(4, 3, M)}) -> {t(2, 2, 3, M)}
    %a = comm.all_to_all %r split 0 concat 0 : ({t(2, 2, 3, M)}) -> {t(2, 2, 3, M)}
    %h = comp.gelu %a : ({t(2, 2, 3, M)}) -> {t(2, 2, 3, M)}
    %b = comm.all_to_all %h split 0 concat 0 : ({t(2, 2, 3, M)}) -> {t(2, 2, 3, M)}
    %o = comp.reshape %b {{shape = array<i64: 4, 3, {M}>}} : ({t(2, 2, 3, M)}) -> {t(4, 3, M)}
    %y = comp.moe_combine %o, %comb : ({t(4, 3, M)}, {t(s, 4, 3)}) -> {t(s, M)}
    func.return %y : {t(s, M)}
  }}
}}
"""


def windowed_layer(sizes: list[int]) -> str:
    """The same layer in token parts of `sizes` rows (a window and two all_to_allvs each)."""
    s, n = sum(sizes), len(sizes)
    attr = f"{{num = {n} : i64, sizes = array<i64: {', '.join(map(str, sizes))}>}}"
    lnames = ", ".join(f"%l{k}" for k in range(n))
    xnames = ", ".join(f"%x{k}" for k in range(n))
    lines = [
        f'%o0 = comp.zeros {{shape = array<i64: 4>, dtype = "i64"}} : () -> {t(4, dtype="i64")}',
        f"{lnames} = comp.split %logits {attr} : ({t(s, 4)}) -> ({', '.join(t(z, 4) for z in sizes)})",
        f"{xnames} = comp.split %x {attr} : ({t(s, M)}) -> ({', '.join(t(z, M) for z in sizes)})",
    ]
    for k, z in enumerate(sizes):
        fill = f"lancet.fill = {1 / n} : f64"
        i4, i22 = t(4, dtype="i64"), t(2, 2, dtype="i64")
        w = t(2, 2, 3, M)
        lines += [
            f"%c{k}, %d{k}, %n{k}, %o{k + 1} = comp.moe_gate_window %l{k}, %o{k} {{capacity = 3 : i64}} "
            f": ({t(z, 4)}, {i4}) -> ({t(z, 4, 3)}, {t(z, 4, 3)}, {i4}, {i4})",
            f"%w{k} = comp.moe_dispatch %x{k}, %d{k} {{{fill}}} : ({t(z, M)}, {t(z, 4, 3)}) -> {t(4, 3, M)}",
            f"%r{k} = comp.reshape %w{k} {{shape = array<i64: 2, 2, 3, {M}>}} : ({t(4, 3, M)}) -> {w}",
            f"%q{k} = comp.reshape %n{k} {{shape = array<i64: 2, 2>}} : ({i4}) -> {i22}",
            f"%a{k}, %ac{k} = comm.all_to_allv %r{k}, %q{k} {{{fill}}} : ({w}, {i22}) -> ({w}, {i22})",
            f"%h{k} = comp.gelu %a{k} {{{fill}}} : ({w}) -> {w}",
            f"%b{k}, %bc{k} = comm.all_to_allv %h{k}, %ac{k} {{{fill}}} : ({w}, {i22}) -> ({w}, {i22})",
            f"%e{k} = comp.reshape %b{k} {{shape = array<i64: 4, 3, {M}>}} : ({w}) -> {t(4, 3, M)}",
            f"%y{k} = comp.moe_combine %e{k}, %c{k} {{{fill}}} : ({t(4, 3, M)}, {t(z, 4, 3)}) -> {t(z, M)}",
        ]
    ys = ", ".join(f"%y{k}" for k in range(n))
    lines.append(f"%y = comp.concat {ys} : ({', '.join(t(z, M) for z in sizes)}) -> {t(s, M)}")
    body = "\n    ".join(lines)
    return f"""builtin.module attributes {{lancet.world_size = 2 : i64}} {{
  func.func @main(%logits: {t(s, 4)}, %x: {t(s, M)}) -> {t(s, M)} {{
    {body}
    func.return %y : {t(s, M)}
  }}
}}
"""


@pytest.mark.parametrize("sizes", [[3, 3], [3, 2], [2, 2, 2], [5, 4], [3, 3, 3]])
def test_windowed_layer_equals_the_whole_layer_on_two_ranks(sizes: list[int]) -> None:
    s = sum(sizes)
    for seed in range(4):  # random logits: some seeds overflow an expert's 3 slots per rank
        res = compare_modules(parse(whole_layer(s)), parse(windowed_layer(sizes)), ranks=2,
                              seed=seed, rtol=0.0, atol=0.0)  # fmt: skip
        assert res.ok, res
        assert res.max_abs_err == 0.0


@pytest.mark.serial
@pytest.mark.timeout(300)
def test_windowed_layer_under_mpiexec(tmp_path: Path) -> None:
    whole, parts = tmp_path / "whole.mlir", tmp_path / "parts.mlir"
    whole.write_text(whole_layer(5))
    parts.write_text(windowed_layer([3, 2]))
    proc = mpirun(2, "--compare", str(whole), str(parts), "--rtol", "0", "--atol", "0",
                  cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "same" in proc.stdout
