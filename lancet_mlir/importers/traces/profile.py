"""Profiles from traces: the measured GPU time of every ATen op of a step, keyed like op keys.

An ATen op's time is the sum of the GPU kernels (and copies) it launched, one sample per call;
its key is `aten::NAME;` + the `cpu_op`'s input tensors as `T<d0x..xdtype>,` + `|` (Kineto
records no output shapes, so the result part is empty): `aten::mm;T<16x1xf32>,T<1x256xf32>,|`.
For 2-D `aten::mm` and 3-D `aten::bmm` the same time is also stored under our `comp.matmul` /
`comp.batch_matmul` key (`comp.matmul;T<MxKxf32>,T<KxNxf32>,|T<MxNxf32>`): the ops the PyTorch
importer (importers/torch) makes of them, so an imported step with those shapes is costed by it. Ops without recorded shapes (`record_shapes=False`) are keyed by name alone.
"""

from __future__ import annotations

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
    if name == "aten::mm" and len(tensors) == 2 and all(len(d) == 2 for d, _ in tensors):
        (a, ta), (b, _) = tensors
        if a[1] == b[0]:
            keys.append(
                f"comp.matmul;{_tensor(a, ta)},{_tensor(b, ta)},|{_tensor([a[0], b[1]], ta)}"
            )
    if name == "aten::bmm" and len(tensors) == 2 and all(len(d) == 3 for d, _ in tensors):
        (a, ta), (b, _) = tensors
        if a[0] == b[0] and a[2] == b[1]:
            keys.append(
                f"comp.batch_matmul;{_tensor(a, ta)},{_tensor(b, ta)},|"
                f"{_tensor([a[0], a[1], b[2]], ta)}"
            )
    return keys


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
