"""The `aten` dialect: one generic compute op for a PyTorch ATen call the `comp` kernels lack.

The PyTorch importer (`lancet_mlir.importers.torch`) turns every FX node that is neither a
collective nor a match for a `comp` kernel into one `aten.op`:

```mlir
%y = "aten.op"(%x, %w) <{target = "aten.add.Tensor"}> {lancet.fx_node = "add_3",
    lancet.flops = 0.000000e+00 : f64, lancet.bytes = 1.228800e+04 : f64, lancet.role = "fwd"}
    : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
```

It is compute for every pass (not a collective); the roofline model costs it from its
`lancet.flops` / `lancet.bytes` like any other op, and `lancet.time_us` or a profile entry
override that as usual. Its operands are the FX node's inputs in order (tensors, and symbolic
integers as `tensor<i64>`), its results the node's tensor results; it has no reference
implementation, so `lancet-run` cannot execute it (the PyTorch graph is the executable form).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, prop_def, var_operand_def, var_result_def


@irdl_op_definition
class AtenOp(IRDLOperation):
    """One ATen call: `target` names the overload (`aten.mul.Tensor`)."""

    name = "aten.op"

    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    target = prop_def(StringAttr)

    def __init__(
        self,
        target: str,
        inputs: Sequence[SSAValue],
        result_types: Sequence[Attribute],
        attributes: Mapping[str, Attribute] | None = None,
    ):
        super().__init__(
            operands=[list(inputs)],
            result_types=[list(result_types)],
            properties={"target": StringAttr(target)},
            attributes=dict(attributes or {}),
        )


Aten = Dialect("aten", [AtenOp], [])
"""Generic ATen compute (PyTorch import)."""
