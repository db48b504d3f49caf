"""Training-graph generators: one training iteration of a model, per rank, as IR.

`lancet_mlir.models.gpt2_moe`: `GPT2MoEConfig`, `build_gpt2_moe(cfg) -> ModuleOp`, `PRESETS`
(Lancet's GPT-2 MoE paper configurations). Command line: `lancet-model`.
"""
