"""GPT-2-style mixture-of-experts training graph: one iteration, one rank, built directly as IR.

`build_gpt2_moe(cfg)` emits a module with one function `@train_step` holding the forward
pass, the loss, the backward pass (separate dX and dW ops), the data-parallel all-reduce of
every dense gradient and one optimizer update per parameter, in the `comp` and `comm`
dialects. Every op carries `lancet.role` = "fwd" | "dx" | "dw" | "update"; the module carries
`lancet.world_size`.

Model (per rank; T = batch·seq tokens, M = hidden, H = heads, D = M/H, F = 4·M,
V = vocab, G = world size, El = experts per rank, E = G·El experts):

* embedding: `wte[V, M]` gathered at `ids[B, S]`, plus the position table `wpe[S, M]`
  (one row per position of the sequence, broadcast over the batch);
* per layer: pre-layer-norm attention (QKV projection `[M, 3M]` + bias, per-head causal
  attention as reshape/transpose + batch_matmul over B·H, softmax, output projection + bias,
  residual add), then a pre-layer-norm FFN:
  - dense (matmul + bias, gelu, matmul + bias), or
  - MoE, for layers `i` with `i % moe_every == moe_every - 1` (every other layer by default,
    as GShard and Lancet's GPT-2 MoE): gate matmul `[M, E]` -> `moe_gate` -> `moe_dispatch`
    into `[E, C, M]` -> `comm.all_to_all` (split 0, concat 1) to `[El, G·C, M]` -> expert
    FFN as batch_matmuls over the local experts (`[El, M, F]`, gelu, `[El, F, M]`, no expert
    biases) -> `comm.all_to_all` back (split 1, concat 0) -> `moe_combine`, residual add;
* final layer norm, LM head tied to `wte` (GPT-2 ties them), mean cross-entropy loss.

Capacity (GShard): `C = ceil(capacity_factor · k · T / E)` with k = 1 for the `switch` gate
and k = 2 for `top2`; tokens routed past an expert's capacity are dropped. The default
capacity factor is 1.0 (Lancet's experiments; GShard trains with 1.0-2.0).

Backward and optimizer: the loss is each rank's mean over its tokens, and the global loss is
the mean over ranks, so dense gradients are all-reduced with `reduce avg` and expert
gradients (which already sum every rank's tokens through the all-to-alls) are scaled by 1/G;
expert weights are never all-reduced. Each gradient all-reduce follows its gradient directly
in program order; the optimizer updates (`adam_update` or `sgd_update`, kernel-default
hyper-parameters) come after the backward pass, in parameter order. Dropout is omitted.

Function arguments: `ids` (`[B, S]` i64) and `labels` (`[T]` i64) with `lancet.max_int = V`,
then the parameters, then (Adam) the first and second moments; float parameters carry
`lancet.init_scale = 0.02` and optimizer moments `lancet.init_scale = 0.0` (zeros). The
function returns the loss, the updated parameters and (Adam) the updated moments, in that
order. Every argument has a `lancet.name` attribute with its parameter name.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    UnitAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from lancet_mlir import attrs
from lancet_mlir.dialects.comm import (
    AllReduceOp,
    AllToAllOp,
    ReductionAttr,
    ReductionKind,
)
from lancet_mlir.dialects.comp import build_op, element_type, tensor_sig
from lancet_mlir.dialects.vocab import Role
from lancet_mlir.support.errors import UserError

GATES = ("switch", "top2")
DTYPES = ("f32", "f16", "bf16", "f64")
OPTIMIZERS = ("adam", "sgd")
INIT_SCALE = 0.02
FUNC_NAME = "train_step"


MAX_LAYERS = 4096
"""Most layers `lancet-model` builds (about 400k ops); see `GPT2MoEConfig.validate`."""
OPS_PER_LAYER = 100
"""Ops per transformer layer of the generated graph (forward, backward, optimizer), roughly."""
I64_MAX = 2**63 - 1


@dataclass(frozen=True)
class GPT2MoEConfig:
    """Shape and training options of a GPT-2 MoE model (per rank; see the module doc)."""

    layers: int = 12
    """Number of transformer layers."""
    hidden: int = 768
    """Model width M."""
    heads: int = 16
    """Attention heads (must divide `hidden`)."""
    seq: int = 512
    """Sequence length S."""
    batch: int = 48
    """Micro-batch per rank B (sequences)."""
    world_size: int = 16
    """Ranks G; data- and expert-parallel over all of them."""
    experts_per_rank: int = 2
    """Local experts El; E = G·El experts in all."""
    gate: str = "switch"
    """`switch` (top-1) or `top2`."""
    moe_every: int = 2
    """Layer i is MoE iff i % moe_every == moe_every - 1 (0 = no MoE layer)."""
    capacity_factor: float = 1.0
    """GShard capacity factor."""
    vocab: int = 50257
    """Vocabulary size V."""
    dtype: str = "f32"
    """Parameter and activation dtype: f32, f16, bf16 or f64 (the loss is f32, f64 for f64)."""
    optimizer: str = "adam"
    """`adam` or `sgd`."""
    ffn_mult: int = 4
    """FFN width F = ffn_mult · hidden (dense and expert FFNs)."""

    def validate(self) -> None:
        """Raise UserError naming the first bad option."""
        positive = ("layers", "hidden", "heads", "seq", "batch", "world_size",
                    "experts_per_rank", "vocab", "ffn_mult")  # fmt: skip
        for name in positive:
            if getattr(self, name) < 1:
                raise UserError(f"gpt2-moe: {name} must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise UserError(f"gpt2-moe: heads ({self.heads}) must divide hidden ({self.hidden})")
        if self.gate not in GATES:
            raise UserError(f"gpt2-moe: gate must be one of {', '.join(GATES)}, got '{self.gate}'")
        if self.dtype not in DTYPES:
            raise UserError(
                f"gpt2-moe: dtype must be one of {', '.join(DTYPES)}, got '{self.dtype}'"
            )
        if self.optimizer not in OPTIMIZERS:
            raise UserError(
                f"gpt2-moe: optimizer must be one of {', '.join(OPTIMIZERS)}, got '{self.optimizer}'"
            )
        if self.moe_every < 0:
            raise UserError(f"gpt2-moe: moe_every must be >= 0, got {self.moe_every}")
        if not (math.isfinite(self.capacity_factor) and self.capacity_factor > 0):
            raise UserError(
                f"gpt2-moe: capacity_factor must be a finite number > 0, got {self.capacity_factor}"
            )
        if self.gate == "top2" and self.num_experts < 2:
            raise UserError("gpt2-moe: the top2 gate needs at least 2 experts")
        self._validate_size()

    def _validate_size(self) -> None:
        """Refuse sizes that could only run out of memory or overflow i64 dimensions."""
        if self.layers > MAX_LAYERS:
            raise UserError(
                f"gpt2-moe: layers must be <= {MAX_LAYERS}, got {self.layers} (about "
                f"{OPS_PER_LAYER} ops per layer: larger graphs exhaust memory while being built)"
            )
        largest = {  # the largest tensors of the graph (elements), by what they multiply
            "batch*seq*ffn_mult*hidden": self.tokens * self.ffn_mult * self.hidden,
            "vocab*hidden": self.vocab * self.hidden,
            "batch*seq*vocab": self.tokens * self.vocab,
            "batch*heads*seq*seq": self.batch * self.heads * self.seq * self.seq,
        }
        for what, elements in largest.items():
            if elements > I64_MAX:
                raise UserError(
                    f"gpt2-moe: a tensor of {what} = {elements} elements does not fit in i64"
                )

    # ---- derived sizes ---------------------------------------------------------------------
    @property
    def tokens(self) -> int:
        """Tokens per rank T = batch · seq."""
        return self.batch * self.seq

    @property
    def num_experts(self) -> int:
        """Experts in all, E = world_size · experts_per_rank."""
        return self.world_size * self.experts_per_rank

    @property
    def top_k(self) -> int:
        """Experts each token is routed to (1 for switch, 2 for top2)."""
        return 2 if self.gate == "top2" else 1

    @property
    def capacity(self) -> int:
        """Expert capacity C = ceil(capacity_factor · top_k · T / E) (GShard), at least 1."""
        exact = self.capacity_factor * self.top_k * self.tokens / self.num_experts
        # round away float noise (1.0 * 8192 / 32 must be 256, not 257)
        return max(1, math.ceil(round(exact, 9)))

    @property
    def head_dim(self) -> int:
        """Per-head width D = hidden / heads."""
        return self.hidden // self.heads

    @property
    def ffn_hidden(self) -> int:
        """FFN width F."""
        return self.ffn_mult * self.hidden

    def is_moe(self, layer: int) -> bool:
        """True when layer `layer` (0-based) has an MoE FFN."""
        return self.moe_every > 0 and layer % self.moe_every == self.moe_every - 1

    @property
    def moe_layers(self) -> list[int]:
        """Indices of the MoE layers."""
        return [i for i in range(self.layers) if self.is_moe(i)]


def _preset(layers: int, hidden: int, batch: int) -> GPT2MoEConfig:
    return GPT2MoEConfig(layers=layers, hidden=hidden, heads=16, seq=512, batch=batch,
                         world_size=16, experts_per_rank=2)  # fmt: skip


PRESETS: dict[str, GPT2MoEConfig] = {
    "gpt2_moe_nl12_m768_nh16_sl512_b48": _preset(12, 768, 48),
    "gpt2_moe_nl12_m768_nh16_sl512_b16": _preset(12, 768, 16),
    "gpt2_moe_nl24_m1024_nh16_sl512_b24": _preset(24, 1024, 24),
    "gpt2_moe_nl24_m1024_nh16_sl512_b16": _preset(24, 1024, 16),
    "gpt2_moe_nl24_m1024_nh16_sl512_b8": _preset(24, 1024, 8),
}
"""Lancet's GPT-2 MoE configurations (lancet-algorithms.md §12): 16 ranks, 2 experts per rank."""


