"""Old home of the simulator, kept so `lancet_mlir.sim.timeline` imports keep working.

The simulator lives in `lancet_mlir.sim.model`, `.engine` and `.metrics`; import its public
names from `lancet_mlir.sim`.
"""

from lancet_mlir.sim import *  # noqa: F403 - the package's public names, one list (__all__)
from lancet_mlir.sim import __all__  # noqa: F401 - re-exported as this module's list
