"""The `trace` dialect: GPU activities of an imported profiler trace (importers/traces).

```mlir
%t = trace.kernel %a, %b {name = "volta_sgemm_128x64_nn", lancet.time_us = 8.0 : f64, ...} : (!trace.token, !trace.token) -> !trace.token
%p = trace.payload %t : (!trace.token) -> tensor<24576xi8>
```

Every op is compute as far as the cost model goes (its `lancet.time_us` is the measured
duration); `trace.payload` turns dependency tokens into the tensor a `comm` collective takes,
and costs nothing. The SSA edges are the step's dependencies: stream order, event waits, host
syncs and, with an execution trace, tensor data dependencies.
"""

from __future__ import annotations

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Dialect, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    result_def,
    var_operand_def,
)


@irdl_attr_definition
class TokenType(ParametrizedAttribute, TypeAttribute):
    """`!trace.token`: "this op has finished"; carries no data."""

    name = "trace.token"


@irdl_op_definition
class KernelOp(IRDLOperation):
    """One GPU activity (kernel, memcpy, memset): waits for its operands, yields a token."""

    name = "trace.kernel"
    deps = var_operand_def(AnyAttr())
    done = result_def(TokenType)
    assembly_format = "($deps^)? attr-dict `:` functional-type($deps, $done)"


@irdl_op_definition
class PayloadOp(IRDLOperation):
    """The tensor a collective sends, available once its dependencies are done (no cost)."""

    name = "trace.payload"
    deps = var_operand_def(AnyAttr())
    data = result_def(TensorType)
    assembly_format = "($deps^)? attr-dict `:` functional-type($deps, $data)"


Trace = Dialect("trace", [KernelOp, PayloadOp], [TokenType])
