"""delay-all-to-allv (§9.1): all_to_allvs move down to their first reader, in order."""

from __future__ import annotations

from helpers import function_graph, parse, run_pipeline
from hypothesis import given, settings
from hypothesis import strategies as st

from lancet_mlir.dialects.comm import AllToAllVOp
from lancet_mlir.passes.delay_all_to_allv import delayed_order
from lancet_mlir.runtime import compare_modules

D = "tensor<2x4x8xf32>"
C = "tensor<2xi64>"
X = "tensor<8x8xf32>"


def module_text(steps: list[tuple[str, int, int]]) -> str:
    """A function of all_to_allvs (`v`), gelus on the [8, 8] chain (`g`) and adds of two
    earlier all_to_allv results or %d (`a`), returning every value nobody else reads."""
    lines: list[str] = []
    datas, xs = ["%d"], ["%x"]
    for n, (kind, p, q) in enumerate(steps):
        if kind == "v":
            lines.append(f"%v{n}, %vc{n} = comm.all_to_allv %d, %c : ({D}, {C}) -> ({D}, {C})")
            datas.append(f"%v{n}")
        elif kind == "g":
            lines.append(f"%g{n} = comp.gelu {xs[p % len(xs)]} : ({X}) -> {X}")
            xs.append(f"%g{n}")
        else:
            a, b = datas[p % len(datas)], datas[q % len(datas)]
            lines.append(f"%a{n} = comp.add {a}, {b} : ({D}, {D}) -> {D}")
            datas.append(f"%a{n}")
    body = "\n    ".join(lines)
    rets = [v for v in datas[1:] if v.startswith("%a")] + [xs[-1]]
    types = [D if r.startswith("%a") else X for r in rets]
    return f"""
builtin.module attributes {{lancet.world_size = 2 : i64}} {{
  func.func @f(%d: {D}, %c: {C} {{lancet.max_int = 4 : i64}}, %x: {X}) -> ({", ".join(types)}) {{
    {body}
    func.return {", ".join(rets)} : {", ".join(types)}
  }}
}}
"""


steps_strategy = st.lists(
    st.tuples(st.sampled_from("vga"), st.integers(0, 20), st.integers(0, 20)),
    min_size=1,
    max_size=14,
)


@settings(max_examples=40, deadline=None)
@given(steps_strategy)
def test_each_all_to_allv_lands_at_its_clamped_target(steps) -> None:
    graph = function_graph(parse(module_text(steps)))
    order = delayed_order(graph)
    assert sorted(order) == list(range(len(graph)))
    assert graph.is_topological(order)
    is_v = [isinstance(o, AllToAllVOp) for o in graph.ops]
    vs = [i for i in range(len(graph)) if is_v[i]]
    others = [i for i in range(len(graph)) if not is_v[i]]
    assert [i for i in order if is_v[i]] == vs  # all_to_allvs keep their order
    assert [i for i in order if not is_v[i]] == others  # so does everything else

    def others_before(pos: int, seq: list[int]) -> int:
        return sum(1 for i in seq[:pos] if not is_v[i])

    for k, v in enumerate(vs):
        # target: the first reader of v or of any later all_to_allv, else the end
        wanted = min(
            (others_before(min(graph.succs[w], default=len(graph)), list(range(len(graph))))
             for w in vs[k:]),
        )  # fmt: skip
        assert others_before(order.index(v), order) == wanted


def test_values_are_unchanged() -> None:
    steps = [("v", 0, 0), ("v", 0, 0), ("g", 0, 0), ("a", 1, 2), ("g", 1, 0), ("v", 0, 0)]
    text = module_text(steps)
    moved = run_pipeline(parse(text), "delay-all-to-allv")
    graph = function_graph(moved)
    assert [type(o).__name__ for o in graph.ops][:2] == ["GeluOp", "AllToAllVOp"]
    result = compare_modules(parse(text), moved, ranks=2)
    assert result.ok, result.failures()[:3]


def test_no_all_to_allv_leaves_the_block_alone() -> None:
    text = module_text([("g", 0, 0), ("a", 0, 0)])
    assert str(run_pipeline(parse(text), "delay-all-to-allv")) == str(parse(text))
