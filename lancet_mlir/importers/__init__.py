"""Importers: turn modules written by other frameworks into lancet-mlir IR.

`stablehlo/` converts JAX/XLA StableHLO (and MHLO) collectives into `comm` ops and annotates
compute costs; the `import-stablehlo` pass is its thin wrapper.
"""
