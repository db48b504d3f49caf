"""`lancet-profile measure`: time every distinct op key of a module on a real back-end.

For each distinct op key (`keys.op_key`) of the module's compute ops, the back-end runs the
kernel in rounds over all keys (see `measure_with_stats`), with BLAS threads pinned; each key's
samples are summarized by `robust.robust_summary` (outliers rejected, then the profile layer's
trimmed mean) into a ProfileDB. Back-ends:

* `cpu` (`numpy_backend.py`): the kernel registry's numpy implementation, wall-clock time;
* `cuda` (`cuda_backend.py`): the same implementations on CuPy arrays, timed with CUDA events
  through cuda-python on one stream.

What is measured: ops with a kernel in the registry (`comp.*`). Collectives are *not*
measured by either back-end: their times come from comm tables (`lancet-profile
from-nccl-tests`, the shipped XLA tables). Other ops without a kernel are listed in a note.
Inputs are synthetic and deterministic (`seed`): floats uniform in [0.5, 1.5) (positive,
so no kernel produces NaN, e.g. Adam's square root); integers (ids, labels) in
[0, b) with b the smallest dimension of the op's float operands (or its `num_embeddings`),
so that every index is valid. A key's inputs exist only while that key is timed: they are
made afresh in each round and freed after it, so memory holds one key's arrays at a time.

Bounds (`MeasureOptions`): `max_seconds` bounds the whole measurement, warm-ups included
(each run is checked against the deadline; a key that got no run in time is reported as
unmeasured, not guessed); `max_memory` skips the keys whose estimated peak (`key_peak_bytes`)
is above it, and without it a key that would not fit in the memory available now is refused
up front (`check_memory_plan`). The command (argument checks, loading, MPI, writing) is in
`command.py`; the options' errors name the parameters (`iters`), the tool names its flags.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation
from xdsl.traits import IsTerminator

from lancet_mlir.cost.keys import op_key
from lancet_mlir.cost.profile_db import ProfileDB
from lancet_mlir.dialects.comm import CollectiveOp, tensor_bytes
from lancet_mlir.support.errors import OptionError, UserError, one_line


class Backend(Protocol):
    """A measurement back-end: runs one kernel and times it."""

    name: str
    device: str

    def prepare(self, op: Operation, inputs: list[np.ndarray]) -> Callable[[], Any]:
        """A zero-argument callable that runs `op`'s kernel once on `inputs`."""
        ...

    def time(
        self, fn: Callable[[], Any], warmup: int, iters: int, deadline: float | None = None
    ) -> list[float]:
        """Up to `iters` measured durations (µs) of `fn` after up to `warmup` unmeasured runs;
        no run starts at or after `deadline` (time.monotonic), so fewer may come back."""
        ...

    def metadata(self) -> dict[str, Any]:
        """Back-end facts recorded in the profile (device name, library versions, ...)."""
        ...


@dataclass(frozen=True)
class MeasureOptions:
    """How to measure; invalid values raise OptionError naming the field."""

    warmup: int = 5
    """Unmeasured runs per key before its timed runs (see `round_plan`)."""
    iters: int = 20
    """Timed runs per key (fewer when `max_seconds` runs out)."""
    seed: int = 0
    """Seed of the synthetic inputs."""
    rounds: int = 3
    """The timed runs are split into this many rounds over all keys."""
    max_seconds: float | None = None
    """Time budget of the whole measurement, warm-ups included."""
    threads: int | None = 1
    """BLAS threads (threadpoolctl); None leaves them alone."""
    max_memory: int | None = None
    """Bytes: keys whose estimated peak is above it are not measured (reported as such)."""

    def __post_init__(self) -> None:
        checks = {
            "warmup": self.warmup >= 0,
            "iters": self.iters >= 1,
            "seed": self.seed >= 0,
            "rounds": self.rounds >= 1,
        }
        for name, ok in checks.items():
            if not ok:
                low = 0 if name in ("warmup", "seed") else 1
                raise OptionError(name, f"must be >= {low}, got {getattr(self, name)}")
        if self.max_seconds is not None and not (
            math.isfinite(self.max_seconds) and self.max_seconds > 0
        ):
            raise OptionError("max_seconds", f"must be a finite number > 0, got {self.max_seconds}")
        if self.threads is not None and self.threads < 1:
            raise OptionError("threads", f"must be >= 1 (or None: not pinned), got {self.threads}")
        if self.max_memory is not None and self.max_memory < 1:
            raise OptionError("max_memory", f"must be >= 1 byte, got {self.max_memory}")


@dataclass
class OpCatalog:
    """The module's ops grouped by key: one representative op per measurable key."""

    measurable: dict[str, Operation] = field(default_factory=dict)
    collectives: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    unregistered: list[str] = field(default_factory=list)
    """Names of ops no dialect defines (parsed with allow_unregistered)."""


