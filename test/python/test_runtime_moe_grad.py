"""A tiny MoE layer's backward pass (built from comp + comm ops) against finite differences.

test/data/runtime/moe_grad_w2_f64.mlir is one training step on 2 ranks in float64: dense FFN,
layer norm, switch gate, dispatch, all_to_all, expert batch_matmul, all_to_all, combine,
cross-entropy, the backward pass, and allreduces of the replicated parameters' gradients.
The total loss is the sum of the ranks' losses, so

* dx of rank r is d(total)/d(x of rank r);
* the expert weight gradient of rank r (its tokens come from every rank through the
  all_to_alls) is d(total)/d(we of rank r);
* an allreduced gradient of a replicated parameter is d(total)/d(the shared parameter).

Each is checked against central differences of the forward loss computed by the executor.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from lancet_mlir.runtime import execute
from lancet_mlir.runtime.executor import select_function
from lancet_mlir.runtime.loader import load_module
from lancet_mlir.runtime.values import make_inputs

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = os.path.join(HERE, "..", "data", "runtime", "moe_grad_w2_f64.mlir")

# argument order: x, labels, w1, b1, w2, gamma, beta, wg, we
REPLICATED = {"w1": 2, "b1": 3, "w2": 4, "gamma": 5, "beta": 6, "wg": 7}
# outputs: loss, dx, then the synchronised grads of w1 b1 w2 gamma beta wg, then dwe
GRAD_OUTPUT = {"w1": 2, "b1": 3, "w2": 4, "gamma": 5, "beta": 6, "wg": 7}
EPS = 1e-6


@pytest.fixture(scope="module")
def setup():
    module = load_module(MODULE).module
    func = select_function(module)
    types = list(func.function_type.inputs.data)
    attrs = list(func.arg_attrs.data)
    inputs = {r: make_inputs(types, attrs, seed=11, rank=r) for r in range(2)}
    for index in REPLICATED.values():  # replicated parameters: rank 0's value everywhere
        inputs[1][index] = inputs[0][index].copy()
    inputs[0][5] = inputs[0][5] + 1.0  # gamma around 1, like a trained layer norm
    inputs[1][5] = inputs[0][5].copy()
    base = execute(module, ranks=2, inputs=inputs)
    return module, inputs, base


def total_loss(module, inputs) -> float:
    res = execute(module, ranks=2, inputs=inputs)
    return float(res.outputs[0][0]) + float(res.outputs[1][0])


def directional(module, inputs, targets, direction) -> float:
    """Central difference of the total loss along `direction` applied to `targets`."""

    def shifted(sign: float):
        out = {r: list(v) for r, v in inputs.items()}
        for (rank, index), d in zip(targets, direction, strict=True):
            out[rank][index] = inputs[rank][index] + sign * EPS * d
        return out

    return (total_loss(module, shifted(1.0)) - total_loss(module, shifted(-1.0))) / (2 * EPS)


def test_loss_is_positive_and_tokens_are_routed(setup) -> None:
    module, inputs, base = setup
    for r in (0, 1):
        assert 0 < float(base.outputs[r][0]) < 10
    assert np.abs(base.outputs[0][8]).sum() > 0  # the expert of rank 0 received tokens


@pytest.mark.parametrize("rank", [0, 1])
def test_dx_matches_finite_differences(setup, rank: int) -> None:
    module, inputs, base = setup
    dx = base.outputs[rank][1]
    rng = np.random.default_rng(rank)
    for _ in range(2):
        v = rng.standard_normal(dx.shape)
        numeric = directional(module, inputs, [(rank, 0)], [v])
        assert numeric == pytest.approx(float((dx * v).sum()), rel=1e-5, abs=1e-8)
    # and element-wise for a few entries
    for i, j in ((0, 0), (3, 2), (7, 3)):
        e = np.zeros_like(dx)
        e[i, j] = 1.0
        numeric = directional(module, inputs, [(rank, 0)], [e])
        assert numeric == pytest.approx(float(dx[i, j]), rel=1e-5, abs=1e-8)


@pytest.mark.parametrize("rank", [0, 1])
def test_expert_weight_gradient_matches_finite_differences(setup, rank: int) -> None:
    module, inputs, base = setup
    dwe = base.outputs[rank][8]
    for idx in np.ndindex(*dwe.shape):
        e = np.zeros_like(dwe)
        e[idx] = 1.0
        numeric = directional(module, inputs, [(rank, 8)], [e])
        assert numeric == pytest.approx(float(dwe[idx]), rel=1e-5, abs=1e-8), idx


@pytest.mark.parametrize("name", list(REPLICATED))
def test_replicated_parameter_gradients_match_finite_differences(setup, name: str) -> None:
    module, inputs, base = setup
    index, out = REPLICATED[name], GRAD_OUTPUT[name]
    grad = base.outputs[0][out]
    np.testing.assert_array_equal(grad, base.outputs[1][out])  # allreduced: same on all ranks
    v = np.random.default_rng(index).standard_normal(grad.shape)
    # the parameter is shared: move it on both ranks at once
    numeric = directional(module, inputs, [(0, index), (1, index)], [v, v])
    assert numeric == pytest.approx(float((grad * v).sum()), rel=1e-5, abs=1e-8)
