"""Profiles from traces: the measured GPU time of every ATen op of a step, keyed like op keys.

An ATen op's time is the sum of the GPU kernels (and copies) it launched, one sample per call;
its key is `aten::NAME;` + the `cpu_op`'s input tensors as `T<d0x..xdtype>,` + `|` (Kineto
records no output shapes, so the result part is empty): `aten::mm;T<16x1xf32>,T<1x256xf32>,|`.
A matmul-like op's time is also stored under the key of the op the PyTorch importer
(importers/torch) makes of it (`_importer_keys`): `comp.matmul` for 2-D `aten::mm`,
`comp.batch_matmul` for 3-D `aten::bmm`, the generic `aten.op` of `aten::addmm` (bias, A, B),
and for `aten::linear` / `aten::matmul` the mm / addmm / bmm that make_fx writes for them, so an
imported step with those shapes is costed by it. Ops without recorded shapes
(`record_shapes=False`) are keyed by name alone.
"""

from __future__ import annotations

from math import prod

from lancet_mlir.cost.profile_db import ProfileDB
from lancet_mlir.importers.traces.fidelity import DTYPE_NAMES
from lancet_mlir.importers.traces.step import StepTrace

_INT_TYPES = {
    "long int": "i64",
    "int": "i32",
    "short int": "i16",
    "signed char": "i8",
    "unsigned char": "i8",
    "bool": "i1",
}


def _dtype(name: str) -> str:
    low = name.strip().lower()
    return DTYPE_NAMES.get(low) or _INT_TYPES.get(low) or low.replace(" ", "_")


def _tensor(dims: list[int], dtype: str) -> str:
    return "T<" + "".join(f"{d}x" for d in dims) + _dtype(dtype) + ">"


def _matmul_key(a: list[int], b: list[int], dtype: str) -> str | None:
    """The key of the `comp.matmul` (2-D) or `comp.batch_matmul` (3-D, same batch) the
    PyTorch importer makes of `aten.mm` / `aten.bmm` on `a` x `b`; None if not such a pair."""
    if len(a) == len(b) == 2 and a[1] == b[0]:
        op, out = "comp.matmul", [a[0], b[1]]
    elif len(a) == len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        op, out = "comp.batch_matmul", [a[0], a[1], b[2]]
    else:
        return None
    return f"{op};{_tensor(a, dtype)},{_tensor(b, dtype)},|{_tensor(out, dtype)}"


def _addmm_key(bias: list[int], a: list[int], b: list[int], dtype: str) -> str | None:
    """The key of the `aten.op` the PyTorch importer makes of `aten.addmm(bias, a, b)` (no
    `comp` kernel matches it, so it stays one generic op, keyed by its target
    `aten.addmm.default`: operands bias, a, b, result MxN)."""
    if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    return (
        f"aten.addmm.default;{_tensor(bias, dtype)},{_tensor(a, dtype)},{_tensor(b, dtype)},|"
        f"{_tensor([a[0], b[1]], dtype)}"
    )


def _importer_keys(name: str, tensors: list[tuple[list[int], str]]) -> list[str]:
    """The keys of the op the PyTorch importer (importers/torch, make_fx's ATen graph) makes
    of the matmul-like ATen call `name` on `tensors`:

    * `aten::mm` -> `comp.matmul`, `aten::bmm` -> `comp.batch_matmul` (importers/torch/kernels);
    * `aten::addmm(bias, A, B)` -> one `aten.op` on (bias, A, B);
    * `aten::linear(x, W[, bias])`: make_fx writes `t(W)` (a `comp.transpose`, no GPU work)
      and then `mm(x, W^T)` without a bias, `addmm(bias, x, W^T)` with one, on x flattened to
      2-D (a `view`) when it has more dimensions;
    * `aten::matmul(A, B)`: `mm` for 2-D x 2-D, `mm` on A flattened to 2-D for N-D x 2-D,
      `bmm` for 3-D x 3-D.
    Kineto usually links the kernels to the innermost op (`addmm`, `mm`), so `linear` and
    `matmul` keys appear when the trace names the outer op only."""
    dims = [d for d, _ in tensors]
    dtype = tensors[0][1] if tensors else "float"
    key: str | None = None
    if name in ("aten::mm", "aten::bmm") and len(dims) == 2:
        if len(dims[0]) == (2 if name == "aten::mm" else 3):
            key = _matmul_key(dims[0], dims[1], dtype)
    elif name == "aten::addmm" and len(dims) == 3:
        key = _addmm_key(dims[0], dims[1], dims[2], dtype)
    elif name == "aten::linear" and len(dims) in (2, 3) and len(dims[1]) == 2:
        x, w = dims[0], dims[1]
        flat = [prod(x[:-1]), x[-1]] if len(x) >= 2 else None
        if flat is not None:
            wt = [w[1], w[0]]
            key = (
                _matmul_key(flat, wt, dtype)
                if len(dims) == 2
                else _addmm_key(dims[2], flat, wt, dtype)
            )
    elif name == "aten::matmul" and len(dims) == 2:
        a, b = dims
        if len(a) >= 2 and len(b) == 2:
            key = _matmul_key([prod(a[:-1]), a[-1]], b, dtype)
        elif len(a) == len(b) == 3:
            key = _matmul_key(a, b, dtype)
    return [key] if key is not None else []


def aten_keys(name: str, args: dict) -> list[str]:
    """The profile keys of one ATen call (see the module doc)."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    tensors: list[tuple[list[int], str]] = []
    if isinstance(dims, list):
        for k, d in enumerate(dims):
            if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
                t = types[k] if isinstance(types, list) and k < len(types) else "float"
                tensors.append((d, str(t)))
    keys = [name + ";" + "".join(_tensor(d, t) + "," for d, t in tensors) + "|"]
    return keys + _importer_keys(name, tensors)


def profile_from_steps(steps: list[StepTrace]) -> ProfileDB:
    """The profile of the steps' ATen ops (every rank's calls are samples of the same keys)."""
    db = ProfileDB()
    samples: dict[str, list[float]] = {}
    for st in steps:
        per_call: dict[int, tuple[str, dict, float]] = {}
        for j, inf in enumerate(st.info):
            if inf.cpu_op is None or inf.kind == "comm" or inf.step != st.step:
                continue
            key = id(inf.cpu_op)
            name, args, total = per_call.get(key, (inf.cpu_op.name, inf.cpu_op.args, 0.0))
            per_call[key] = (name, args, total + st.graph.ops[j].dur)
        for name, args, total in per_call.values():
            for k in aten_keys(name, args):
                samples.setdefault(k, []).append(total)
    for key in sorted(samples):
        db.add_samples(key, samples[key], warmup=0, trim=0.0)
    devices = sorted({st.device for st in steps if st.device})
    db.metadata.update(
        {
            "source_format": "kineto",
            "traces": [st.source.rsplit("/", 1)[-1] for st in steps],
            "step": steps[0].step,
            "ops": int(sum(len(v) for v in samples.values())),
        }
    )
    if devices:
        from lancet_mlir.importers.traces.report import device_preset

        db.metadata["device"] = device_preset(devices[0]) or devices[0]
    return db