# ---------------------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelParam:
    """One trainable parameter: name, shape and whether it is an (unreplicated) expert weight."""

    name: str
    shape: tuple[int, ...]
    expert: bool = False


def param_specs(cfg: GPT2MoEConfig) -> list[ModelParam]:
    """Every parameter of the model, in argument order."""
    m, f, el = cfg.hidden, cfg.ffn_hidden, cfg.experts_per_rank
    specs = [ModelParam("wte", (cfg.vocab, m)), ModelParam("wpe", (cfg.seq, m))]
    for i in range(cfg.layers):
        p = f"l{i}_"
        specs += [
            ModelParam(p + "ln1_g", (m,)), ModelParam(p + "ln1_b", (m,)),
            ModelParam(p + "wqkv", (m, 3 * m)), ModelParam(p + "bqkv", (3 * m,)),
            ModelParam(p + "wo", (m, m)), ModelParam(p + "bo", (m,)),
            ModelParam(p + "ln2_g", (m,)), ModelParam(p + "ln2_b", (m,)),
        ]  # fmt: skip
        if cfg.is_moe(i):
            specs += [
                ModelParam(p + "wg", (m, cfg.num_experts)),
                ModelParam(p + "we1", (el, m, f), expert=True),
                ModelParam(p + "we2", (el, f, m), expert=True),
            ]
        else:
            specs += [
                ModelParam(p + "w1", (m, f)), ModelParam(p + "b1", (f,)),
                ModelParam(p + "w2", (f, m)), ModelParam(p + "b2", (m,)),
            ]  # fmt: skip
    specs += [ModelParam("lnf_g", (m,)), ModelParam("lnf_b", (m,))]
    return specs


