"""Stub registrations for the region-holding ops of JAX/XLA's `sdy`, `stablehlo` and `mhlo`.

lancet-mlir reads StableHLO in generic form with unregistered ops allowed. xDSL 0.74 makes an
unregistered op claim *every* trait (`UnregisteredOp.has_trait` returns True), including
`SymbolTable`. A `func.call` nested in such an op (JAX puts the whole shard_map body inside
`sdy.manual_computation`; while/case bodies call private functions) then resolves its callee
in the unregistered op's own region and fails to verify: "'@argmax' could not be found in
symbol table". Registering these ops as plain, trait-free operations fixes that; every other
op of these dialects (and every attribute and type, e.g. `#sdy.sharding<...>`,
`!stablehlo.future<...>`) still falls back to the unregistered form.

The stubs have no fields, verifier or custom syntax: they parse and print in generic form
exactly as unregistered ops do, and keep operands, results, properties, attributes and
regions as written.
"""

from __future__ import annotations

from xdsl.ir import Dialect, Operation, OpTraits

# Region-holding ops whose bodies may hold symbol users (calls) in JAX/XLA output.
_SDY_OPS = ("manual_computation", "named_computation")
_HLO_OPS = (
    "while",
    "if",
    "case",
    "async_start",
    "reduce",
    "reduce_window",
    "sort",
    "scatter",
    "select_and_scatter",
    "map",
    "all_reduce",
    "reduce_scatter",
)
_MHLO_ONLY_OPS = ("fusion",)


class StubOp(Operation):
    """Base of the stub ops: a generic operation that claims no trait."""

    traits = OpTraits(lambda: ())


def _stub(op_name: str) -> type[StubOp]:
    """A trait-free op class registered under `op_name` (generic syntax only)."""
    class_name = "Stub_" + op_name.replace(".", "_")
    doc = f"Stub of `{op_name}`: parsed and printed generically, claims no trait."
    return type(class_name, (StubOp,), {"name": op_name, "__doc__": doc})


def _dialect(name: str, ops: tuple[str, ...]) -> Dialect:
    return Dialect(name, [_stub(f"{name}.{op}") for op in ops], [])


Sdy = _dialect("sdy", _SDY_OPS)
StablehloStubs = _dialect("stablehlo", _HLO_OPS)
MhloStubs = _dialect("mhlo", _HLO_OPS + _MHLO_ONLY_OPS)

STUB_DIALECTS: tuple[Dialect, ...] = (Sdy, StablehloStubs, MhloStubs)
