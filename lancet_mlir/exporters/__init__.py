"""Exporters: turn optimized lancet-mlir IR back into other frameworks' programs.

`torch/` rebuilds a PyTorch FX `GraphModule` in the optimized order (collectives issued where
the schedule puts them, waits just before their first consumer, fused collectives as
coalesced ops) and provides the `torch.compile` backend.
"""
