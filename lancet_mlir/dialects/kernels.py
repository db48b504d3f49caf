"""The compute-kernel registry: one entry per kernel of the `comp` dialect.

Every kernel is described in exactly one place, a `register(Kernel(...))` call below, that
gives its shape/dtype rule (`infer`), FLOP and byte counts (for the roofline cost model), a
numpy reference implementation (for `lancet-run`) and its partition-axis rule (for the MoE
partitioner). The `comp` dialect generates one operation class per entry, so adding a kernel
here adds the op `comp.<name>` too. This module is pure Python + numpy: it never imports xDSL.

Conventions
-----------
* Data types are strings: `"f16"`, `"bf16"`, `"f32"`, `"f64"`, `"i32"`, `"i64"`, `"i1"`.
  numpy has no bfloat16, so bf16 kernels compute in float32 (`numpy_dtype("bf16")`); every
  other dtype computes in its own numpy type.
* The callables stored on a `Kernel` (`infer`, `flops`, `bytes_moved`, `numpy`, `partition`)
  accept partial parameter dicts: they validate the parameters and fill in defaults before
  calling the rule, and raise `KernelError` on bad parameters or shapes.
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

* an `int` axis: the tensor is split into n equal contiguous chunks along that axis and
  part k uses / produces chunk k;
* `None`: the tensor is not split: every part uses the whole tensor;
* `PARTIAL` (outputs only): every part produces a full-shape partial result and the op's
  output is the sum of the parts (e.g. a matmul split along its contraction dimension).

`Kernel.allowed_partitions` always lists the all-`None` combination (the op is not split)
first, drops combinations that split an axis of size < 2 and removes duplicates. A kernel
whose `partition` is `None` is never split. The partitioner picks the number of parts n so
that it divides every split dimension.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

DType = str
"""A data type name: "f16", "bf16", "f32", "f64", "i32", "i64" or "i1"."""

FLOAT_DTYPES: tuple[DType, ...] = ("f16", "bf16", "f32", "f64")
INT_DTYPES: tuple[DType, ...] = ("i32", "i64")
ALL_DTYPES: tuple[DType, ...] = (*FLOAT_DTYPES, *INT_DTYPES, "i1")

_DTYPE_BYTES: dict[DType, int] = {
    "f16": 2,
    "bf16": 2,
    "f32": 4,
    "f64": 8,
    "i32": 4,
    "i64": 8,
    "i1": 1,
}

# bf16 has no numpy type: compute it in float32 (documented in the module docstring).
_NUMPY_DTYPES: dict[DType, type] = {
    "f16": np.float16,
    "bf16": np.float32,
    "f32": np.float32,
    "f64": np.float64,
    "i32": np.int32,
    "i64": np.int64,
    "i1": np.bool_,
}

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


def numpy_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype a kernel of `dtype` computes in (bf16 computes in float32)."""
    dtype_bytes(dtype)  # validates the name
    return np.dtype(_NUMPY_DTYPES[dtype])


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
        return ParamSpec(kind, tuple(value) if kind is tuple else value)  # pyright: ignore[reportArgumentType] - kind says tuple

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
        normalised = tuple(int(v) for v in value) if kind is tuple else kind(value)  # pyright: ignore[reportGeneralTypeIssues, reportArgumentType] - checked just above
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
NumpyFn = Callable[[list[np.ndarray], Params], list[np.ndarray]]
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
        if self.what in ("infer", "numpy"):
            self.kernel.check_num_inputs(len(front[0]))
        return self.raw(*front, resolved)


@dataclass(frozen=True, kw_only=True, eq=False)
class Kernel:
    """One compute kernel: shape rule, costs, numpy reference and partition rule.

    Attributes:
        name: kernel name; the dialect op is `comp.<name>`.
        num_inputs: number of tensor inputs, or None when variadic.
        params: allowed static parameters, as ParamSpecs or bare defaults.
        infer: (input sigs, params) -> output sigs; raises KernelError on bad input.
        flops: (input sigs, output sigs, params) -> floating-point operation count.
        numpy: (input arrays, params) -> output arrays, computed in the op's dtype.
        bytes_moved: (input sigs, output sigs, params) -> bytes read + written.
        partition: (input sigs, output sigs, params) -> allowed PartitionCombos, or None
            when the kernel is never split (see the module docstring).
        role: default `lancet.role` ("fwd", "dx", "dw", "update") when meaningful. `_dw`
            names the gradient of a kernel's second (weight-like) operand; a generator
            whose operand is an activation (attention) sets `lancet.role` on the op.
        doc: one-line description of inputs, outputs and semantics.
    """

    name: str
    num_inputs: int | None
    params: Mapping[str, ParamSpec | Any]
    infer: InferFn
    flops: CostFn
    numpy: NumpyFn
    bytes_moved: CostFn = default_bytes
    partition: PartitionFn | None = None
    role: str | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or not self.name.islower():
            raise KernelError(f"kernel name '{self.name}' must be a lower-case identifier")
        specs = {k: ParamSpec.of(v) for k, v in self.params.items()}
        object.__setattr__(self, "params", MappingProxyType(specs))
        for field_name, arity in (("infer", 2), ("flops", 3), ("numpy", 2), ("bytes_moved", 3)):
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
    """Add `kernel` to KERNELS (register before importing the `comp` dialect)."""
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
# ---------------------------------------------------------------------------------------

_ORDINALS = ("first", "second", "third", "fourth", "fifth")


def _nth(i: int) -> str:
    return _ORDINALS[i] if i < len(_ORDINALS) else f"#{i}"


def _expect_rank(sig: TensorSig, rank: int, what: str) -> None:
    if sig.rank != rank:
        raise KernelError(f"{what} must have rank {rank}, got {sig}")


def _expect_min_rank(sig: TensorSig, rank: int, what: str) -> None:
    if sig.rank < rank:
        raise KernelError(f"{what} must have rank >= {rank}, got {sig}")


def _expect_float(sig: TensorSig, what: str) -> None:
    if not is_float(sig.dtype):
        raise KernelError(f"{what} must have a float dtype, got {sig.dtype}")


def _expect_int(sig: TensorSig, what: str) -> None:
    if sig.dtype not in INT_DTYPES:
        raise KernelError(f"{what} must have dtype i32 or i64, got {sig.dtype}")


