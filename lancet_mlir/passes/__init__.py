"""lancet-mlir passes: a lazy CLI-name -> pass-class table (as xDSL's `get_all_passes`).

Every pass is an ordinary xDSL `ModulePass`; import a class directly to embed it in another
pipeline, e.g. `from lancet_mlir.passes.data_parallel_schedule import DataParallelSchedulePass`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from xdsl.passes import ModulePass

# CLI name -> (module under lancet_mlir.passes, class name)
_PASSES: dict[str, tuple[str, str]] = {
    "data-parallel-schedule": ("data_parallel_schedule", "DataParallelSchedulePass"),
    "comm-bucket-fusion": ("comm_bucket_fusion", "CommBucketFusionPass"),
    "simulate": ("simulate", "SimulatePass"),
    "lancet-schedule": ("lancet_schedule", "LancetSchedulePass"),
    "dw-schedule": ("dw_schedule", "DwSchedulePass"),
    "fuse-noncritical-comm": ("fuse_noncritical_comm", "FuseNoncriticalCommPass"),
    "import-stablehlo": ("import_stablehlo", "ImportStablehloPass"),
    "program-order": ("program_order", "ProgramOrderPass"),
    "ddp-bucket-schedule": ("ddp_bucket_schedule", "DdpBucketSchedulePass"),
    "tutel-pipeline": ("tutel_pipeline", "TutelPipelinePass"),
    "moe-partition": ("moe_partition", "MoePartitionPass"),
    "delay-all-to-allv": ("delay_all_to_allv", "DelayAllToAllvPass"),
}


def _factory(module: str, cls: str) -> Callable[[], type[ModulePass]]:
    def load() -> type[ModulePass]:
        return getattr(importlib.import_module(f"lancet_mlir.passes.{module}"), cls)

    return load


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Return every lancet-mlir pass behind a factory that imports it on first use."""
    return {name: _factory(module, cls) for name, (module, cls) in _PASSES.items()}
