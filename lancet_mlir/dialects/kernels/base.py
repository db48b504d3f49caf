"""The kernel specification core: dtypes, tensor signatures, parameters, `Kernel`, registry.

A `Kernel` is declarative: its shape/dtype rule (`infer`), FLOP and byte counts (for the
roofline cost model), partition-axis rule (for the partitioners), default role and
documentation. Reference implementations are not part of the spec: they live in
`lancet_mlir.runtime.kernels`, written against an array namespace (`xp`: numpy or CuPy).

Conventions
-----------
* Data types are strings: `"f16"`, `"bf16"`, `"f32"`, `"f64"`, `"i32"`, `"i64"`, `"i1"`.
* The callables stored on a `Kernel` (`infer`, `flops`, `bytes_moved`, `partition`) accept
  partial parameter dicts: they validate the parameters and fill in defaults before calling
  the rule, and raise `KernelError` on bad parameters or shapes.
* FLOP counts: 2·M·N·K per matmul (times the batch), 2·E·C·M for MoE dispatch/combine (a
  gather/scatter that touches each element of the [E, C, M] buffer once per routed slot), and
  a small per-element constant for element-wise and normalisation kernels (see each entry).
  Data-movement kernels (reshape, transpose, split, concat, fill) count 0 FLOPs.
* Bytes moved default to the sum of the input and output sizes; gathers (embedding) count
  only the rows they read.

Partition-axis rules
--------------------
`Kernel.partition(in_sigs, out_sigs, params)` returns the list of allowed combinations
`(input_axes, output_axes)`, one axis entry per input and per output, where an entry is

* an `int` axis: the tensor is split into n contiguous chunks along that axis and part k
  uses / produces chunk k (equal chunks, or uneven ones of the same sizes on every tensor
  split along a dimension of that size);
* `None`: the tensor is not split: every part uses the whole tensor;
* `PARTIAL` (outputs only): every part produces a full-shape partial result and the op's
  output is the sum of the parts (e.g. a matmul split along its contraction dimension).

`Kernel.allowed_partitions` always lists the all-`None` combination (the op is not split)
first, drops combinations that split an axis of size < 2 and removes duplicates. A kernel
whose `partition` is `None` is never split. The partitioner picks the number of parts n so
that every part gets at least one row; where a combination splits dimensions of different
sizes (a reshape merging rows), n must divide them all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from lancet_mlir.dialects.dtypes import DTYPE_BYTES
from lancet_mlir.dialects.vocab import Role

DType = str
"""A data type name: "f16", "bf16", "f32", "f64", "i32", "i64" or "i1"."""

FLOAT_DTYPES: tuple[DType, ...] = ("f16", "bf16", "f32", "f64")
INT_DTYPES: tuple[DType, ...] = ("i32", "i64")
ALL_DTYPES: tuple[DType, ...] = (*FLOAT_DTYPES, *INT_DTYPES, "i1")

_DTYPE_BYTES: dict[DType, int] = {d: DTYPE_BYTES[d] for d in ALL_DTYPES}
"""Sizes of the registry's dtypes (the shared table, restricted to what kernels accept)."""

PARTIAL = "partial"
"""Partition marker for an output whose parts are full-shape partial sums."""

Axis = int | str | None
"""One entry of a partition combination: an axis, `None` (not split) or `PARTIAL`."""

PartitionCombo = tuple[tuple[Axis, ...], tuple[Axis, ...]]
"""(input axes, output axes) of one allowed way to split a kernel."""


class KernelError(ValueError):
    """A kernel was used with bad shapes, dtypes or parameters."""


def dtype_bytes(dtype: DType) -> int:
    """Size in bytes of one element of `dtype` (bf16/f16 2, f32/i32 4, f64/i64 8, i1 1)."""
    try:
        return _DTYPE_BYTES[dtype]
    except KeyError:
        raise KernelError(f"unknown dtype '{dtype}' (known: {', '.join(ALL_DTYPES)})") from None


def is_float(dtype: DType) -> bool:
    """True for floating-point dtypes."""
    return dtype in FLOAT_DTYPES