def catalog_ops(module: ModuleOp) -> OpCatalog:
    """Sort every op of the module's function bodies into measurable / collective / other."""
    from xdsl.dialects.builtin import UnregisteredOp

    from lancet_mlir.dialects.comp import kernel_of

    cat = OpCatalog()
    seen: set[str] = set()
    for op in module.walk():
        if isinstance(op, UnregisteredOp):  # it claims every trait, IsTerminator too
            if op.op_name.data not in cat.unregistered:
                cat.unregistered.append(op.op_name.data)
            continue
        if op.regions or op.has_trait(IsTerminator) or op is module:
            continue
        key = op_key(op)
        if key in seen:
            continue
        seen.add(key)
        if isinstance(op, CollectiveOp):
            cat.collectives.append(key)
        elif kernel_of(op) is not None:
            cat.measurable[key] = op
        else:
            cat.unsupported.append(key)
    cat.measurable = dict(sorted(cat.measurable.items()))
    cat.collectives.sort()
    cat.unsupported.sort()
    cat.unregistered.sort()
    return cat


def _int_bound(op: Operation) -> int:
    """Exclusive upper bound of synthetic integer operands that indexes stay valid with."""
    from lancet_mlir.dialects.comp import kernel_params

    params = kernel_params(op)
    if "num_embeddings" in params:
        return max(1, int(params["num_embeddings"]))
    dims = [
        d
        for v in op.operands
        if isinstance(v.type, TensorType) and str(v.type.element_type).startswith(("f", "bf"))
        for d in v.type.get_shape()
    ]
    return max(1, min(dims, default=2))


def synthetic_inputs(op: Operation, seed: int) -> list[np.ndarray]:
    """Deterministic operand values of `op` (see the module doc), made in their own dtype
    (no float64 copy of a large f32 operand)."""
    from lancet_mlir.dialects.comp import tensor_sig
    from lancet_mlir.runtime.kernels import numpy_dtype

    rng = np.random.default_rng([seed, len(op.operands)])
    bound = _int_bound(op)
    out = []
    for v in op.operands:
        sig = tensor_sig(v.type)
        dtype = numpy_dtype(sig.dtype)
        if dtype.kind == "f":
            # positive values keep every kernel finite (e.g. Adam's sqrt of the second moment)
            made = np.dtype(np.float64 if dtype == np.float64 else np.float32)
            a = rng.random(size=sig.shape, dtype=made)  # type: ignore[call-overload]
            a += 0.5
            out.append(a if made == dtype else a.astype(dtype))
        elif dtype.kind == "b":
            out.append(rng.integers(0, 2, size=sig.shape, dtype=np.uint8).astype(dtype))
        else:
            out.append(rng.integers(0, bound, size=sig.shape, dtype=dtype))
    return out


TEMPORARIES = 6
"""Kernel temporaries as multiples of an op's largest array (`key_peak_bytes`): numpy's
Adam, GELU and layer norm backward make up to six arrays of their input's size."""


KEY_OVERHEAD = 64 * 1024
"""Bytes of Python objects per timed key (the closure, the samples), whatever its arrays."""


def key_peak_bytes(op: Operation) -> int:
    """Estimated peak bytes of timing one key: its inputs, its outputs and TEMPORARIES copies
    of its largest array (an upper bound of what the numpy kernels allocate,
    test_measure_bounds checks it against tracemalloc)."""
    sizes = [tensor_bytes(v.type) for v in (*op.operands, *op.results)]
    return KEY_OVERHEAD + sum(sizes) + TEMPORARIES * max(sizes, default=0)


class MemoryRefused(UserError):
    """Some keys need more memory than is available and no bound skips them."""


def check_memory_plan(cat: OpCatalog, options: MeasureOptions) -> list[str]:
    """The keys `options.max_memory` skips; MemoryRefused when a key that would be measured
    needs more than the memory available now (one line naming the largest)."""
    from lancet_mlir.runtime.limits import available_memory_bytes, format_bytes

    peaks = {key: key_peak_bytes(op) for key, op in cat.measurable.items()}
    skipped = sorted(
        k for k, b in peaks.items() if options.max_memory is not None and b > options.max_memory
    )
    kept = {k: b for k, b in peaks.items() if k not in skipped}
    if not kept:
        return skipped
    largest = max(kept, key=lambda k: (kept[k], k))
    have = available_memory_bytes()
    if kept[largest] > have:
        over = sum(1 for b in kept.values() if b > have)
        raise MemoryRefused(
            f"measuring {largest} needs about {format_bytes(kept[largest])} of memory but only "
            f"{format_bytes(have)} is available ({over} op key{'s' if over != 1 else ''} "
            "need more than that)"
        )
    return skipped


