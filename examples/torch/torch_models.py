"""Training steps of three small distributed models, written for lancet-mlir's PyTorch tests.

Each step is a pure function `step(*params, x, target) -> (loss, *new_params)`: the forward,
`torch.autograd.grad`, the collectives of `torch.distributed._functional_collectives` and
an SGD update, so `make_fx` captures the whole iteration as one graph of ATen ops.

* `capacity_moe_step`: transformer blocks (layer norm, attention, residual) whose FFN is an
  expert-parallel mixture of experts with a top-1 gate and a fixed capacity per expert:
  tokens are dispatched with an all-to-all (`all_to_all_single_autograd`), the local experts
  run as batched matmuls, an all-to-all brings the results back; the dense weights' gradients
  are averaged with an all-reduce (data parallel), the experts' are not (each rank owns its).
* `dropless_moe_step`: the same block with a dropless gate: every token reaches its expert,
  so the all-to-all's split sizes depend on the data (one expert per rank).
* `ddp_mlp_step`: a dense MLP trained data parallel (every gradient all-reduced).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed._functional_collectives as fcol
import torch.nn.functional as F
from torch import Tensor

GROUP = "0"
"""The default process group's name (the same under the fake and the gloo group)."""


@dataclass(frozen=True)
class MoeConfig:
    """Sizes of a MoE transformer step (per rank: `batch` sequences of `seq` tokens)."""

    world: int = 2
    layers: int = 1
    d: int = 16
    hidden: int = 32
    heads: int = 2
    seq: int = 8
    batch: int = 2
    experts_per_rank: int = 2
    capacity_factor: float = 1.0
    lr: float = 0.1

    @property
    def tokens(self) -> int:
        """Tokens per rank."""
        return self.seq * self.batch

    @property
    def experts(self) -> int:
        """Experts over all ranks."""
        return self.world * self.experts_per_rank

    @property
    def capacity(self) -> int:
        """Slots per expert and source rank (capacity gate)."""
        return max(1, math.ceil(self.capacity_factor * self.tokens / self.experts))


LAYER_PARAMS = ("ln1_w", "ln1_b", "wqkv", "wo", "ln2_w", "ln2_b", "wg", "w1", "w2")
"""Parameters of one MoE block, in order; `w1`, `w2` are the rank's experts."""
EXPERT_PARAMS = frozenset({"w1", "w2"})


def moe_params(
    cfg: MoeConfig, seed: int = 0, rank: int = 0, dropless: bool = False
) -> list[Tensor]:
    """Parameters of every layer (dense ones equal on all ranks, experts per rank)."""
    dense = torch.Generator().manual_seed(seed)
    local = torch.Generator().manual_seed(seed + 1000 + rank)
    el = 1 if dropless else cfg.experts_per_rank
    experts = cfg.world * el
    d, h = cfg.d, cfg.hidden
    out: list[Tensor] = []
    for _ in range(cfg.layers):
        out += [
            1.0 + 0.1 * torch.randn(d, generator=dense),
            0.1 * torch.randn(d, generator=dense),
            torch.randn(d, 3 * d, generator=dense) / math.sqrt(d),
            torch.randn(d, d, generator=dense) / math.sqrt(d),
            1.0 + 0.1 * torch.randn(d, generator=dense),
            0.1 * torch.randn(d, generator=dense),
            torch.randn(d, experts, generator=dense) / math.sqrt(d),
            torch.randn(el, d, h, generator=local) / math.sqrt(d),
            torch.randn(el, h, d, generator=local) / math.sqrt(h),
        ]
    return out


def moe_data(cfg: MoeConfig, seed: int = 0, rank: int = 0) -> tuple[Tensor, Tensor]:
    """This rank's input tokens and regression target, each `[batch, seq, d]`."""
    g = torch.Generator().manual_seed(seed + 7 + rank)
    shape = (cfg.batch, cfg.seq, cfg.d)
    return torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)