def _same_dtype(sigs: Sigs) -> DType:
    for s in sigs[1:]:
        if s.dtype != sigs[0].dtype:
            raise KernelError(f"dtype mismatch: {sigs[0].dtype} vs {s.dtype}")
    return sigs[0].dtype


def _same_shape(sigs: Sigs, names: Sequence[str]) -> None:
    for s, n in zip(sigs[1:], names[1:], strict=True):
        if s.shape != sigs[0].shape:
            raise KernelError(f"{n} shape {s} differs from {names[0]} shape {sigs[0]}")


def _norm_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise KernelError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def _per_element(k: float, of_output: int = 0) -> CostFn:
    """FLOP rule: `k` operations per element of output `of_output`."""

    def flops(ins: Sigs, outs: Sigs, params: Params) -> float:
        return k * outs[of_output].numel

    return flops


def _zero_flops(ins: Sigs, outs: Sigs, params: Params) -> float:
    return 0.0


def _contig(a: np.ndarray | np.generic, dtype: np.dtype | None = None) -> np.ndarray:
    """`a` as a C-contiguous array (np.ascontiguousarray would turn rank 0 into rank 1)."""
    out = np.asarray(a, dtype=dtype)
    return out if out.flags.c_contiguous else out.copy(order="C")


def _cast(arrays: Sequence[np.ndarray], dtype: DType) -> list[np.ndarray]:
    """Outputs as contiguous arrays of the op's numpy dtype."""
    nd = numpy_dtype(dtype)
    return [_contig(a, nd) for a in arrays]


def _arr(a: np.ndarray, dtype: DType) -> np.ndarray:
    """Input converted (if needed) to the numpy dtype the kernel computes in."""
    return np.asarray(a, dtype=numpy_dtype(dtype))


def _dtype_of(a: np.ndarray) -> DType:
    """The registry dtype that a numpy input array represents (its compute dtype)."""
    for name in ("f16", "f32", "f64", "i32", "i64", "i1"):
        if a.dtype == _NUMPY_DTYPES[name]:
            return name
    raise KernelError(f"unsupported numpy dtype {a.dtype}")


# ---------------------------------------------------------------------------------------
# Partition helpers
# ---------------------------------------------------------------------------------------


def _elementwise_partition(
    ins: Sigs, outs: Sigs, exclude: Sequence[int] = ()
) -> list[PartitionCombo]:
    """Split every output along the same axis i; broadcast inputs align from the right.

    An input whose dimension aligned with i is missing or of size 1 (broadcast) is not split.
    Output axes in `exclude` (normalised) are never split.
    """
    out = outs[0]
    combos: list[PartitionCombo] = []
    for i in range(out.rank):
        if i in exclude:
            continue
        in_axes: list[Axis] = []
        for s in ins:
            j = i - (out.rank - s.rank)
            in_axes.append(j if j >= 0 and s.shape[j] == out.shape[i] else None)
        combos.append((tuple(in_axes), (i,) * len(outs)))
    return combos


def _elementwise_rule(ins: Sigs, outs: Sigs, params: Mapping[str, Any]) -> list[PartitionCombo]:
    """Partition rule of the parameter-free elementwise kernels (see _elementwise_partition)."""
    return _elementwise_partition(ins, outs)


def _einsum_partition(spec: str, ins: Sigs) -> list[PartitionCombo]:
    """Partition rule of a contraction `spec` such as "mk,kn->mn" (linear in each input).

    Splitting one index letter splits every input holding it; the output is split along
    that letter, or is a PARTIAL sum when the letter is contracted away.
    """
    in_specs, out_spec = _parse_spec(spec)
    letters = dict.fromkeys(c for s in (*in_specs, out_spec) for c in s)
    combos: list[PartitionCombo] = []
    for c in letters:
        in_axes = tuple(s.index(c) if c in s else None for s in in_specs)
        out_axis: Axis = out_spec.index(c) if c in out_spec else PARTIAL
        combos.append((in_axes, (out_axis,)))
    return combos


# ---------------------------------------------------------------------------------------
# Contractions (matmul family, MoE dispatch/combine)
# ---------------------------------------------------------------------------------------

_DIM_LABELS = {
    "b": "batch",
    "m": "row",
    "n": "column",
    "k": "contraction",
    "s": "token",
    "e": "expert",
    "c": "capacity",
    "h": "hidden",
}


def _parse_spec(spec: str) -> tuple[list[str], str]:
    lhs, out = spec.split("->")
    return lhs.split(","), out


def _contract_infer(spec: str, ins: Sigs, names: Sequence[str]) -> TensorSig:
    """Shape rule of a contraction: ranks match the spec and shared letters agree."""
    in_specs, out_spec = _parse_spec(spec)
    sizes: dict[str, int] = {}
    for sig, letters, name in zip(ins, in_specs, names, strict=True):
        _expect_rank(sig, len(letters), name)
        _expect_float(sig, name)
        for letter, dim in zip(letters, sig.shape, strict=True):
            if sizes.setdefault(letter, dim) != dim:
                label = _DIM_LABELS.get(letter, letter)
                raise KernelError(f"{label} dims differ: {sizes[letter]} vs {dim}")
    return TensorSig(tuple(sizes[c] for c in out_spec), ins[0].dtype)


def _contract_sizes(spec: str, ins: Sigs) -> dict[str, int]:
    in_specs, _ = _parse_spec(spec)
    return {
        c: d
        for sig, s in zip(ins, in_specs, strict=True)
        for c, d in zip(s, sig.shape, strict=True)
    }


