"""Gantt pictures (issue #12 item 8), checked on matplotlib's artist tree, not on pixels:
colours by category with a legend, units by range, labels on long ops, separate bars,
--gantt-window and the before/after comparison."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import parse, run_tool
from matplotlib.colors import to_hex

from lancet_mlir.graph.dataflow import DataflowGraph
from lancet_mlir.sim.gantt import (
    CATEGORY_COLORS,
    GanttBlock,
    Window,
    compare_figure,
    gantt_figure,
    op_categories,
    parse_window,
    time_unit,
)
from lancet_mlir.sim.timeline import evaluate_fixed_order
from lancet_mlir.support.errors import UserError

# fwd matmul -> all_to_all -> dx matmul -> dw matmul -> allreduce -> optimizer; an allgather
STEP = """func.func @step(%x: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<128x64xf32>) {
  %y = comp.matmul %x, %w {lancet.role = "fwd"} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %a = comm.all_to_all %y split 0 concat 0 {lancet.time_us = 400.0 : f64} : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %dx = comp.matmul %a, %w {lancet.role = "dx"} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %dw = comp.matmul %x, %a {lancet.role = "dw"} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %g = comm.allreduce %dw {lancet.time_us = 3000.0 : f64} : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %n = comp.scale %g {alpha = 0.5 : f64, lancet.role = "update"} : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %ag = comm.allgather %dx {lancet.time_us = 10.0 : f64} : (tensor<64x64xf32>) -> tensor<128x64xf32>
  func.return %n, %ag : tensor<64x64xf32>, tensor<128x64xf32>
}
"""
DURATIONS = [100.0, 400.0, 100.0, 100.0, 3000.0, 50.0, 10.0]


def _block(text: str = STEP) -> GanttBlock:
    module = parse(text)
    func = next(op for op in module.walk() if op.name == "func.func")
    graph = DataflowGraph.from_block(func.body.block)
    tl = evaluate_fixed_order(graph, DURATIONS)
    from lancet_mlir.sim.trace import op_names

    return GanttBlock("@step", tl, op_categories(graph), op_names(graph))


def _bars(ax) -> dict[str, list[tuple[float, float]]]:
    """Category -> the (start, width) bars drawn, from the BrokenBarHCollections."""
    found = {}
    for coll in ax.collections:
        found[coll.get_label()] = [
            (round(p.vertices[0][0], 6), round(p.vertices[2][0] - p.vertices[0][0], 6))
            for p in coll.get_paths()
        ]
    return found


def test_categories_from_roles_and_collective_kinds() -> None:
    assert _block().categories == ["forward", "all-to-all", "backward", "dW", "all-reduce",
                                   "optimizer", "all-gather"]  # fmt: skip


def test_figure_colours_legend_units_and_separate_bars() -> None:
    fig = gantt_figure([_block()], "step")
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["forward", "backward", "dW", "optimizer", "all-to-all", "all-reduce",
                      "all-gather"]  # fmt: skip
    for coll in ax.collections:  # every category in its own colour
        assert to_hex(coll.get_facecolor()[0]) == CATEGORY_COLORS[coll.get_label()].lower()
        assert to_hex(coll.get_edgecolor()[0]) == "#ffffff"  # neighbours stay apart
    # fixed order: fwd [0,100], a2a [100,500], dx [500,600], dw [600,700], ar [700,3700],
    # update [3700,3750], allgather after the allreduce on the one comm stream [3700,3710]
    bars = _bars(ax)
    assert bars["all-reduce"] == [(0.7, 3.0)]  # makespan 3.75 ms: the axis is in ms
    assert bars["backward"] == [(0.5, 0.1)]
    assert ax.get_xlabel() == "time (ms)"
    assert ax.get_xlim() == (0.0, 3.75)
    # only the 400 µs all-to-all and the 3 ms allreduce are >= 4% of the 3.75 ms window
    assert [t.get_text() for t in ax.texts] == ["all_to_all %a", "allreduce %g"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["@step: compute", "@step: comm 1"]


def test_window_zooms_and_switches_units() -> None:
    fig = gantt_figure([_block()], "zoom", Window(450.0, 800.0))
    ax = fig.axes[0]
    assert ax.get_xlabel() == "time (µs) from 450 µs"
    assert ax.get_xlim() == (0.0, 350.0)
    bars = _bars(ax)
    assert bars["all-to-all"] == [(0.0, 50.0)]  # clipped to the window
    assert bars["dW"] == [(150.0, 100.0)]
    assert "forward" not in bars  # outside the window
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "backward",
        "dW",
        "all-to-all",
        "all-reduce",
    ]
    assert time_unit(1999.0)[0] == "µs"
    assert time_unit(2e6)[0] == "s"


@pytest.mark.parametrize(
    ("text", "window"),
    [
        ("2ms:5ms", Window(2000.0, 5000.0)),
        ("300:900", Window(300.0, 900.0)),
        (":1.5s", Window(0.0, 1.5e6)),
        ("250us:", Window(250.0, None)),
    ],
)
def test_parse_window(text: str, window: Window) -> None:
    assert parse_window(text) == window


@pytest.mark.parametrize("text", ["5ms", "3:1", "a:b", "1:2:3"])
def test_bad_window_is_one_clear_error(text: str) -> None:
    # the library names its parameter; lancet-opt renders it as --gantt-window (cases.txt)
    with pytest.raises(UserError, match=f"^gantt-window '{text}': "):
        parse_window(text)
    with pytest.raises(UserError, match=f"^window '{text}': "):
        parse_window(text, "window")


def test_compare_figure_shares_one_time_axis() -> None:
    block = _block()
    fig = compare_figure([block], [block], "cmp", names=("input", "after x"))
    top, bottom = fig.axes
    assert top.get_shared_x_axes().joined(top, bottom)
    assert top.get_title(loc="left") == "input: makespan 3.75 ms"
    assert bottom.get_title(loc="left") == "after x: makespan 3.75 ms"
    assert bottom.get_xlabel() == "time (ms)"
    assert len(top.get_legend().get_texts()) == 7


def test_lancet_opt_writes_gantt_and_comparison(tmp_path: Path) -> None:
    src = tmp_path / "step.mlir"
    src.write_text(STEP)
    g, c = tmp_path / "g.png", tmp_path / "c.png"
    res = run_tool(
        [
            "lancet-opt",
            str(src),
            "-p",
            "lancet-schedule",
            "--gantt",
            str(g),
            "--gantt-compare",
            str(c),
            "--gantt-window",
            "0:2ms",
            "-o",
            str(tmp_path / "o.mlir"),
        ]
    )
    assert res.returncode == 0, res.stderr
    assert g.read_bytes()[:4] == b"\x89PNG"
    assert c.read_bytes()[:4] == b"\x89PNG"
    bad = run_tool(["lancet-opt", str(src), "--gantt", str(g), "--gantt-window", "x"])
    assert bad.returncode == 1
    assert bad.stderr.startswith("lancet-opt: error: --gantt-window 'x'")