# ---------------------------------------------------------------------------------------
# Builder
# ---------------------------------------------------------------------------------------


@dataclass
class _Builder:
    """Appends ops to one block, tagging roles and value names."""

    block: Block
    role: str = Role.FWD

    def op(
        self,
        kernel: str,
        inputs: Sequence[SSAValue],
        params: dict | None = None,
        name: str | None = None,
        role: str | None = None,
    ) -> Operation:
        """Append `comp.<kernel>` with role `role` (default: the builder's current role)."""
        op = build_op(kernel, inputs, params, {attrs.ROLE: role or self.role})
        self.block.add_op(op)
        if name is not None:  # names single results; multi-result ops are named by the caller
            assert len(op.results) == 1, kernel
            op.results[0].name_hint = name
        return op

    def v(self, kernel: str, inputs: Sequence[SSAValue], params: dict | None = None,
          name: str | None = None, role: str | None = None) -> SSAValue:  # fmt: skip
        """Append a single-result op and return its result."""
        return self.op(kernel, inputs, params, name, role).results[0]

    def all_to_all(self, x: SSAValue, split: int, concat: int, group: int, name: str) -> SSAValue:
        """Append a `comm.all_to_all` (split/concat axes) and return its result."""
        ty = x.type
        assert isinstance(ty, TensorType)
        shape = list(ty.get_shape())
        shape[split] //= group
        shape[concat] *= group
        op = AllToAllOp(
            [x],
            [TensorType(ty.element_type, shape)],
            {"split_axis": IntegerAttr(split, i64), "concat_axis": IntegerAttr(concat, i64)},
        )
        op.attributes[attrs.ROLE] = StringAttr(self.role)
        self.block.add_op(op)
        op.results[0].name_hint = name
        return op.results[0]

    def allreduce_avg(self, g: SSAValue, name: str) -> SSAValue:
        """Append the data-parallel average of gradient `g` (role dw)."""
        op = AllReduceOp([g], [g.type], {"reduction": ReductionAttr(ReductionKind.AVG)})
        op.attributes[attrs.ROLE] = StringAttr(Role.DW)
        self.block.add_op(op)
        op.results[0].name_hint = name
        return op.results[0]