def _attention(h: Tensor, wqkv: Tensor, wo: Tensor, cfg: MoeConfig) -> Tensor:
    b, s, d = cfg.batch, cfg.seq, cfg.d
    hd = d // cfg.heads
    qkv = (h.reshape(b * s, d) @ wqkv).reshape(b, s, 3, cfg.heads, hd)
    q, k, v = (qkv[:, :, i].permute(0, 2, 1, 3).reshape(b * cfg.heads, s, hd) for i in range(3))
    probs = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / math.sqrt(hd), dim=-1)
    ctx = torch.bmm(probs, v).reshape(b, cfg.heads, s, hd).permute(0, 2, 1, 3)
    return (ctx.reshape(b * s, d) @ wo).reshape(b, s, d)


def _experts(tokens: Tensor, w1: Tensor, w2: Tensor) -> Tensor:
    """The local experts on `[E_local, rows, d]` tokens."""
    return torch.bmm(F.gelu(torch.bmm(tokens, w1)), w2)


def capacity_moe(h: Tensor, wg: Tensor, w1: Tensor, w2: Tensor, cfg: MoeConfig) -> Tensor:
    """Top-1 capacity MoE on `[T, d]` tokens: dispatch all-to-all, experts, combine all-to-all."""
    d, e, c, el, w = cfg.d, cfg.experts, cfg.capacity, cfg.experts_per_rank, cfg.world
    probs = torch.softmax(h @ wg, dim=-1)
    top = torch.argmax(probs, dim=-1)
    mask = F.one_hot(top, e).to(h.dtype)  # [T, E]
    slot = ((torch.cumsum(mask, dim=0) - 1.0) * mask).sum(-1).long()  # slot in the expert
    keep = (slot < c).to(h.dtype)
    where = mask[:, :, None] * F.one_hot(slot.clamp(max=c - 1), c).to(h.dtype)[:, None, :]
    dispatch = where * keep[:, None, None]  # [T, E, C]
    gate = (probs * mask).sum(-1)
    sent = torch.einsum("tec,td->ecd", dispatch, h).reshape(e * c, d)
    got = fcol.all_to_all_single_autograd(sent, None, None, GROUP)
    work = got.reshape(w, el, c, d).transpose(0, 1).reshape(el, w * c, d)
    done = _experts(work, w1, w2).reshape(el, w, c, d).transpose(0, 1).reshape(e * c, d)
    back = fcol.all_to_all_single_autograd(done, None, None, GROUP).reshape(e, c, d)
    return torch.einsum("tec,ecd->td", dispatch * gate[:, None, None], back)


def dropless_moe(h: Tensor, wg: Tensor, w1: Tensor, w2: Tensor, cfg: MoeConfig) -> Tensor:
    """Top-1 dropless MoE (one expert per rank): every token reaches its expert, so the
    all-to-all's split sizes depend on the gate's choices (exchanged first)."""
    t, w = cfg.tokens, cfg.world
    probs = torch.softmax(h @ wg, dim=-1)
    top = torch.argmax(probs, dim=-1)
    counts = F.one_hot(top, w).sum(0)  # tokens this rank sends to each expert
    incoming = fcol.all_to_all_single(counts, None, None, GROUP)
    incoming = fcol.wait_tensor(incoming)
    send = counts.tolist()
    recv = incoming.tolist()
    for v in (*send, *recv):
        torch._check(v >= 0)
        torch._check(v <= t * w)
    order = torch.argsort(top, stable=True)
    gate = torch.gather(probs, 1, top[:, None])[:, 0]
    sent = h[order]
    got = fcol.all_to_all_single_autograd(sent, recv, send, GROUP)
    done = _experts(got[None], w1, w2)[0]
    back = fcol.all_to_all_single_autograd(done, send, recv, GROUP)
    out = torch.zeros_like(h).index_copy(0, order, back)
    return out * gate[:, None]


