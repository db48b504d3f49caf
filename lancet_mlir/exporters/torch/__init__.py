"""PyTorch export: optimized IR of an imported FX graph -> a new FX `GraphModule`.

* `export_graph(gm, module)`: the ops of the optimized `@train_step` name their FX nodes
  (`lancet.fx_node`); the new graph copies the nodes in the block's order. A collective is
  issued at its op's position and its `wait_tensor` sits just before the first node that
  reads it (a node no scheduled op stands for, `getitem` or a wait, is placed just before
  its first user); a fused collective becomes the `_coalesced` functional op (all-reduce,
  all-gather, reduce-scatter) or flatten + cat + one all-to-all + split. Placeholders keep
  their order, the output node its arguments: same signature, same outputs.
* `make_backend(optimize)`: a `torch.compile` backend (through `aot_autograd`) that hands
  each graph to `optimize` and runs the result.
"""

from lancet_mlir.exporters.torch.backend import make_backend
from lancet_mlir.exporters.torch.order import ExportError, export_graph, scheduled_nodes

__all__ = ["ExportError", "export_graph", "make_backend", "scheduled_nodes"]