def _shape(v: SSAValue) -> tuple[int, ...]:
    return tensor_sig(v.type).shape


@dataclass
class _Layer:
    """Forward values of one layer that its backward pass reads."""

    x: SSAValue
    ln1: SSAValue
    qh: SSAValue
    kh: SSAValue
    vh: SSAValue
    probs: SSAValue
    ctx2d: SSAValue
    x1: SSAValue
    ln2: SSAValue
    ffn: dict[str, SSAValue] = field(default_factory=dict)


class _Model:
    """Emits the training step of one config into one block."""

    def __init__(self, cfg: GPT2MoEConfig, block: Block, params: dict[str, SSAValue]):
        self.cfg = cfg
        self.b = _Builder(block)
        self.p = params
        self.grads: dict[str, SSAValue] = {}

    # ---- gradients -------------------------------------------------------------------------
    def grad(self, name: str, g: SSAValue) -> None:
        """Record the local gradient of parameter `name`; dense ones are all-reduced at once."""
        if name in self.grads:
            raise AssertionError(f"gradient of {name} produced twice")
        self.grads[name] = self.b.allreduce_avg(g, f"{name}_gavg")

    def expert_grad(self, name: str, g: SSAValue) -> None:
        """Record an expert gradient: scaled by 1/G (global mean loss), never all-reduced."""
        if self.cfg.world_size > 1:
            g = self.b.v(
                "scale", [g], {"alpha": 1.0 / self.cfg.world_size}, f"{name}_gscaled", Role.DW
            )
        self.grads[name] = g

    # ---- forward ---------------------------------------------------------------------------
    def heads_view(self, x: SSAValue, name: str) -> SSAValue:
        """[T, M] -> [B·H, S, D]."""
        c, b = self.cfg, self.b
        r = b.v("reshape", [x], {"shape": (c.batch, c.seq, c.heads, c.head_dim)})
        t = b.v("transpose", [r], {"perm": (0, 2, 1, 3)})
        return b.v("reshape", [t], {"shape": (c.batch * c.heads, c.seq, c.head_dim)}, name)

    def tokens_view(self, x: SSAValue, name: str) -> SSAValue:
        """[B·H, S, D] -> [T, M] (inverse of heads_view)."""
        c, b = self.cfg, self.b
        r = b.v("reshape", [x], {"shape": (c.batch, c.heads, c.seq, c.head_dim)})
        t = b.v("transpose", [r], {"perm": (0, 2, 1, 3)})
        return b.v("reshape", [t], {"shape": (c.tokens, c.hidden)}, name)

    def forward_layer(self, i: int, x: SSAValue) -> tuple[SSAValue, _Layer]:
        """One transformer layer; returns its output and the values backward needs."""
        c, b, p, n = self.cfg, self.b, self.p, f"l{i}_"
        ln1 = b.v("layer_norm", [x, p[n + "ln1_g"], p[n + "ln1_b"]], name=n + "ln1")
        qkv = b.v("matmul", [ln1, p[n + "wqkv"]], name=n + "qkv")
        qkvb = b.v("bias_add", [qkv, p[n + "bqkv"]], name=n + "qkvb")
        q, k, v = b.op("split", [qkvb], {"axis": 1, "num": 3}).results
        qh, kh, vh = (self.heads_view(t, n + s) for t, s in ((q, "qh"), (k, "kh"), (v, "vh")))
        scores = b.v("batch_matmul", [qh, kh], {"transpose_b": True}, n + "scores")
        scaled = b.v("scale", [scores], {"alpha": 1.0 / math.sqrt(c.head_dim)})
        probs = b.v("softmax", [scaled], {"axis": -1, "causal": True}, n + "probs")
        ctx = b.v("batch_matmul", [probs, vh], name=n + "ctx")
        ctx2d = self.tokens_view(ctx, n + "ctx2d")
        proj = b.v("matmul", [ctx2d, p[n + "wo"]])
        projb = b.v("bias_add", [proj, p[n + "bo"]])
        x1 = b.v("add", [x, projb], name=n + "x1")
        ln2 = b.v("layer_norm", [x1, p[n + "ln2_g"], p[n + "ln2_b"]], name=n + "ln2")
        saved = _Layer(x, ln1, qh, kh, vh, probs, ctx2d, x1, ln2)
        out = self.moe_forward(i, ln2, saved) if c.is_moe(i) else self.dense_forward(i, ln2, saved)
        return b.v("add", [x1, out], name=n + "out"), saved

    def dense_forward(self, i: int, h: SSAValue, saved: _Layer) -> SSAValue:
        """matmul + bias, gelu, matmul + bias."""
        b, p, n = self.b, self.p, f"l{i}_"
        f1 = b.v("matmul", [h, p[n + "w1"]])
        f1b = b.v("bias_add", [f1, p[n + "b1"]], name=n + "f1b")
        act = b.v("gelu", [f1b], name=n + "act")
        f2 = b.v("matmul", [act, p[n + "w2"]])
        saved.ffn = {"f1b": f1b, "act": act}
        return b.v("bias_add", [f2, p[n + "b2"]])

    def moe_forward(self, i: int, h: SSAValue, saved: _Layer) -> SSAValue:
        """Gate, dispatch, all-to-all, expert FFN, all-to-all back, combine."""
        c, b, p, n = self.cfg, self.b, self.p, f"l{i}_"
        gate = {"gate": c.gate, "capacity": c.capacity}
        logits = b.v("matmul", [h, p[n + "wg"]], name=n + "gate_logits")
        combine, dispatch = b.op("moe_gate", [logits], gate).results
        combine.name_hint, dispatch.name_hint = n + "combine", n + "dispatch"
        din = b.v("moe_dispatch", [h, dispatch], name=n + "dispatched")
        xe = b.all_to_all(din, 0, 1, c.world_size, n + "expert_in")
        z = b.v("batch_matmul", [xe, p[n + "we1"]], name=n + "expert_h")
        act = b.v("gelu", [z], name=n + "expert_act")
        y = b.v("batch_matmul", [act, p[n + "we2"]], name=n + "expert_out")
        yo = b.all_to_all(y, 1, 0, c.world_size, n + "returned")
        saved.ffn = {"logits": logits, "combine": combine, "dispatch": dispatch, "xe": xe,
                     "z": z, "act": act, "yo": yo}  # fmt: skip
        return b.v("moe_combine", [yo, combine], name=n + "moe_out")

    # ---- backward --------------------------------------------------------------------------
    def backward_layer(self, i: int, s: _Layer, dout: SSAValue) -> SSAValue:
        """Gradient of layer i's input from the gradient of its output."""
        c, b, p, n = self.cfg, self.b, self.p, f"l{i}_"
        dln2 = self.moe_backward(i, s, dout) if c.is_moe(i) else self.dense_backward(i, s, dout)
        dx1_ln = b.v("layer_norm_dx", [dln2, s.x1, p[n + "ln2_g"]], role=Role.DX)
        dg, dbeta = b.op("layer_norm_dw", [dln2, s.x1], role=Role.DW).results
        self.grad(n + "ln2_g", dg)
        self.grad(n + "ln2_b", dbeta)
        dx1 = b.v("add", [dout, dx1_ln], name=n + "dx1", role=Role.DX)
        # attention output projection
        self.grad(n + "bo", b.v("reduce_sum", [dx1], {"axes": (0,)}, role=Role.DW))
        dctx2d = b.v("matmul_dx", [dx1, p[n + "wo"]], role=Role.DX)
        self.grad(n + "wo", b.v("matmul_dw", [s.ctx2d, dx1], role=Role.DW))
        dctx = self.heads_view(dctx2d, n + "dctx")
        dprobs = b.v("batch_matmul_dx", [dctx, s.vh], role=Role.DX)
        dvh = b.v("batch_matmul_dw", [s.probs, dctx], role=Role.DX)
        dscaled = b.v("softmax_dx", [dprobs, s.probs], {"axis": -1}, role=Role.DX)
        dscores = b.v("scale", [dscaled], {"alpha": 1.0 / math.sqrt(c.head_dim)}, role=Role.DX)
        dqh = b.v("batch_matmul_dx", [dscores, s.kh], {"transpose_b": True}, role=Role.DX)
        dkh = b.v("batch_matmul_dw", [s.qh, dscores], {"transpose_b": True}, role=Role.DX)
        parts = [self.tokens_view(d, n + nm) for d, nm in ((dqh, "dq"), (dkh, "dk"), (dvh, "dv"))]
        dqkv = b.v("concat", parts, {"axis": 1}, n + "dqkv", role=Role.DX)
        self.grad(n + "bqkv", b.v("reduce_sum", [dqkv], {"axes": (0,)}, role=Role.DW))
        dln1 = b.v("matmul_dx", [dqkv, p[n + "wqkv"]], role=Role.DX)
        self.grad(n + "wqkv", b.v("matmul_dw", [s.ln1, dqkv], role=Role.DW))
        dx_ln = b.v("layer_norm_dx", [dln1, s.x, p[n + "ln1_g"]], role=Role.DX)
        dg, dbeta = b.op("layer_norm_dw", [dln1, s.x], role=Role.DW).results
        self.grad(n + "ln1_g", dg)
        self.grad(n + "ln1_b", dbeta)
        return b.v("add", [dx1, dx_ln], name=n + Role.DX, role=Role.DX)

    def dense_backward(self, i: int, s: _Layer, dout: SSAValue) -> SSAValue:
        """Backward of the dense FFN; returns the gradient of its input."""
        b, p, n, f = self.b, self.p, f"l{i}_", s.ffn
        self.grad(n + "b2", b.v("reduce_sum", [dout], {"axes": (0,)}, role=Role.DW))
        dact = b.v("matmul_dx", [dout, p[n + "w2"]], role=Role.DX)
        self.grad(n + "w2", b.v("matmul_dw", [f["act"], dout], role=Role.DW))
        df1 = b.v("gelu_dx", [dact, f["f1b"]], role=Role.DX)
        self.grad(n + "b1", b.v("reduce_sum", [df1], {"axes": (0,)}, role=Role.DW))
        dh = b.v("matmul_dx", [df1, p[n + "w1"]], name=n + "dln2", role=Role.DX)
        self.grad(n + "w1", b.v("matmul_dw", [s.ln2, df1], role=Role.DW))
        return dh

    def moe_backward(self, i: int, s: _Layer, dout: SSAValue) -> SSAValue:
        """Backward of the MoE FFN (two all-to-alls); returns the gradient of its input."""
        c, b, p, n, f = self.cfg, self.b, self.p, f"l{i}_", s.ffn
        gate = {"gate": c.gate, "capacity": c.capacity}
        dyo = b.v("moe_combine_dx", [dout, f["combine"]], name=n + "d_returned", role=Role.DX)
        dcomb = b.v("moe_combine_dw", [dout, f["yo"]], name=n + "d_combine", role=Role.DX)
        dy = b.all_to_all(dyo, 0, 1, c.world_size, n + "d_expert_out")
        dact = b.v("batch_matmul_dx", [dy, p[n + "we2"]], role=Role.DX)
        self.expert_grad(n + "we2", b.v("batch_matmul_dw", [f["act"], dy], role=Role.DW))
        dz = b.v("gelu_dx", [dact, f["z"]], role=Role.DX)
        dxe = b.v("batch_matmul_dx", [dz, p[n + "we1"]], name=n + "d_expert_in", role=Role.DX)
        self.expert_grad(n + "we1", b.v("batch_matmul_dw", [f["xe"], dz], role=Role.DW))
        ddin = b.all_to_all(dxe, 1, 0, c.world_size, n + "d_dispatched")
        dh_moe = b.v("moe_dispatch_dx", [ddin, f["dispatch"]], role=Role.DX)
        dlogits = b.v("moe_gate_dx", [dcomb, f["logits"]], gate, n + "d_gate_logits", Role.DX)
        dh_gate = b.v("matmul_dx", [dlogits, p[n + "wg"]], role=Role.DX)
        self.grad(n + "wg", b.v("matmul_dw", [s.ln2, dlogits], role=Role.DW))
        return b.v("add", [dh_moe, dh_gate], name=n + "dln2", role=Role.DX)

    # ---- whole step ------------------------------------------------------------------------
    def build(self, ids: SSAValue, labels: SSAValue) -> SSAValue:
        """Forward, loss and backward; fills `self.grads` and returns the loss."""
        c, b, p = self.cfg, self.b, self.p
        emb = b.v("embedding", [p["wte"], ids], name="tok_emb")
        pos = b.v("add", [emb, p["wpe"]], name="emb")
        x = b.v("reshape", [pos], {"shape": (c.tokens, c.hidden)}, "x0")
        saved: list[_Layer] = []
        for i in range(c.layers):
            x, s = self.forward_layer(i, x)
            saved.append(s)
        hf = b.v("layer_norm", [x, p["lnf_g"], p["lnf_b"]], name="lnf")
        logits = b.v("matmul", [hf, p["wte"]], {"transpose_b": True}, "logits")
        loss = b.v("cross_entropy", [logits, labels], name="loss")
        b.role = Role.DX
        dlogits = b.v("cross_entropy_dx", [logits, labels], name="dlogits")
        dhf = b.v("matmul_dx", [dlogits, p["wte"]], {"transpose_b": True})
        dwte_head = b.v("matmul_dw", [hf, dlogits], {"transpose_b": True}, role=Role.DW)
        dx = b.v("layer_norm_dx", [dhf, x, p["lnf_g"]], name="dxL")
        dg, dbeta = b.op("layer_norm_dw", [dhf, x], role=Role.DW).results
        self.grad("lnf_g", dg)
        self.grad("lnf_b", dbeta)
        for i in reversed(range(c.layers)):
            dx = self.backward_layer(i, saved[i], dx)
        dpos = b.v("reshape", [dx], {"shape": (c.batch, c.seq, c.hidden)}, "demb")
        self.grad("wpe", b.v("reduce_sum", [dpos], {"axes": (0,)}, role=Role.DW))
        dwte_emb = b.v("embedding_dw", [dpos, ids], {"num_embeddings": c.vocab}, role=Role.DW)
        self.grad("wte", b.v("add", [dwte_head, dwte_emb], name="dwte", role=Role.DW))
        return loss


