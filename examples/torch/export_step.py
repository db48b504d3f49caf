"""A step for `lancet-torch export`: `make_step()` returns (step_fn, example_args).

lancet-torch export examples/torch/export_step.py:make_step --world-size 2 -o step.mlir
lancet-opt -p lancet-schedule --cluster p3dn step.mlir --report report.json -o /dev/null
"""

from __future__ import annotations

import torch_models as tm


def make_step():
    """The small capacity MoE step of the tests, for 2 ranks."""
    cfg = tm.MoeConfig(world=2)
    return tm.moe_step(cfg), [*tm.moe_params(cfg), *tm.moe_data(cfg)]
