"""The compute-kernel registry: one declarative entry per kernel of the `comp` dialect.

Every kernel is specified in exactly one place, a `register(Kernel(...))` call in the module
of its family, giving its shape/dtype rule, FLOP and byte counts (roofline cost model),
partition-axis rule (partitioners), default role and documentation:

| module | kernels |
|---|---|
| `linalg` | matmul, batch_matmul and their `_dx` / `_dw` forms |
| `elementwise` | add, sub, mul, bias_add, scale |
| `norm` | layer_norm (+ `_dx`, `_dw`), softmax (+ `_dx`) |
| `activation` | gelu, gelu_dx |
| `embedding` | embedding, embedding_dw |
| `shape` | reshape, transpose, split, concat, reduce_sum |
| `loss` | cross_entropy, cross_entropy_dx |
| `moe` | moe_gate (+ `_dx`), moe_gate_window (+ `_dx`: one token part), moe_dispatch, moe_combine and their gradients |
| `optim` | sgd_update, adam_update |
| `fill` | fill, zeros |

`base` holds the core types (`Kernel`, `TensorSig`, `ParamSpec`, dtypes, `PARTIAL`) and the
registry (`KERNELS`, `register`, `get_kernel`); `rules` the checks and partition helpers the
families share. The reference implementations (numpy or CuPy, through an array-namespace
argument) are in `lancet_mlir.runtime.kernels`; the op classes (`comp.MatmulOp`, ...) in
`lancet_mlir.dialects.comp_ops`, generated from this registry. This package is pure Python:
it never imports xDSL.
"""

from lancet_mlir.dialects.kernels.base import (
    ALL_DTYPES,
    FLOAT_DTYPES,
    INT_DTYPES,
    KERNELS,
    PARTIAL,
    Axis,
    DType,
    Kernel,
    KernelError,
    ParamSpec,
    PartitionCombo,
    TensorSig,
    default_bytes,
    dtype_bytes,
    get_kernel,
    is_float,
    register,
)

__all__ = [
    "ALL_DTYPES",
    "FLOAT_DTYPES",
    "INT_DTYPES",
    "KERNELS",
    "PARTIAL",
    "Axis",
    "DType",
    "Kernel",
    "KernelError",
    "ParamSpec",
    "PartitionCombo",
    "TensorSig",
    "default_bytes",
    "dtype_bytes",
    "get_kernel",
    "is_float",
    "register",
]

# The family modules register their kernels on import; the import order is the registration
# order, hence the order of KERNELS and of the comp ops (kept by hand, not sorted).
# isort: off
from lancet_mlir.dialects.kernels import linalg  # noqa: E402, F401
from lancet_mlir.dialects.kernels import elementwise  # noqa: E402, F401
from lancet_mlir.dialects.kernels import norm  # noqa: E402, F401
from lancet_mlir.dialects.kernels import activation  # noqa: E402, F401
from lancet_mlir.dialects.kernels import embedding  # noqa: E402, F401
from lancet_mlir.dialects.kernels import shape  # noqa: E402, F401
from lancet_mlir.dialects.kernels import loss  # noqa: E402, F401
from lancet_mlir.dialects.kernels import moe  # noqa: E402, F401
from lancet_mlir.dialects.kernels import optim  # noqa: E402, F401
from lancet_mlir.dialects.kernels import fill  # noqa: E402, F401
# isort: on