@dataclass(frozen=True)
class TensorSig:
    """Static shape and dtype of a tensor (rank 0 is a scalar tensor)."""

    shape: tuple[int, ...]
    dtype: DType

    def __post_init__(self) -> None:
        shape = tuple(int(d) for d in self.shape)
        if any(d < 0 for d in shape):
            raise KernelError(f"negative or dynamic dimension in shape {shape}")
        dtype_bytes(self.dtype)
        object.__setattr__(self, "shape", shape)

    @property
    def rank(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def numel(self) -> int:
        """Number of elements (1 for rank 0)."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.numel * dtype_bytes(self.dtype)

    def __str__(self) -> str:
        """MLIR spelling, e.g. `tensor<64x128xf32>` (error messages use it)."""
        return "tensor<" + "x".join([*(str(d) for d in self.shape), self.dtype]) + ">"


_REQUIRED: Any = type("_Required", (), {"__repr__": lambda self: "REQUIRED"})()

_PARAM_KINDS = (int, float, bool, tuple, str)


@dataclass(frozen=True)
class ParamSpec:
    """A static kernel parameter: its Python kind, default and (for strings) choices.

    `kind` is one of int, float, bool, tuple (a tuple of ints) and str. A parameter without
    a default is required.
    """

    kind: type
    default: Any = _REQUIRED
    choices: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in _PARAM_KINDS:
            raise KernelError(f"unsupported parameter kind {self.kind!r}")

    @property
    def required(self) -> bool:
        """True when the parameter has no default."""
        return self.default is _REQUIRED

    @staticmethod
    def of(value: ParamSpec | Any) -> ParamSpec:
        """A ParamSpec as given, or one inferred from a bare default value."""
        if isinstance(value, ParamSpec):
            return value
        kind = bool if isinstance(value, bool) else type(value)
        default: Any = value  # a bare default of any kind (not narrowed by the check above)
        return ParamSpec(kind, tuple(default) if kind is tuple else default)

    def check(self, name: str, value: Any) -> Any:
        """Return `value` normalised to this parameter's kind, or raise KernelError."""
        kind = self.kind
        ok: bool
        if kind is bool:
            ok = isinstance(value, bool | np.bool_)
        elif kind is int:
            ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
        elif kind is float:
            # ints are accepted for floats in Python; the dialect stores them as f64
            ok = isinstance(value, float | int | np.floating | np.integer) and not isinstance(
                value, bool
            )
        elif kind is tuple:
            ok = isinstance(value, tuple | list) and all(
                isinstance(v, int | np.integer) and not isinstance(v, bool) for v in value
            )
        else:
            ok = isinstance(value, str)
        if not ok:
            raise KernelError(f"parameter '{name}' expects {self.kind_name}, got {value!r}")
        given: Any = value  # checked above against `kind`
        normalised = tuple(int(v) for v in given) if kind is tuple else kind(given)
        if self.choices is not None and normalised not in self.choices:
            raise KernelError(
                f"parameter '{name}' must be one of {', '.join(self.choices)}, got '{value}'"
            )
        return normalised

    @property
    def kind_name(self) -> str:
        """Human-readable name of the kind, for error messages."""
        return {int: "an int", float: "a float", bool: "a bool", tuple: "a tuple of ints"}.get(
            self.kind, "a string"
        )


Sigs = Sequence[TensorSig]
Params = Mapping[str, Any]
InferFn = Callable[[Sigs, Params], list[TensorSig]]
CostFn = Callable[[Sigs, Sigs, Params], float]
PartitionFn = Callable[[Sigs, Sigs, Params], list[PartitionCombo]]


def default_bytes(ins: Sigs, outs: Sigs, params: Params) -> float:
    """Default byte count: every input is read once and every output written once."""
    return float(sum(s.nbytes for s in ins) + sum(s.nbytes for s in outs))


class _Resolving:
    """Wraps a kernel rule so it validates parameters and fills defaults before running.

    The wrapped rule always takes the parameter mapping as its last positional argument;
    callers may omit it (meaning "all defaults") or pass a partial mapping.
    """

    def __init__(self, kernel: Kernel, fn: Callable[..., Any], arity: int, what: str):
        self.kernel = kernel
        self.raw = getattr(fn, "raw", fn)  # never wrap twice (dataclasses.replace)
        self.arity = arity
        self.what = what

    def __call__(self, *args: Any) -> Any:
        if len(args) == self.arity - 1:
            args = (*args, {})
        if len(args) != self.arity:
            raise TypeError(f"{self.kernel.name}.{self.what} takes {self.arity} arguments")
        *front, params = args
        resolved = self.kernel.resolve_params(params)
        if self.what == "infer":
            self.kernel.check_num_inputs(len(front[0]))
        return self.raw(*front, resolved)


@dataclass(frozen=True, kw_only=True, eq=False)
class Kernel:
    """One compute kernel: shape rule, costs and partition rule (its reference implementation
    is `lancet_mlir.runtime.kernels.run_kernel`).

    Attributes:
        name: kernel name; the dialect op is `comp.<name>`.
        num_inputs: number of tensor inputs, or None when variadic.
        input_names: the name of each input of a fixed-arity kernel: its op class's
            operand accessors (`op.dy`). Empty: variadic (or unnamed) inputs, `op.inputs`.
        params: allowed static parameters, as ParamSpecs or bare defaults.
        infer: (input sigs, params) -> output sigs; raises KernelError on bad input.
        flops: (input sigs, output sigs, params) -> floating-point operation count.
        bytes_moved: (input sigs, output sigs, params) -> bytes read + written.
        partition: (input sigs, output sigs, params) -> allowed PartitionCombos, or None
            when the kernel is never split (see the module docstring).
        role: default `lancet.role` (a `Role`: fwd, dx, dw, update) when meaningful. `_dw`
            names the gradient of a kernel's second (weight-like) operand; a generator
            whose operand is an activation (attention) sets `lancet.role` on the op.
        doc: one-line description of inputs, outputs and semantics.
    """

    name: str
    num_inputs: int | None
    input_names: tuple[str, ...] = ()
    params: Mapping[str, ParamSpec | Any]
    infer: InferFn
    flops: CostFn
    bytes_moved: CostFn = default_bytes
    partition: PartitionFn | None = None
    role: Role | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or not self.name.islower():
            raise KernelError(f"kernel name '{self.name}' must be a lower-case identifier")
        specs = {k: ParamSpec.of(v) for k, v in self.params.items()}
        names = self.input_names
        if names and len(names) != (self.num_inputs or 0):
            raise KernelError(
                f"kernel '{self.name}' names {len(names)} inputs, takes {self.num_inputs}"
            )
        clash = [n for n in names if not n.isidentifier() or n in specs or names.count(n) > 1]
        if clash:
            raise KernelError(f"kernel '{self.name}': bad or clashing input name '{clash[0]}'")
        object.__setattr__(self, "params", MappingProxyType(specs))
        for field_name, arity in (("infer", 2), ("flops", 3), ("bytes_moved", 3)):
            fn = getattr(self, field_name)
            object.__setattr__(self, field_name, _Resolving(self, fn, arity, field_name))
        if self.partition is not None:
            object.__setattr__(self, "partition", _Resolving(self, self.partition, 3, "partition"))

    @property
    def op_name(self) -> str:
        """The dialect operation name, `comp.<name>`."""
        return f"comp.{self.name}"

    def check_num_inputs(self, n: int) -> None:
        """Raise KernelError unless `n` inputs is a valid count for this kernel."""
        if self.num_inputs is not None and n != self.num_inputs:
            raise KernelError(f"expected {self.num_inputs} inputs, got {n}")
        if self.num_inputs is None and n < 1:
            raise KernelError("expected at least one input")

    def resolve_params(self, given: Params | None) -> dict[str, Any]:
        """Validate `given` against the parameter specs and fill in defaults."""
        given = dict(given or {})
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            allowed = ", ".join(self.params) or "none"
            raise KernelError(f"unknown parameter '{unknown[0]}' (allowed: {allowed})")
        resolved: dict[str, Any] = {}
        for pname, spec in self.params.items():
            if pname in given:
                resolved[pname] = spec.check(pname, given[pname])
            elif spec.required:
                raise KernelError(f"missing required parameter '{pname}'")
            else:
                resolved[pname] = spec.default
        return resolved

    def cost(self, ins: Sigs, outs: Sigs, params: Params | None = None) -> tuple[float, float]:
        """(FLOPs, bytes moved) of one execution."""
        p = params or {}
        return float(self.flops(ins, outs, p)), float(self.bytes_moved(ins, outs, p))

    def allowed_partitions(
        self, ins: Sigs, outs: Sigs, params: Params | None = None
    ) -> list[PartitionCombo]:
        """All allowed partition combinations, the unsplit one first (see module doc)."""
        unsplit: PartitionCombo = ((None,) * len(ins), (None,) * len(outs))
        combos = [unsplit]
        if self.partition is not None:
            combos += self.partition(ins, outs, params or {})
        result: list[PartitionCombo] = []
        for combo in combos:
            if combo not in result and _splits_only_big_axes(combo, ins, outs):
                result.append(combo)
        return result


def _splits_only_big_axes(combo: PartitionCombo, ins: Sigs, outs: Sigs) -> bool:
    """False when the combination splits a dimension of size < 2 (nothing to split)."""
    in_axes, out_axes = combo
    for axes, sigs in ((in_axes, ins), (out_axes, outs)):
        for axis, sig in zip(axes, sigs, strict=True):
            if isinstance(axis, int) and sig.shape[axis] < 2:
                return False
    return True


KERNELS: dict[str, Kernel] = {}
"""All registered kernels by name, in registration order."""


def register(kernel: Kernel) -> Kernel:
    """Add `kernel` to KERNELS (the kernel family modules of this package call it)."""
    if kernel.name in KERNELS:
        raise KernelError(f"kernel '{kernel.name}' is already registered")
    KERNELS[kernel.name] = kernel
    return kernel


def get_kernel(name: str) -> Kernel:
    """The registered kernel `name`; KeyError naming the known kernels otherwise."""
    try:
        return KERNELS[name]
    except KeyError:
        raise KeyError(
            f"unknown kernel '{name}' (known kernels: {', '.join(sorted(KERNELS))})"
        ) from None


# ---------------------------------------------------------------------------------------
# Shared checks