def _moe_forward(params: Sequence[Tensor], x: Tensor, cfg: MoeConfig, moe: Callable) -> Tensor:
    b, s, d = cfg.batch, cfg.seq, cfg.d
    n = len(LAYER_PARAMS)
    for i in range(cfg.layers):
        ln1_w, ln1_b, wqkv, wo, ln2_w, ln2_b, wg, w1, w2 = params[i * n : (i + 1) * n]
        x = x + _attention(F.layer_norm(x, (d,), ln1_w, ln1_b), wqkv, wo, cfg)
        h = F.layer_norm(x, (d,), ln2_w, ln2_b).reshape(b * s, d)
        x = x + moe(h, wg, w1, w2, cfg).reshape(b, s, d)
    return x


def _leaves(params: Sequence[Tensor]) -> list[Tensor]:
    """The parameters as fresh autograd leaves (the step differentiates w.r.t. them)."""
    return [p.detach().requires_grad_(True) for p in params]


def _sgd_step(
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    local: Sequence[bool],
    cfg_world: int,
    lr: float,
) -> list[Tensor]:
    """Average the data-parallel gradients (all-reduce), then p - lr * g for every p."""
    out = []
    for p, g, own in zip(params, grads, local, strict=True):
        if not own:
            g = fcol.all_reduce(g, "sum", GROUP) / cfg_world
        out.append(p.detach() - lr * g)
    return out


def moe_step(cfg: MoeConfig, dropless: bool = False) -> Callable[..., tuple[Tensor, ...]]:
    """`step(*params, x, target) -> (loss, *new_params)` of the capacity or dropless MoE."""
    moe = dropless_moe if dropless else capacity_moe
    local = [name in EXPERT_PARAMS for _ in range(cfg.layers) for name in LAYER_PARAMS]

    def step(*args: Tensor) -> tuple[Tensor, ...]:
        params, x, target = _leaves(args[:-2]), args[-2], args[-1]
        out = _moe_forward(params, x, cfg, moe)
        loss = ((out - target) ** 2).mean()
        grads = torch.autograd.grad(loss, params)
        return (loss.detach(), *_sgd_step(params, grads, local, cfg.world, cfg.lr))

    return step


@dataclass(frozen=True)
class MlpConfig:
    """Sizes of the data-parallel MLP (per rank: `batch` rows)."""

    world: int = 2
    layers: int = 3
    d: int = 16
    batch: int = 8
    lr: float = 0.1


def mlp_params(cfg: MlpConfig, seed: int = 0) -> list[Tensor]:
    """Weights and biases of every layer (equal on all ranks)."""
    g = torch.Generator().manual_seed(seed)
    out: list[Tensor] = []
    for _ in range(cfg.layers):
        out += [torch.randn(cfg.d, cfg.d, generator=g) / math.sqrt(cfg.d), torch.zeros(cfg.d)]
    return out


def mlp_data(cfg: MlpConfig, seed: int = 0, rank: int = 0) -> tuple[Tensor, Tensor]:
    """This rank's input rows and target."""
    g = torch.Generator().manual_seed(seed + 7 + rank)
    return torch.randn(cfg.batch, cfg.d, generator=g), torch.randn(cfg.batch, cfg.d, generator=g)


def ddp_mlp_step(cfg: MlpConfig) -> Callable[..., tuple[Tensor, ...]]:
    """`step(*params, x, target) -> (loss, *new_params)` of the DDP MLP."""

    def step(*args: Tensor) -> tuple[Tensor, ...]:
        params, x, target = _leaves(args[:-2]), args[-2], args[-1]
        h = x
        for i in range(cfg.layers):
            h = h @ params[2 * i] + params[2 * i + 1]
            if i < cfg.layers - 1:
                h = torch.relu(h)
        loss = ((h - target) ** 2).mean()
        grads = torch.autograd.grad(loss, params)
        return (loss.detach(), *_sgd_step(params, grads, [False] * len(params), cfg.world, cfg.lr))

    return step