def _contract_numpy(spec: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Two-operand contraction through np.matmul (BLAS), deterministic for fixed inputs.

    Letters in both inputs and the output are batch dims, in both inputs only are
    contracted; the rest are free dims of one input.
    """
    (lx, ly), out = _parse_spec(spec)
    size = {c: d for s, a in ((lx, x), (ly, y)) for c, d in zip(s, a.shape, strict=True)}
    batch = [c for c in out if c in lx and c in ly]
    red = [c for c in lx if c in ly and c not in out]
    fx = [c for c in lx if c not in ly]
    fy = [c for c in ly if c not in lx]
    bs = [size[c] for c in batch]

    def prep(
        a: np.ndarray, s: str, order: list[str], rows: list[str], cols: list[str]
    ) -> np.ndarray:
        t = np.transpose(a, [s.index(c) for c in order])
        return t.reshape([*bs, math.prod(size[c] for c in rows), math.prod(size[c] for c in cols)])

    xm = prep(x, lx, batch + fx + red, fx, red)
    ym = prep(y, ly, batch + red + fy, red, fy)
    r = np.matmul(xm, ym).reshape([*bs, *(size[c] for c in fx + fy)])
    order = batch + fx + fy
    return np.transpose(r, [order.index(c) for c in out])


def _matmul_spec(kind: str, batch: bool, ta: bool, tb: bool) -> str:
    """Contraction spec of a matmul-family kernel for the forward op's transposes.

    kind "fwd": y = op(a)·op(b); "dx": d a from (dy, b); "dw": d b from (a, dy), where the
    gradients are laid out like the forward operands (so transposes are undone).
    """
    a = "km" if ta else "mk"
    b = "nk" if tb else "kn"
    y = "mn"
    ins, out = {"fwd": ((a, b), y), "dx": ((y, b), a), "dw": ((a, y), b)}[kind]
    p = "b" if batch else ""
    return ",".join(p + s for s in ins) + "->" + p + out


_MATMUL_NAMES = {"fwd": ("lhs", "rhs"), "dx": ("dy", "rhs"), "dw": ("lhs", "dy")}
_MATMUL_DOCS = {
    "fwd": "(a, b) -> a·b, with a/b transposed when transpose_a/transpose_b",
    "dx": "(dy, b) -> d a = dy·op(b)ᵀ, laid out like the forward a (params = forward's)",
    "dw": "(a, dy) -> d b = op(a)ᵀ·dy, laid out like the forward b (params = forward's)",
}
_MATMUL_ROLES = {"fwd": "fwd", "dx": "dx", "dw": "dw"}


def _make_matmul(kind: str, batch: bool) -> Kernel:
    """A matmul-family kernel (matmul, batch_matmul and their _dx/_dw forms)."""

    def spec(params: Params) -> str:
        return _matmul_spec(kind, batch, params["transpose_a"], params["transpose_b"])

    def infer(ins: Sigs, params: Params) -> list[TensorSig]:
        out = _contract_infer(spec(params), ins, _MATMUL_NAMES[kind])
        _same_dtype(ins)
        return [out]

    def flops(ins: Sigs, outs: Sigs, params: Params) -> float:
        return 2.0 * math.prod(_contract_sizes(spec(params), ins).values())

    def run(xs: list[np.ndarray], params: Params) -> list[np.ndarray]:
        return [_contract_numpy(spec(params), xs[0], xs[1])]

    def partition(ins: Sigs, outs: Sigs, params: Params) -> list[PartitionCombo]:
        return _einsum_partition(spec(params), ins)

    name = ("batch_matmul" if batch else "matmul") + ("" if kind == "fwd" else f"_{kind}")
    shape = "[B,M,K]x[B,K,N]->[B,M,N]" if batch else "[M,K]x[K,N]->[M,N]"
    return Kernel(
        name=name,
        num_inputs=2,
        params={"transpose_a": False, "transpose_b": False},
        infer=infer,
        flops=flops,
        numpy=run,
        partition=partition,
        role=_MATMUL_ROLES[kind],
        doc=f"{_MATMUL_DOCS[kind]}; forward {shape}",
    )


for _batch in (False, True):
    for _kind in ("fwd", "dx", "dw"):
        register(_make_matmul(_kind, _batch))


# ---------------------------------------------------------------------------------------
# Element-wise arithmetic
# ---------------------------------------------------------------------------------------


def _broadcast_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    dtype = _same_dtype(ins)
    try:
        shape = np.broadcast_shapes(*(s.shape for s in ins))
    except ValueError:
        raise KernelError(
            f"shapes {' and '.join(str(s) for s in ins)} are not broadcast-compatible"
        ) from None
    return [TensorSig(tuple(shape), dtype)]


def _binary(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], doc: str) -> Kernel:
    def run(xs: list[np.ndarray], params: Params) -> list[np.ndarray]:
        dtype = _dtype_of(xs[0])
        return _cast([fn(_arr(xs[0], dtype), _arr(xs[1], dtype))], dtype)

    return Kernel(
        name=name,
        num_inputs=2,
        params={},
        infer=_broadcast_infer,
        flops=_per_element(1),
        numpy=run,
        partition=_elementwise_rule,
        doc=doc,
    )


register(_binary("add", np.add, "(a, b) -> a + b with numpy broadcasting"))
register(_binary("sub", np.subtract, "(a, b) -> a - b with numpy broadcasting"))
register(_binary("mul", np.multiply, "(a, b) -> a * b with numpy broadcasting"))


def _bias_add_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    x, b = ins
    _expect_min_rank(x, 1, "input")
    _expect_rank(b, 1, "bias")
    _same_dtype(ins)
    if b.shape[0] != x.shape[-1]:
        raise KernelError(f"bias size {b.shape[0]} differs from last input dim {x.shape[-1]}")
    return [x]


def _bias_add_partition(ins: Sigs, outs: Sigs, params: Params) -> list[PartitionCombo]:
    rank = ins[0].rank
    combos: list[PartitionCombo] = [((i, None), (i,)) for i in range(rank - 1)]
    combos.append(((rank - 1, 0), (rank - 1,)))
    return combos


register(
    Kernel(
        name="bias_add",
        num_inputs=2,
        params={},
        infer=_bias_add_infer,
        flops=_per_element(1),
        numpy=lambda xs, p: _cast([xs[0] + xs[1]], _dtype_of(xs[0])),
        partition=_bias_add_partition,
        role="fwd",
        doc="(x [..., N], bias [N]) -> x + bias",
    )
)


def _unary_same_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    _expect_float(ins[0], "input")
    return [ins[0]]


register(
    Kernel(
        name="scale",
        num_inputs=1,
        params={"alpha": 1.0},
        infer=_unary_same_infer,
        flops=_per_element(1),
        numpy=lambda xs, p: _cast([xs[0] * xs[0].dtype.type(p["alpha"])], _dtype_of(xs[0])),
        partition=_elementwise_rule,
        doc="(x) -> alpha * x (e.g. gradient averaging, attention scaling)",
    )
)


# ---------------------------------------------------------------------------------------
# Normalisation and activations
# ---------------------------------------------------------------------------------------


def _check_norm_params(x: TensorSig, gammas: Sigs, names: Sequence[str]) -> None:
    _expect_min_rank(x, 1, "input")
    _expect_float(x, "input")
    for g, n in zip(gammas, names, strict=True):
        _expect_rank(g, 1, n)
        if g.shape[0] != x.shape[-1]:
            raise KernelError(f"{n} size {g.shape[0]} differs from last input dim {x.shape[-1]}")
    _same_dtype([x, *gammas])


def _layer_norm_stats(x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(x - mean, 1/sqrt(var + eps)) over the last axis, in x's dtype."""
    xc = x - x.mean(axis=-1, keepdims=True)
    var = (xc * xc).mean(axis=-1, keepdims=True)
    rstd = 1 / np.sqrt(var + x.dtype.type(eps))
    return xc, rstd


def _rows_partition(
    nrows: int, n_ins: int, whole: Sequence[int], outs: Sequence[Axis] | None
) -> list[PartitionCombo]:
    """Combos splitting leading axis i (< nrows) of every input not in `whole`; the outputs
    are split along i too, or take the fixed axes `outs` (e.g. PARTIAL for reductions)."""
    combos: list[PartitionCombo] = []
    for i in range(nrows):
        in_axes = tuple(None if j in whole else i for j in range(n_ins))
        combos.append((in_axes, tuple(outs) if outs is not None else (i,)))
    return combos


def _layer_norm_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    _check_norm_params(ins[0], ins[1:], ("gamma", "beta"))
    return [ins[0]]


def _layer_norm_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    x, gamma, beta = xs
    xc, rstd = _layer_norm_stats(x, p["eps"])
    return _cast([xc * rstd * gamma + beta], _dtype_of(x))


register(
    Kernel(
        name="layer_norm",
        num_inputs=3,
        params={"eps": 1e-5},
        infer=_layer_norm_infer,
        flops=_per_element(8),  # mean, centre, square, var, rsqrt-mul, scale, shift
        numpy=_layer_norm_numpy,
        partition=lambda ins, outs, p: _rows_partition(ins[0].rank - 1, 3, (1, 2), None),
        role="fwd",
        doc="(x [..., M], gamma [M], beta [M]) -> normalise x over its last axis",
    )
)


def _layer_norm_dx_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    dy, x, gamma = ins
    _check_norm_params(x, [gamma], ("gamma",))
    _same_shape([x, dy], ("x", "dy"))
    _same_dtype([x, dy])
    return [x]


def _layer_norm_dx_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    dy, x, gamma = xs
    xc, rstd = _layer_norm_stats(x, p["eps"])
    xhat = xc * rstd
    g = dy * gamma
    mean_g = g.mean(axis=-1, keepdims=True)
    mean_gx = (g * xhat).mean(axis=-1, keepdims=True)
    return _cast([rstd * (g - mean_g - xhat * mean_gx)], _dtype_of(x))


register(
    Kernel(
        name="layer_norm_dx",
        num_inputs=3,
        params={"eps": 1e-5},
        infer=_layer_norm_dx_infer,
        flops=_per_element(12),
        numpy=_layer_norm_dx_numpy,
        partition=lambda ins, outs, p: _rows_partition(ins[0].rank - 1, 3, (2,), None),
        role="dx",
        doc="(dy, x, gamma) -> dx of layer_norm (recomputes the statistics from x)",
    )
)


def _layer_norm_dw_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    dy, x = ins
    _expect_min_rank(x, 1, "x")
    _expect_float(x, "x")
    _same_shape([x, dy], ("x", "dy"))
    _same_dtype(ins)
    vec = TensorSig((x.shape[-1],), x.dtype)
    return [vec, vec]


def _layer_norm_dw_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    dy, x = xs
    xc, rstd = _layer_norm_stats(x, p["eps"])
    lead = tuple(range(x.ndim - 1))
    return _cast([(dy * xc * rstd).sum(axis=lead), dy.sum(axis=lead)], _dtype_of(x))


register(
    Kernel(
        name="layer_norm_dw",
        num_inputs=2,
        params={"eps": 1e-5},
        infer=_layer_norm_dw_infer,
        flops=lambda ins, outs, p: 8.0 * ins[0].numel,
        numpy=_layer_norm_dw_numpy,
        partition=lambda ins, outs, p: _rows_partition(ins[0].rank - 1, 2, (), (PARTIAL, PARTIAL)),
        role="dw",
        doc="(dy, x) -> (dgamma [M], dbeta [M]) of layer_norm",
    )
)


def _softmax_axes(sig: TensorSig, params: Params) -> list[int]:
    """Axes that must not be split: the softmax axis (and both mask axes if causal)."""
    axis = _norm_axis(params["axis"], sig.rank)
    return [axis, sig.rank - 2] if params.get("causal") else [axis]


def _softmax_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    x = ins[0]
    _expect_min_rank(x, 1, "input")
    _expect_float(x, "input")
    _norm_axis(params["axis"], x.rank)
    if params["causal"]:
        _expect_min_rank(x, 2, "causal softmax input")
        if _norm_axis(params["axis"], x.rank) != x.rank - 1:
            raise KernelError("causal softmax must normalise the last axis")
    return [x]


def _softmax_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    x = xs[0]
    if p["causal"]:
        rows, cols = x.shape[-2:]
        future = np.triu(np.ones((rows, cols), dtype=bool), k=1)  # key j > query i
        x = np.where(future, x.dtype.type(-np.inf), x)
    z = np.exp(x - x.max(axis=p["axis"], keepdims=True))
    return _cast([z / z.sum(axis=p["axis"], keepdims=True)], _dtype_of(xs[0]))


register(
    Kernel(
        name="softmax",
        num_inputs=1,
        params={"axis": -1, "causal": False},
        infer=_softmax_infer,
        flops=_per_element(5),  # max, sub, exp, sum, div
        numpy=_softmax_numpy,
        partition=lambda ins, outs, p: _elementwise_partition(ins, outs, _softmax_axes(ins[0], p)),
        role="fwd",
        doc="(x) -> softmax over `axis`; causal masks keys j > query i on the last two axes",
    )
)


def _softmax_dx_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    dy, y = ins
    _expect_float(y, "y")
    _same_shape([y, dy], ("y", "dy"))
    _same_dtype(ins)
    _norm_axis(params["axis"], y.rank)
    return [y]


def _softmax_dx_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    dy, y = xs
    return _cast([y * (dy - (dy * y).sum(axis=p["axis"], keepdims=True))], _dtype_of(y))


register(
    Kernel(
        name="softmax_dx",
        num_inputs=2,
        params={"axis": -1},
        infer=_softmax_dx_infer,
        flops=_per_element(4),
        numpy=_softmax_dx_numpy,
        partition=lambda ins, outs, p: _elementwise_partition(
            ins, outs, [_norm_axis(p["axis"], ins[1].rank)]
        ),
        role="dx",
        doc="(dy, y=softmax(x)) -> dx = y * (dy - sum(dy * y, axis))",
    )
)

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


def _gelu_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    x = xs[0]
    t = np.tanh(x.dtype.type(_GELU_C) * (x + x.dtype.type(_GELU_A) * x**3))
    return _cast([x.dtype.type(0.5) * x * (1 + t)], _dtype_of(x))


def _gelu_dx_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    dy, x = xs
    c, a, half = (x.dtype.type(v) for v in (_GELU_C, _GELU_A, 0.5))
    t = np.tanh(c * (x + a * x**3))
    grad = half * (1 + t) + half * x * (1 - t * t) * c * (1 + 3 * a * x * x)
    return _cast([dy * grad], _dtype_of(x))


def _gelu_dx_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    _expect_float(ins[1], "x")
    _same_shape([ins[1], ins[0]], ("x", "dy"))
    _same_dtype(ins)
    return [ins[1]]


register(
    Kernel(
        name="gelu",
        num_inputs=1,
        params={},
        infer=_unary_same_infer,
        flops=_per_element(8),
        numpy=_gelu_numpy,
        partition=_elementwise_rule,
        role="fwd",
        doc="(x) -> 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))",
    )
)

register(
    Kernel(
        name="gelu_dx",
        num_inputs=2,
        params={},
        infer=_gelu_dx_infer,
        flops=_per_element(14),
        numpy=_gelu_dx_numpy,
        partition=_elementwise_rule,
        role="dx",
        doc="(dy, x) -> dy · gelu'(x) (tanh approximation)",
    )
)


# ---------------------------------------------------------------------------------------
# Embedding
# ---------------------------------------------------------------------------------------


def _check_ids(ids: np.ndarray, bound: int) -> np.ndarray:
    flat = np.asarray(ids).astype(np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= bound):
        raise KernelError(f"ids out of range [0, {bound}): min {flat.min()}, max {flat.max()}")
    return flat


def _embedding_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    table, ids = ins
    _expect_rank(table, 2, "table")
    _expect_float(table, "table")
    _expect_int(ids, "ids")
    return [TensorSig((*ids.shape, table.shape[1]), table.dtype)]


def _embedding_partition(ins: Sigs, outs: Sigs, params: Params) -> list[PartitionCombo]:
    ids = ins[1]
    combos: list[PartitionCombo] = [((None, i), (i,)) for i in range(ids.rank)]
    combos.append(((1, None), (ids.rank,)))
    return combos


register(
    Kernel(
        name="embedding",
        num_inputs=2,
        params={},
        infer=_embedding_infer,
        flops=_zero_flops,
        # a gather reads only the selected rows: ids + rows read + output written
        bytes_moved=lambda ins, outs, p: float(ins[1].nbytes + 2 * outs[0].nbytes),
        numpy=lambda xs, p: _cast([xs[0][_check_ids(xs[1], xs[0].shape[0])]], _dtype_of(xs[0])),
        partition=_embedding_partition,
        role="fwd",
        doc="(table [V, M], ids int [...]) -> table[ids] [..., M]",
    )
)


def _embedding_dw_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    dy, ids = ins
    _expect_float(dy, "dy")
    _expect_int(ids, "ids")
    if dy.shape != (*ids.shape, *dy.shape[-1:]) or dy.rank != ids.rank + 1:
        raise KernelError(f"dy shape {dy} must be ids shape {ids} plus one trailing dim")
    if params["num_embeddings"] < 1:
        raise KernelError("num_embeddings must be >= 1")
    return [TensorSig((params["num_embeddings"], dy.shape[-1]), dy.dtype)]


def _embedding_dw_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    dy, ids = xs
    rows = _check_ids(ids, p["num_embeddings"]).reshape(-1)
    out = np.zeros((p["num_embeddings"], dy.shape[-1]), dtype=dy.dtype)
    np.add.at(out, rows, dy.reshape(-1, dy.shape[-1]))  # sequential, hence deterministic
    return _cast([out], _dtype_of(dy))


def _embedding_dw_partition(ins: Sigs, outs: Sigs, params: Params) -> list[PartitionCombo]:
    ids = ins[1]
    combos: list[PartitionCombo] = [((i, i), (PARTIAL,)) for i in range(ids.rank)]
    combos.append(((ids.rank, None), (1,)))
    return combos


register(
    Kernel(
        name="embedding_dw",
        num_inputs=2,
        params={"num_embeddings": ParamSpec(int)},
        infer=_embedding_dw_infer,
        flops=lambda ins, outs, p: float(ins[0].numel),
        numpy=_embedding_dw_numpy,
        partition=_embedding_dw_partition,
        role="dw",
        doc="(dy [..., M], ids [...]; num_embeddings V) -> d table [V, M] (scatter-add)",
    )
)


# ---------------------------------------------------------------------------------------
# Layout: reshape, transpose, split, concat
# ---------------------------------------------------------------------------------------


def _resolve_shape(shape: tuple[int, ...], numel: int) -> tuple[int, ...]:
    """`shape` with its single -1 (if any) inferred so it holds `numel` elements."""
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise KernelError(f"bad target shape {shape}: at most one -1, others >= 0")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0 or numel % known:
            raise KernelError(f"cannot reshape {numel} elements into {shape}")
        shape = tuple(numel // known if d == -1 else d for d in shape)
    if math.prod(shape) != numel:
        raise KernelError(f"cannot reshape {numel} elements into {shape}")
    return shape


def _reshape_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    x = ins[0]
    return [TensorSig(_resolve_shape(params["shape"], x.numel), x.dtype)]


def _reshape_partition(ins: Sigs, outs: Sigs, params: Params) -> list[PartitionCombo]:
    """Walk both shapes in groups of equal element count; the first dim of size > 1 of
    each group on one side maps to the first dim of size > 1 of the same group on the
    other (splitting a group's leading dim = splitting the flattened group contiguously)."""
    a, b = ins[0].shape, outs[0].shape
    combos: list[PartitionCombo] = []
    i = j = 0
    while i < len(a) and j < len(b):
        gi, gj = i, j
        pa, pb = a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                pa, i = pa * a[i], i + 1
            else:
                pb, j = pb * b[j], j + 1
        lead_a = next((k for k in range(gi, i) if a[k] > 1), None)
        lead_b = next((k for k in range(gj, j) if b[k] > 1), None)
        if lead_a is not None and lead_b is not None:
            combos.append(((lead_a,), (lead_b,)))
    return combos


register(
    Kernel(
        name="reshape",
        num_inputs=1,
        params={"shape": ParamSpec(tuple)},
        infer=_reshape_infer,
        flops=_zero_flops,
        numpy=lambda xs, p: [_contig(xs[0]).reshape(_resolve_shape(p["shape"], xs[0].size))],
        partition=_reshape_partition,
        doc="(x) -> x reshaped to `shape` (one entry may be -1)",
    )
)


def _transpose_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    x, perm = ins[0], params["perm"]
    if sorted(perm) != list(range(x.rank)):
        raise KernelError(f"perm {perm} is not a permutation of the {x.rank} axes of {x}")
    return [TensorSig(tuple(x.shape[k] for k in perm), x.dtype)]


register(
    Kernel(
        name="transpose",
        num_inputs=1,
        params={"perm": ParamSpec(tuple)},
        infer=_transpose_infer,
        flops=_zero_flops,
        numpy=lambda xs, p: [_contig(np.transpose(xs[0], p["perm"]))],
        partition=lambda ins, outs, p: [((k,), (i,)) for i, k in enumerate(p["perm"])],
        doc="(x) -> x with axes permuted: out axis i is input axis perm[i]",
    )
)


def _split_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    x, num = ins[0], params["num"]
    axis = _norm_axis(params["axis"], x.rank)
    if num < 1 or x.shape[axis] % num:
        raise KernelError(f"cannot split dim {x.shape[axis]} of {x} into {num} equal parts")
    shape = list(x.shape)
    shape[axis] //= num
    return [TensorSig(tuple(shape), x.dtype)] * num


register(
    Kernel(
        name="split",
        num_inputs=1,
        params={"axis": 0, "num": ParamSpec(int)},
        infer=_split_infer,
        flops=_zero_flops,
        numpy=lambda xs, p: [_contig(a) for a in np.split(xs[0], p["num"], axis=p["axis"])],
        partition=lambda ins, outs, p: _elementwise_partition(
            ins, outs, [_norm_axis(p["axis"], ins[0].rank)]
        ),
        doc="(x) -> `num` equal slices of x along `axis`",
    )
)


def _concat_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    first = ins[0]
    _expect_min_rank(first, 1, "input")
    axis = _norm_axis(params["axis"], first.rank)
    dtype = _same_dtype(ins)
    for k, s in enumerate(ins[1:], start=1):
        other = tuple(d for i, d in enumerate(s.shape) if i != axis)
        if s.rank != first.rank or other != tuple(
            d for i, d in enumerate(first.shape) if i != axis
        ):
            raise KernelError(f"input #{k} shape {s} does not match {first} off axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(s.shape[axis] for s in ins)
    return [TensorSig(tuple(shape), dtype)]


register(
    Kernel(
        name="concat",
        num_inputs=None,
        params={"axis": 0},
        infer=_concat_infer,
        flops=_zero_flops,
        numpy=lambda xs, p: [np.concatenate(xs, axis=p["axis"])],
        partition=lambda ins, outs, p: _elementwise_partition(
            ins, outs, [_norm_axis(p["axis"], outs[0].rank)]
        ),
        doc="(x0, x1, ...) -> concatenation along `axis`",
    )
)


def _reduce_axes(sig: TensorSig, axes: Sequence[int]) -> list[int]:
    norm = sorted({_norm_axis(a, sig.rank) for a in axes})
    if len(norm) != len(axes):
        raise KernelError(f"repeated axis in {tuple(axes)}")
    return norm


def _reduce_sum_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    x = ins[0]
    axes = _reduce_axes(x, params["axes"])
    if params["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorSig(shape, x.dtype)]


def _reduce_sum_partition(ins: Sigs, outs: Sigs, params: Params) -> list[PartitionCombo]:
    axes = _reduce_axes(ins[0], params["axes"])
    combos: list[PartitionCombo] = []
    kept = 0
    for i in range(ins[0].rank):
        if i in axes:
            combos.append(((i,), (PARTIAL,)))
        else:
            combos.append(((i,), (i if params["keepdims"] else kept,)))
            kept += 1
    return combos


register(
    Kernel(
        name="reduce_sum",
        num_inputs=1,
        params={"axes": (0,), "keepdims": False},
        infer=_reduce_sum_infer,
        flops=lambda ins, outs, p: float(ins[0].numel),
        numpy=lambda xs, p: _cast(
            [np.sum(xs[0], axis=tuple(p["axes"]), keepdims=p["keepdims"])], _dtype_of(xs[0])
        ),
        partition=_reduce_sum_partition,
        doc="(x) -> sum of x over `axes` (e.g. bias gradients)",
    )
)


# ---------------------------------------------------------------------------------------
# Loss
# ---------------------------------------------------------------------------------------


def _ce_check(ins: Sigs) -> None:
    logits, labels = ins
    _expect_rank(logits, 2, "logits")
    _expect_float(logits, "logits")
    _expect_rank(labels, 1, "labels")
    _expect_int(labels, "labels")
    if labels.shape[0] != logits.shape[0]:
        raise KernelError(f"token dims differ: {logits.shape[0]} vs {labels.shape[0]}")


def _ce_loss_dtype(dtype: DType) -> DType:
    # the loss is reduced in at least f32 (half types would lose the mean)
    return "f64" if dtype == "f64" else "f32"


def _ce_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    _ce_check(ins)
    return [TensorSig((), _ce_loss_dtype(ins[0].dtype))]


def _log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _ce_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    logits, labels = xs
    out_dtype = _ce_loss_dtype(_dtype_of(logits))
    lp = _log_softmax(_arr(logits, out_dtype))
    rows = np.arange(lp.shape[0])
    picked = lp[rows, _check_ids(labels, lp.shape[1])]
    return _cast([-picked.mean()], out_dtype)


def _ce_dx_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    _ce_check(ins)
    return [ins[0]]


def _ce_dx_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    logits, labels = xs
    dtype = _dtype_of(logits)
    grad = np.exp(_log_softmax(logits))
    rows = np.arange(grad.shape[0])
    grad[rows, _check_ids(labels, grad.shape[1])] -= 1
    return _cast([grad / grad.dtype.type(grad.shape[0])], dtype)


register(
    Kernel(
        name="cross_entropy",
        num_inputs=2,
        params={},
        infer=_ce_infer,
        flops=lambda ins, outs, p: 4.0 * ins[0].numel,
        numpy=_ce_numpy,
        role="fwd",
        doc="(logits [S, V], labels int [S]) -> mean token loss, rank 0 (f32, f64 for f64)",
    )
)

register(
    Kernel(
        name="cross_entropy_dx",
        num_inputs=2,
        params={},
        infer=_ce_dx_infer,
        flops=lambda ins, outs, p: 5.0 * ins[0].numel,
        numpy=_ce_dx_numpy,
        role="dx",
        doc="(logits [S, V], labels [S]) -> (softmax(logits) - onehot(labels)) / S",
    )
)


# ---------------------------------------------------------------------------------------
# Mixture of experts
# ---------------------------------------------------------------------------------------

_GATE_PARAMS = {
    "gate": ParamSpec(str, "switch", choices=("switch", "top2")),
    "capacity": ParamSpec(int),
}


@dataclass
class _Routing:
    """GShard-style routing of S tokens: per choice k, expert, slot, kept flag, gate."""

    probs: np.ndarray  # [S, E] softmax of the logits
    experts: list[np.ndarray]  # [S] chosen expert per choice
    slots: list[np.ndarray]  # [S] position inside that expert's capacity
    kept: list[np.ndarray]  # [S] bool: slot < capacity
    raw: list[np.ndarray]  # [S] probability of the choice (0 when dropped)
    denom: np.ndarray | None  # [S] top2 normaliser (None for switch)


def _route(logits: np.ndarray, gate: str, capacity: int) -> _Routing:
    """Top-1/top-2 routing with positions by cumulative sum in token order.

    Second choices are placed after all kept first choices of their expert (GShard); tokens
    whose position reaches `capacity` are dropped. Ties pick the lowest expert index.
    """
    probs = np.exp(_log_softmax(logits))
    s_idx = np.arange(logits.shape[0])
    n_exp = logits.shape[1]
    offset = np.zeros(n_exp, dtype=np.int64)
    avail = probs.copy()
    r = _Routing(probs, [], [], [], [], None)
    for _ in range(1 if gate == "switch" else 2):
        e = np.argmax(avail, axis=1)
        onehot = np.eye(n_exp, dtype=np.int64)[e]
        slot = (np.cumsum(onehot, axis=0) - 1)[s_idx, e] + offset[e]
        kept = slot < capacity
        offset = offset + (onehot * kept[:, None]).sum(axis=0)
        avail[s_idx, e] = -np.inf
        r.experts.append(e)
        r.slots.append(slot)
        r.kept.append(kept)
        r.raw.append(np.where(kept, probs[s_idx, e], 0).astype(probs.dtype))
    if gate == "top2":
        eps = np.finfo(probs.dtype).eps
        r.denom = np.maximum(r.raw[0] + r.raw[1], probs.dtype.type(eps))
    return r


def _gate_values(r: _Routing) -> list[np.ndarray]:
    return r.raw if r.denom is None else [g / r.denom for g in r.raw]


def _moe_gate_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    logits = ins[0]
    _expect_rank(logits, 2, "logits")
    _expect_float(logits, "logits")
    if params["capacity"] < 1:
        raise KernelError(f"capacity must be >= 1, got {params['capacity']}")
    if params["gate"] == "top2" and logits.shape[1] < 2:
        raise KernelError("top2 gating needs at least 2 experts")
    s, e = logits.shape
    out = TensorSig((s, e, params["capacity"]), logits.dtype)
    return [out, out]


def _moe_gate_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    logits = xs[0]
    s, e = logits.shape
    r = _route(logits, p["gate"], p["capacity"])
    combine = np.zeros((s, e, p["capacity"]), dtype=logits.dtype)
    dispatch = np.zeros_like(combine)
    for ex, slot, kept, g in zip(r.experts, r.slots, r.kept, _gate_values(r), strict=True):
        rows = np.nonzero(kept)[0]
        combine[rows, ex[rows], slot[rows]] = g[rows]
        dispatch[rows, ex[rows], slot[rows]] = 1
    return _cast([combine, dispatch], _dtype_of(logits))


register(
    Kernel(
        name="moe_gate",
        num_inputs=1,
        params=_GATE_PARAMS,
        infer=_moe_gate_infer,
        # softmax (5/elt) + top-k scans and cumsums (~4/elt per choice); outputs are written
        flops=lambda ins, outs, p: 13.0 * ins[0].numel,
        numpy=_moe_gate_numpy,
        role="fwd",
        doc=(
            "(logits [S, E]; gate switch|top2, capacity C) -> (combine [S, E, C], "
            "dispatch mask [S, E, C]); GShard positions, tokens over capacity dropped, "
            "top2 gates renormalised over the kept choices"
        ),
    )
)


def _moe_gate_dx_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    dcombine, logits = ins
    (out, _) = _moe_gate_infer([logits], params)
    if dcombine != out:
        raise KernelError(f"dcombine shape {dcombine} must be {out}")
    return [logits]


def _moe_gate_dx_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    dcombine, logits = xs
    r = _route(logits, p["gate"], p["capacity"])
    s_idx = np.arange(logits.shape[0])
    # gradient of each kept choice's combine weight
    dc = [
        np.where(k, dcombine[s_idx, e, np.minimum(sl, p["capacity"] - 1)], 0)
        for e, sl, k in zip(r.experts, r.slots, r.kept, strict=True)
    ]
    if r.denom is None:
        draw = dc
    else:  # c_k = g_k / (g_1 + g_2): dc/dg through the normaliser
        d2 = r.denom * r.denom
        draw = [(dc[0] - dc[1]) * r.raw[1] / d2, (dc[1] - dc[0]) * r.raw[0] / d2]
    dprobs = np.zeros_like(r.probs)
    for e, k, d in zip(r.experts, r.kept, draw, strict=True):
        dprobs[s_idx, e] += np.where(k, d, 0).astype(dprobs.dtype)
    inner = (dprobs * r.probs).sum(axis=-1, keepdims=True)
    return _cast([r.probs * (dprobs - inner)], _dtype_of(logits))


register(
    Kernel(
        name="moe_gate_dx",
        num_inputs=2,
        params=_GATE_PARAMS,
        infer=_moe_gate_dx_infer,
        flops=lambda ins, outs, p: 13.0 * ins[1].numel,
        numpy=_moe_gate_dx_numpy,
        role="dx",
        doc="(dcombine [S, E, C], logits [S, E]; gate, capacity) -> dlogits [S, E]",
    )
)


def _make_moe(name: str, spec: str, names: tuple[str, str], role: str, doc: str) -> Kernel:
    """A dispatch/combine kernel: a two-operand contraction over the routing tensor."""

    def infer(ins: Sigs, params: Params) -> list[TensorSig]:
        return [_contract_infer(spec, ins, names)]

    def flops(ins: Sigs, outs: Sigs, params: Params) -> float:
        size = _contract_sizes(spec, ins)
        return 2.0 * size["e"] * size["c"] * size["m"]

    def run(xs: list[np.ndarray], params: Params) -> list[np.ndarray]:
        dtype = _dtype_of(xs[0])
        return _cast([_contract_numpy(spec, _arr(xs[0], dtype), _arr(xs[1], dtype))], dtype)

    return Kernel(
        name=name,
        num_inputs=2,
        params={},
        infer=infer,
        flops=flops,
        numpy=run,
        partition=lambda ins, outs, p: _einsum_partition(spec, ins),
        role=role,
        doc=doc,
    )


for _args in (
    ("moe_dispatch", "sm,sec->ecm", ("x", "dispatch"), "fwd",
     "(x [S, M], dispatch [S, E, C]) -> expert input [E, C, M]"),
    ("moe_combine", "ecm,sec->sm", ("expert_out", "combine"), "fwd",
     "(expert_out [E, C, M], combine [S, E, C]) -> y [S, M]"),
    ("moe_dispatch_dx", "ecm,sec->sm", ("d_expert_in", "dispatch"), "dx",
     "(d expert input [E, C, M], dispatch [S, E, C]) -> dx [S, M]"),
    ("moe_combine_dx", "sm,sec->ecm", ("dy", "combine"), "dx",
     "(dy [S, M], combine [S, E, C]) -> d expert_out [E, C, M]"),
    ("moe_combine_dw", "sm,ecm->sec", ("dy", "expert_out"), "dx",
     "(dy [S, M], expert_out [E, C, M]) -> d combine [S, E, C] (feeds moe_gate_dx)"),
):  # fmt: skip
    register(_make_moe(*_args))


# ---------------------------------------------------------------------------------------
# Optimizer updates
# ---------------------------------------------------------------------------------------


def _same_as_first_infer(names: Sequence[str], n_out: int) -> InferFn:
    """Shape rule of element-wise kernels whose inputs and outputs all share one sig."""

    def infer(ins: Sigs, params: Params) -> list[TensorSig]:
        _expect_float(ins[0], names[0])
        _same_shape(ins, names)
        _same_dtype(ins)
        return [ins[0]] * n_out

    return infer


def _sgd_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    param, grad = xs
    return _cast([param - param.dtype.type(p["lr"]) * grad], _dtype_of(param))


def _adam_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    param, grad, m, v = xs
    f = param.dtype.type
    b1, b2, step = p["beta1"], p["beta2"], p["step"]
    m_new = f(b1) * m + f(1 - b1) * grad
    v_new = f(b2) * v + f(1 - b2) * grad * grad
    m_hat = m_new / f(1 - b1**step)  # bias correction
    v_hat = v_new / f(1 - b2**step)
    param_new = param - f(p["lr"]) * m_hat / (np.sqrt(v_hat) + f(p["eps"]))
    return _cast([param_new, m_new, v_new], _dtype_of(param))


def _adam_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    if params["step"] < 1:
        raise KernelError(f"step must be >= 1, got {params['step']}")
    return _same_as_first_infer(("param", "grad", "m", "v"), 3)(ins, params)


register(
    Kernel(
        name="sgd_update",
        num_inputs=2,
        params={"lr": 0.01},
        infer=_same_as_first_infer(("param", "grad"), 1),
        flops=_per_element(2),
        numpy=_sgd_numpy,
        partition=_elementwise_rule,
        role="update",
        doc="(param, grad; lr) -> param - lr * grad",
    )
)

register(
    Kernel(
        name="adam_update",
        num_inputs=4,
        params={"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "step": 1},
        infer=_adam_infer,
        flops=_per_element(12),
        numpy=_adam_numpy,
        partition=_elementwise_rule,
        role="update",
        doc="(param, grad, m, v; lr, beta1, beta2, eps, step) -> (param', m', v'), "
        "bias-corrected Adam",
    )
)


# ---------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------

_DTYPE_PARAM = ParamSpec(str, "f32", choices=ALL_DTYPES)


def _fill_infer(ins: Sigs, params: Params) -> list[TensorSig]:
    if any(d < 0 for d in params["shape"]):
        raise KernelError(f"bad shape {params['shape']}")
    return [TensorSig(params["shape"], params["dtype"])]


def _fill_numpy(xs: list[np.ndarray], p: Params) -> list[np.ndarray]:
    return [np.full(p["shape"], p.get("value", 0), dtype=numpy_dtype(p["dtype"]))]


def _make_fill(name: str, params: Mapping[str, Any], doc: str) -> Kernel:
    return Kernel(
        name=name,
        num_inputs=0,
        params=params,
        infer=_fill_infer,
        flops=_zero_flops,
        numpy=_fill_numpy,
        partition=lambda ins, outs, p: [((), (i,)) for i in range(outs[0].rank)],
        doc=doc,
    )


register(
    _make_fill(
        "fill",
        {"shape": ParamSpec(tuple), "dtype": _DTYPE_PARAM, "value": 0.0},
        "() -> tensor of `shape` and `dtype` filled with `value`",
    )
)
register(
    _make_fill(
        "zeros",
        {"shape": ParamSpec(tuple), "dtype": _DTYPE_PARAM},
        "() -> tensor of `shape` and `dtype` filled with zeros",
    )
)