# ---------------------------------------------------------------------------------------
# Module assembly
# ---------------------------------------------------------------------------------------


def _arg_attrs(**entries: Attribute) -> DictionaryAttr:
    return DictionaryAttr(dict(entries))


def _param_attrs(name: str, spec: ModelParam, scale: float, is_state: bool) -> DictionaryAttr:
    """Argument attributes telling the runtime how to initialise a parameter or optimizer state.

    Dense parameters (and their states) are data-parallel replicas: `lancet.replicated` makes
    every rank draw the same values. Layer-norm gains start at exactly 1 (`lancet.init_offset`),
    biases and optimizer states at 0, other weights at N(0, 0.02).
    """
    entries: dict[str, Attribute] = {attrs.NAME: StringAttr(name)}
    is_gain = spec.name.endswith(("_g", "lnf_g")) and len(spec.shape) == 1
    is_bias = len(spec.shape) == 1 and not is_gain
    if is_state or is_bias:
        scale = 0.0
    entries[attrs.INIT_SCALE] = FloatAttr(0.0 if is_gain else scale, f64)
    if is_gain and not is_state:
        entries[attrs.INIT_OFFSET] = FloatAttr(1.0, f64)
    if not spec.expert:
        entries[attrs.REPLICATED] = UnitAttr()
    return DictionaryAttr(entries)


