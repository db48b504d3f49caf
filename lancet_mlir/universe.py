"""`xdsl.universe` entry point: makes plain `xdsl-opt` see lancet-mlir's dialects and passes."""

from xdsl.universe import Universe

from lancet_mlir.dialects import get_all_dialects
from lancet_mlir.passes import get_all_passes

LANCET_UNIVERSE = Universe(all_dialects=get_all_dialects(), all_passes=get_all_passes())
