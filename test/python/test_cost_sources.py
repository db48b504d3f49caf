"""The cost model's chain of sources (cost/sources.py): a caller's source plugs in without
editing the chain, the built-in order still holds around it, and bad sources are refused."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import parse
from xdsl.ir import Operation

from lancet_mlir.cost.cost_model import CostConfig, CostModel
from lancet_mlir.cost.sources import CostSource
from lancet_mlir.cost.time_source import count_sources, time_source
from lancet_mlir.graph.dataflow import op_display_name
from lancet_mlir.support.errors import UserError

STEP = """func.func @f(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %a = comp.scale %x {alpha = 2.0 : f64, lancet.time_us = 7.0 : f64} : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %b = comp.gelu %a : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %c = comp.gelu_dx %b, %a : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %d = comm.allreduce %c : (tensor<64x64xf32>) -> tensor<64x64xf32>
  func.return %d : tensor<64x64xf32>
}
"""
GELU_KEY = "comp.gelu;T<64x64xf32>,|T<64x64xf32>"


@dataclass(frozen=True)
class Durations:
    """A trace-like source: fixed durations by op name."""

    us: tuple[tuple[str, float], ...]
    name: str = "trace"
    measured: bool = True

    def time_us(self, op: Operation, world_size: int | None) -> float | None:
        return dict(self.us).get(op_display_name(op))


def _ops() -> list[Operation]:
    module = parse(STEP)
    return [op for op in module.walk() if op.parent_block() is not None
            and op.name not in ("func.func", "func.return")]  # fmt: skip


def _profile(tmp_path: Path) -> str:
    path = tmp_path / "prof.json"
    path.write_text(json.dumps({
        "format": "lancet-profile", "version": 1, "metadata": {"device": "h100"},
        "entries": {GELU_KEY: {"mean_us": 11.0, "count": 1, "std_us": 0.0, "min_us": 11.0,
                               "max_us": 11.0}},
    }))  # fmt: skip
    return str(path)


def test_a_custom_source_is_used_between_the_profile_and_the_estimates(tmp_path: Path) -> None:
    trace = Durations((("comp.gelu", 3.0), ("comp.gelu_dx", 5.0), ("comp.scale", 1.0),
                       ("comm.allreduce", 9.0)))  # fmt: skip
    assert isinstance(trace, CostSource)
    ops = _ops()
    plain = CostModel.from_config(CostConfig())
    model = CostModel.from_config(CostConfig(sources=(trace,)))
    # the attribute still wins (7.0); the trace gives gelu, relu and the allreduce
    assert [model.op_time_us(op) for op in ops] == [7.0, 3.0, 5.0, 9.0]
    assert [time_source(model, op) for op in ops] == ["attribute", "trace", "trace", "trace"]
    assert [time_source(plain, op) for op in ops] == ["attribute", "roofline", "roofline", "table"]
    assert count_sources(model, ops) == {"attribute": 1, "profile": 0, "table": 0,
                                         "alpha-beta": 0, "roofline": 0, "zero": 0,
                                         "trace": 3}  # fmt: skip
    # a profile entry beats the caller's source: gelu measured 11.0
    profiled = CostModel.from_config(CostConfig(profiles=(_profile(tmp_path),), sources=(trace,)))
    assert [profiled.op_time_us(op) for op in ops] == [7.0, 11.0, 5.0, 9.0]
    assert [s.name for s in profiled.chain] == [
        "attribute",
        "in-place",
        "profile",
        "trace",
        "table",
        "alpha-beta",
        "roofline",
    ]


def test_a_whole_chain_replaces_the_default() -> None:
    trace = Durations((("comp.gelu_dx", 5.0),))
    model = CostModel.build(CostConfig(), chain=[trace])
    ops = _ops()
    # nothing else in the chain: the explicit attribute is not read, the rest is zero
    assert [model.op_time_us(op) for op in ops] == [0.0, 0.0, 5.0, 0.0]
    assert [time_source(model, op) for op in ops] == ["zero", "zero", "trace", "zero"]
    assert model.warn_unknown() == ["comm.allreduce", "comp.gelu", "comp.scale"]


def test_a_source_without_the_protocol_is_refused() -> None:
    class NoName:
        def time_us(self, op: Operation, world_size: int | None) -> float | None:
            return None

    with pytest.raises(UserError, match="needs a str `name`"):
        CostModel.build(CostConfig(), chain=[NoName()])  # type: ignore[list-item]