@dataclass
class MeasureStats:
    """How a measurement went: rounds done, run-to-run spread, time spent, outliers."""

    keys: int = 0
    rounds: int = 0
    """Rounds completed for every key."""
    spread: float = 0.0
    """Run-to-run spread of the iteration total: (max - min) / median over the rounds."""
    seconds: float = 0.0
    rejected: int = 0
    """Samples dropped as outliers, over all keys."""
    budget_hit: bool = False
    """True when max_seconds stopped the measurement before `iters` runs per key."""
    unmeasured: list[str] = field(default_factory=list)
    """Keys that got no timed run before the deadline."""
    too_large: list[str] = field(default_factory=list)
    """Keys skipped because their estimated peak is above max_memory."""

    @property
    def measured(self) -> int:
        """Keys with at least one sample."""
        return self.keys - len(self.unmeasured) - len(self.too_large)


def round_sizes(iters: int, rounds: int, budget: bool) -> list[int]:
    """Timed runs per key in each round: `iters` split into `rounds` near-equal parts; with a
    time budget the first round times each key once, so every key is measured early."""
    if budget and iters > 1:
        return [1, *round_sizes(iters - 1, max(1, rounds - 1), False)]
    rounds = max(1, min(rounds, iters))
    base, extra = divmod(iters, rounds)
    return [base + (1 if r < extra else 0) for r in range(rounds)]


def round_plan(options: MeasureOptions) -> list[tuple[int, int]]:
    """(warm-up runs, timed runs) per key in each round. The full warm-up comes in the first
    round, except under a time budget, whose first round is one cold timed run per key (so
    every key gets a sample early) and whose second round has the warm-up; later rounds,
    whose inputs are made afresh, warm up once (when `warmup` > 0)."""
    budget = options.max_seconds is not None
    sizes = round_sizes(options.iters, options.rounds, budget)
    full = 1 if budget and len(sizes) > 1 else 0
    again = min(1, options.warmup)
    return [
        (0 if r < full else options.warmup if r == full else again, n) for r, n in enumerate(sizes)
    ]


def measure_module(
    module: ModuleOp, backend: Backend, options: MeasureOptions | None = None, **fields: Any
) -> tuple[ProfileDB, OpCatalog]:
    """Measure every measurable op key of `module` with `backend` (see `measure_with_stats`)."""
    db, cat, _ = measure_with_stats(module, backend, options, **fields)
    return db, cat


def measure_with_stats(
    module: ModuleOp,
    backend: Backend,
    options: MeasureOptions | None = None,
    *,
    world_size: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    began: float | None = None,
    **fields: Any,
) -> tuple[ProfileDB, OpCatalog, MeasureStats]:
    """Measure every measurable op key of `module` with `backend`; also say how it went.

    `options` (or its fields as keywords: `iters=4`) say how. The keys are measured in
    rounds (`round_plan`: every key once per round, its inputs made before and freed after),
    so a slow phase of the machine hits all keys alike and the rounds give the run-to-run
    spread. `max_seconds` counts from `began` (time.monotonic; default: now) and bounds
    every run, warm-ups included; keys without a sample are left out of the profile and
    listed in `stats.unmeasured` and the metadata. BLAS threads are pinned to `threads`.
    Each key's samples are summarized by `robust.robust_summary`; the profile metadata records
    the statistic, the per-key median and spread, and how the run went.
    `progress(done, total, key)` is called after each key of each round.
    """
    from threadpoolctl import threadpool_limits

    from lancet_mlir.measure.robust import robust_summary, round_spread

    opts = options if options is not None else MeasureOptions(**fields)
    cat = catalog_ops(module)
    stats = MeasureStats(keys=len(cat.measurable))
    stats.too_large = check_memory_plan(cat, opts)
    keys = {k: op for k, op in cat.measurable.items() if k not in stats.too_large}
    plan = round_plan(opts)
    start = time.monotonic() if began is None else began
    deadline = None if opts.max_seconds is None else start + opts.max_seconds
    samples: dict[str, list[list[float]]] = {key: [] for key in keys}
    pace = RunPace()
    limits = {} if opts.threads is None else {"limits": opts.threads}
    with threadpool_limits(**limits):  # type: ignore[arg-type]
        leading = True  # every round so far timed every key in full
        for r, (warmup, size) in enumerate(plan):
            complete = _measure_round(backend, keys, samples, pace, opts.seed, warmup, size, deadline,
                                      lambda n, key, r=r: progress and progress(
                                          r * len(keys) + n + 1, len(plan) * len(keys), key))  # fmt: skip
            leading = leading and complete
            if leading:
                stats.rounds = r + 1
            if not complete:
                stats.budget_hit = True
            if deadline is not None and time.monotonic() >= deadline:
                break
    stats.seconds = time.monotonic() - start
    stats.unmeasured = sorted(k for k, parts in samples.items() if not parts)
    db = ProfileDB()
    per_key: dict[str, dict[str, float | int]] = {}
    for key, parts in samples.items():
        if not parts:
            continue
        robust = robust_summary([x for part in parts for x in part])
        db.entries[key] = robust.entry
        stats.rejected += robust.rejected
        per_key[key] = {"median_us": round(robust.median_us, 3), "spread": round(robust.spread, 4),
                        "rejected": robust.rejected}  # fmt: skip
    totals = [sum(_median(parts[r]) for parts in samples.values()) for r in range(stats.rounds)]
    stats.spread = round_spread(totals)
    db.metadata.update(backend.metadata())
    db.metadata.update(
        {
            "backend": backend.name,
            "device": backend.device,
            "warmup": opts.warmup,
            "iters": opts.iters,
            "seed": opts.seed,
            "collectives": "not measured (use comm tables)",
            "statistic": STATISTIC,
            "blas_threads": opts.threads if opts.threads is not None else "not pinned",
            "rounds": stats.rounds,
            "run_to_run_spread": round(stats.spread, 4),
            "max_seconds": opts.max_seconds,
            "budget_exhausted": stats.budget_hit,
            "key_stats": per_key,
        }
    )
    if stats.unmeasured:
        db.metadata["unmeasured_keys"] = stats.unmeasured
    if stats.too_large:
        db.metadata["max_memory"] = opts.max_memory
        db.metadata["keys_over_max_memory"] = stats.too_large
    if world_size is not None:
        db.metadata["world_size"] = world_size
    return db, cat, stats


