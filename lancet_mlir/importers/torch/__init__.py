"""PyTorch import: an FX `GraphModule` of ATen ops (one whole training step) -> lancet-mlir IR.

Sources: `make_fx` of a training step (forward, `torch.autograd.grad`, functional
collectives, optimizer update) under a fake process group (`capture`), or the one graph
`torch.compile(backend=aot_autograd(...))` hands a backend with
`torch._dynamo.config.trace_autograd_ops=True`.

* Each `_c10d_functional` collective becomes a `comm` op (`collectives`): its group from the
  group name (`group_ranks`, else the live process group's size, else the world), its types
  from `meta['val']`; `wait_tensor` is folded into the op. Static unequal all-to-all splits
  become `comm.all_to_allv`; data-dependent ones (a dropless MoE) their upper bound, with a
  note (and one error line when the shape environment proves none).
* Every other node becomes a compute op carrying `lancet.fx_node` (the node's name),
  `lancet.flops` (`torch.utils.flop_counter`'s registry: the sum equals `FlopCounterMode`'s
  total), `lancet.bytes` (input + output bytes from the meta shapes, views 0) and
  `lancet.role` (`roles`: fwd, dx, dw, update, seeded at the loss gradient). Matches of a
  `comp` kernel (mm, bmm, softmax, its gradient, tanh-GELU: `kernels`) become that kernel;
  the rest one generic `aten.op`.
* `getitem` picks a result; symbolic integers are `tensor<i64>` values, so every FX
  dependency is an SSA edge. The function is `@train_step`, its arguments the placeholders
  in order, its results the outputs in order; the module carries `lancet.world_size`.
"""

from lancet_mlir.importers.torch.capture import capture
from lancet_mlir.importers.torch.collectives import BOUND, FX_NODE, is_collective, is_wait
from lancet_mlir.importers.torch.importer import FUNC_NAME, ImportedGraph, import_fx, result_indices

__all__ = [
    "BOUND",
    "FUNC_NAME",
    "FX_NODE",
    "ImportedGraph",
    "capture",
    "import_fx",
    "is_collective",
    "is_wait",
    "result_indices",
]