def build_gpt2_moe(cfg: GPT2MoEConfig) -> ModuleOp:
    """One training iteration of `cfg` for one rank (see the module doc); UserError on bad cfg."""
    cfg.validate()
    elem = element_type(cfg.dtype)
    specs = param_specs(cfg)
    states = ("m", "v") if cfg.optimizer == "adam" else ()
    int_bound = IntegerAttr(cfg.vocab, i64)
    arg_types: list[Attribute] = [
        TensorType(i64, (cfg.batch, cfg.seq)),
        TensorType(i64, (cfg.tokens,)),
    ]
    arg_names = ["ids", "labels"]
    arg_attrs = [
        _arg_attrs(**{attrs.MAX_INT: int_bound, attrs.NAME: StringAttr(nm)}) for nm in arg_names
    ]
    for prefix, scale in (("", INIT_SCALE), *((s + "_", 0.0) for s in states)):
        for spec in specs:
            arg_types.append(TensorType(elem, spec.shape))
            arg_names.append(prefix + spec.name)
            arg_attrs.append(_param_attrs(prefix + spec.name, spec, scale, bool(prefix)))
    block = Block(arg_types=arg_types)
    for arg, nm in zip(block.args, arg_names, strict=True):
        arg.name_hint = nm
    args: dict[str, SSAValue] = dict(zip(arg_names, block.args, strict=True))
    model = _Model(cfg, block, {s.name: args[s.name] for s in specs})
    loss = model.build(args["ids"], args["labels"])
    results = _emit_updates(cfg, model, specs, args, states)
    ret = func.ReturnOp(loss, *results)
    block.add_op(ret)
    fn = func.FuncOp(
        FUNC_NAME,
        (arg_types, [v.type for v in ret.arguments]),
        Region(block),
        arg_attrs=ArrayAttr(arg_attrs),
    )
    module = ModuleOp([fn])
    module.attributes[attrs.WORLD_SIZE] = IntegerAttr(cfg.world_size, i64)
    return module


def _emit_updates(
    cfg: GPT2MoEConfig,
    model: _Model,
    specs: list[ModelParam],
    args: dict[str, SSAValue],
    states: Sequence[str],
) -> list[SSAValue]:
    """One optimizer update per parameter; returns new params, then new moments."""
    b = model.b
    new_params: list[SSAValue] = []
    new_states: dict[str, list[SSAValue]] = {s: [] for s in states}
    for spec in specs:
        grad = model.grads[spec.name]
        if cfg.optimizer == "sgd":
            new_params.append(b.v("sgd_update", [args[spec.name], grad], name=spec.name + "_new",
                                  role=Role.UPDATE))  # fmt: skip
            continue
        inputs = [args[spec.name], grad, args["m_" + spec.name], args["v_" + spec.name]]
        w, m, v = b.op("adam_update", inputs, role=Role.UPDATE).results
        w.name_hint, m.name_hint, v.name_hint = (f"{x}{spec.name}_new" for x in ("", "m_", "v_"))
        new_params.append(w)
        new_states["m"].append(m)
        new_states["v"].append(v)
    return new_params + [v for s in states for v in new_states[s]]