class RunPace:
    """Predicts a key's run time from the keys timed so far, so that under a time budget a
    key whose one run would end past the deadline is not started (a run cannot be stopped).

    The work of an op is its FLOPs plus its bytes (`cost.roofline.op_flops_bytes`); the pace
    is the slowest seconds-per-work seen, for the op's kernel when one of its keys ran, else
    over all keys (a cautious guess: an unknown key is predicted as slow as the slowest)."""

    def __init__(self) -> None:
        self.by_kernel: dict[str, float] = {}
        self.slowest = 0.0

    @staticmethod
    def _work(op: Operation) -> float:
        from lancet_mlir.cost.roofline import op_flops_bytes

        counted = op_flops_bytes(op)
        return 1.0 + (sum(counted) if counted is not None else 0.0)

    def observe(self, op: Operation, samples_us: list[float]) -> None:
        """Record the runs of one key (µs)."""
        if not samples_us:
            return
        pace = min(samples_us) * 1e-6 / self._work(op)
        self.by_kernel[op.name] = max(self.by_kernel.get(op.name, 0.0), pace)
        self.slowest = max(self.slowest, pace)

    def predict(self, op: Operation) -> float:
        """Seconds one run of `op` is expected to take (0 before anything ran)."""
        return self._work(op) * self.by_kernel.get(op.name, self.slowest)


STATISTIC = (
    "mean after rejecting samples beyond 3.5 scaled MADs of the median and trimming 6.25% "
    "at each end (measure/robust.py)"
)


def _median(values: list[float]) -> float:
    import statistics

    return statistics.median(values)


def _measure_round(
    backend: Backend,
    keys: dict[str, Operation],
    samples: dict[str, list[list[float]]],
    pace: RunPace,
    seed: int,
    warmup: int,
    size: int,
    deadline: float | None,
    progress: Callable[[int, str], object],
) -> bool:
    """One round over the keys; False when the deadline cut it short or a key was skipped
    because its run was predicted to end past the deadline."""
    complete = True
    for n, (key, op) in enumerate(keys.items()):
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return False
        if deadline is not None and pace.predict(op) > deadline - now:
            complete = False  # its run would end past the deadline: not started
            continue
        got = _time_key(backend, key, op, seed, warmup, size, deadline)
        pace.observe(op, got)
        if got:
            samples[key].append(got)
        if len(got) < size:
            return False
        progress(n, key)
    return complete


def _time_key(
    backend: Backend,
    key: str,
    op: Operation,
    seed: int,
    warmup: int,
    iters: int,
    deadline: float | None,
) -> list[float]:
    """Up to `iters` timed runs of one key on freshly made inputs, freed on return."""
    try:
        fn = backend.prepare(op, synthetic_inputs(op, seed))
        try:
            return backend.time(fn, warmup, iters, deadline)
        finally:
            del fn  # the inputs live in the closure: free them before the next key
    except UserError:
        raise
    except MemoryError as exc:
        raise UserError(f"{key}: out of memory while measuring it") from exc
    except Exception as exc:  # noqa: BLE001 - name the op key that failed
        raise UserError(f"{key}: {backend.name} back-end failed: {one_line(exc)}") from exc
