"""ProfileDB: measured op times (µs) by op key, with their file formats.

Two formats are read (`ProfileDB.load` picks by extension):

* `.json` — our own human-readable format (docs/formats.md):
  `{"format": "lancet-profile", "version": 1, "metadata": {...}, "entries": {key: {"mean_us",
  "count", "std_us", "min_us", "max_us"}}}`, entries sorted by key.
* `.profile` — Lancet's binary dump (lancet-algorithms.md §4.3): uint64 N (little-endian), N
  NUL-terminated keys, N uint64 times in µs; the whole file must be consumed exactly.

Averaging raw samples follows Lancet §4.2 with its bug fixed: the *first* `warmup` iterations
are dropped (Lancet sorted first and so dropped the fastest samples), then `floor(n * trim)`
extremes at each end of the sorted remainder, then the mean.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lancet_mlir.cost.devices import canonical_device_name
from lancet_mlir.cost.fileio import read_bytes, read_text, write_atomic
from lancet_mlir.support.errors import UserError, one_line

FORMAT_NAME = "lancet-profile"
FORMAT_VERSION = 1

WARMUP_ITERATIONS = 20
"""Default warm-up cut: the first 20 iterations (Lancet's WARMUP_ITER), but at most half."""

TRIM_FRACTION = 0.0625
"""Default fraction trimmed at each end of the sorted samples (Lancet's TRUNCATE_PERCENT)."""


# ---- averaging ---------------------------------------------------------------------------------
def default_warmup(n: int) -> int:
    """Warm-up iterations dropped from `n` samples by default: 20 when n >= 40, else n // 2.

    Lancet skips 20 only when at least 40 samples exist; with fewer we still drop the first
    half, because the first iterations (cold caches, lazy allocation, autotuning) are the
    ones that are slow, and half always leaves at least one sample.
    """
    return min(WARMUP_ITERATIONS, n // 2)


def _kept_samples(
    samples_us: Sequence[float], warmup: int | None, trim_fraction: float
) -> list[float]:
    """Samples left after the warm-up cut and the symmetric trim, sorted ascending."""
    values = [float(s) for s in samples_us]
    if not values:
        raise UserError("no samples to average")
    bad = [v for v in values if not math.isfinite(v) or v < 0]
    if bad:
        raise UserError(f"sample times must be finite and >= 0, got {bad[0]!r}")
    if not 0.0 <= trim_fraction < 0.5:
        raise UserError(f"trim fraction must be in [0, 0.5), got {trim_fraction}")
    cut = default_warmup(len(values)) if warmup is None else warmup
    if cut < 0 or cut >= len(values):
        raise UserError(f"warm-up of {cut} iterations leaves none of {len(values)} samples")
    rest = sorted(values[cut:])  # drop the first iterations *before* sorting
    trim = math.floor(len(rest) * trim_fraction)
    return rest[trim : len(rest) - trim] if trim else rest


def average_samples(
    samples_us: Sequence[float],
    warmup: int | None = None,
    trim_fraction: float = TRIM_FRACTION,
) -> float:
    """Mean of samples given in iteration order, after dropping the first `warmup`
    iterations (None: `default_warmup`) and `floor(m * trim_fraction)` of the m remaining
    samples at each end of their sorted order."""
    kept = _kept_samples(samples_us, warmup, trim_fraction)
    return math.fsum(kept) / len(kept)


def summarize_samples(
    samples_us: Sequence[float],
    warmup: int | None = None,
    trim_fraction: float = TRIM_FRACTION,
) -> ProfileEntry:
    """A ProfileEntry over the samples `average_samples` keeps (count = kept samples,
    std = population standard deviation of them)."""
    kept = _kept_samples(samples_us, warmup, trim_fraction)
    mean = math.fsum(kept) / len(kept)
    var = math.fsum((v - mean) ** 2 for v in kept) / len(kept)
    return ProfileEntry(mean, len(kept), math.sqrt(var), kept[0], kept[-1])


# ---- entries -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProfileEntry:
    """Statistics of one op key: mean/min/max/std in µs over `count` kept samples."""

    mean_us: float
    count: int = 1
    std_us: float = 0.0
    min_us: float | None = None
    max_us: float | None = None

    def __post_init__(self) -> None:
        # a bare mean is a single sample: its min and max are the mean itself
        if self.min_us is None:
            object.__setattr__(self, "min_us", self.mean_us)
        if self.max_us is None:
            object.__setattr__(self, "max_us", self.mean_us)

    def combined(self, other: ProfileEntry) -> ProfileEntry:
        """Count-weighted combination of two entries of the same key (exact pooled mean and
        population standard deviation, min of mins, max of maxes)."""
        n = self.count + other.count
        mean = (self.count * self.mean_us + other.count * other.mean_us) / n
        second = (
            self.count * (self.std_us**2 + self.mean_us**2)
            + other.count * (other.std_us**2 + other.mean_us**2)
        ) / n
        std = math.sqrt(max(0.0, second - mean * mean))
        lo = min(self.min_us, other.min_us)  # type: ignore[type-var]
        hi = max(self.max_us, other.max_us)  # type: ignore[type-var]
        return ProfileEntry(mean, n, std, lo, hi)

    def to_json(self) -> dict[str, float | int]:
        """The entry as the JSON object of the profile format (fixed field order)."""
        return {
            "mean_us": self.mean_us,
            "count": self.count,
            "std_us": self.std_us,
            "min_us": self.min_us,  # type: ignore[dict-item]
            "max_us": self.max_us,  # type: ignore[dict-item]
        }


def _check_time(source: str, key: str, name: str, value: Any) -> float:
    """A finite, non-negative time field, else a UserError naming file, key and field."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{source}: entry {key!r}: {name} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise UserError(f"{source}: entry {key!r}: {name} must be finite and >= 0, got {value!r}")
    return float(value)


def entry_from_json(source: str, key: str, obj: Any) -> ProfileEntry:
    """Validate one JSON entry; only `mean_us` is required (count 1, std 0, min = max = mean)."""
    if isinstance(obj, int | float) and not isinstance(obj, bool):
        obj = {"mean_us": obj}  # shorthand: "key": 12.5
    if not isinstance(obj, dict):
        raise UserError(f"{source}: entry {key!r} must be an object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - {"mean_us", "count", "std_us", "min_us", "max_us"})
    if unknown:
        raise UserError(f"{source}: entry {key!r}: unknown field {unknown[0]!r}")
    if "mean_us" not in obj:
        raise UserError(f"{source}: entry {key!r}: missing mean_us")
    mean = _check_time(source, key, "mean_us", obj["mean_us"])
    count = obj.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise UserError(f"{source}: entry {key!r}: count must be an integer >= 1, got {count!r}")
    std = _check_time(source, key, "std_us", obj.get("std_us", 0.0))
    lo = _check_time(source, key, "min_us", obj.get("min_us", mean))
    hi = _check_time(source, key, "max_us", obj.get("max_us", mean))
    slack = 1e-9 * max(1.0, abs(mean))  # the mean of floats may round just outside [min, max]
    if not lo - slack <= mean <= hi + slack:
        raise UserError(
            f"{source}: entry {key!r}: need min_us <= mean_us <= max_us, got {lo} / {mean} / {hi}"
        )
    return ProfileEntry(mean, count, std, lo, hi)


# ---- the database ------------------------------------------------------------------------------
@dataclass
class ProfileDB:
    """Measured op times: `entries[op_key] -> ProfileEntry` plus free-form `metadata`
    (device, dtype, world_size, date, tool_version, ...)."""

    entries: dict[str, ProfileEntry] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: str) -> ProfileEntry | None:
        """The entry of `key`, or None."""
        return self.entries.get(key)

    def mean_us(self, key: str) -> float | None:
        """The mean time of `key`, or None when not profiled."""
        entry = self.entries.get(key)
        return None if entry is None else entry.mean_us

    def add_samples(
        self,
        key: str,
        samples_us: Sequence[float],
        warmup: int | None = None,
        trim: float = TRIM_FRACTION,
    ) -> ProfileEntry:
        """Average raw samples (iteration order) into the entry of `key` (combined count-
        weighted with an existing entry) and return the new entry."""
        entry = summarize_samples(samples_us, warmup=warmup, trim_fraction=trim)
        old = self.entries.get(key)
        if old is not None:
            entry = old.combined(entry)
        self.entries[key] = entry
        return entry

    def merge(self, other: ProfileDB) -> ProfileDB:
        """Merge `other` into this DB (in place) and return self.

        Keys in both are combined count-weighted (`ProfileEntry.combined`); keys in one only
        are kept. Metadata: this DB's values win, missing ones are taken from `other`; two
        different `device` values are an error (times of different GPUs must not be mixed).
        """
        mine, theirs = self.metadata.get("device"), other.metadata.get("device")
        if (
            mine
            and theirs
            and canonical_device_name(str(mine)) != canonical_device_name(str(theirs))
        ):
            raise UserError(f"cannot merge profiles of different devices: {mine} and {theirs}")
        for key, entry in other.entries.items():
            old = self.entries.get(key)
            self.entries[key] = entry if old is None else old.combined(entry)
        for name, value in other.metadata.items():
            self.metadata.setdefault(name, value)
        return self

    # ---- JSON ----------------------------------------------------------------------------------
    def to_json_text(self) -> str:
        """The JSON document: sorted keys, one entry per line, floats in round-trip form."""
        lines = [
            "{",
            f'  "format": {json.dumps(FORMAT_NAME)},',
            f'  "version": {FORMAT_VERSION},',
            '  "metadata": '
            + json.dumps(self.metadata, sort_keys=True, allow_nan=False, default=str)
            + ",",
        ]
        keys = sorted(self.entries)
        if not keys:
            lines.append('  "entries": {}')
        else:
            lines.append('  "entries": {')
            for n, key in enumerate(keys):
                body = json.dumps(self.entries[key].to_json(), allow_nan=False)
                comma = "," if n + 1 < len(keys) else ""
                lines.append(f"    {json.dumps(key)}: {body}{comma}")
            lines.append("  }")
        lines.append("}")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_json_obj(cls, obj: Any, source: str = "<profile>") -> ProfileDB:
        """Validate a parsed JSON profile document."""
        if not isinstance(obj, dict) or obj.get("format") != FORMAT_NAME:
            raise UserError(f'{source}: not a lancet profile (need "format": "{FORMAT_NAME}")')
        if obj.get("version") != FORMAT_VERSION:
            raise UserError(
                f"{source}: unsupported profile version {obj.get('version')!r} "
                f"(this tool reads version {FORMAT_VERSION})"
            )
        metadata = obj.get("metadata", {})
        if not isinstance(metadata, dict):
            raise UserError(f"{source}: metadata must be an object")
        entries = obj.get("entries")
        if not isinstance(entries, dict):
            raise UserError(f"{source}: entries must be an object mapping op keys to timings")
        parsed = {key: entry_from_json(source, key, value) for key, value in entries.items()}
        return cls(dict(sorted(parsed.items())), dict(metadata))

    @classmethod
    def from_json_text(cls, text: str, source: str = "<profile>") -> ProfileDB:
        """Parse and validate a JSON profile."""
        try:
            obj = json.loads(text, parse_constant=_reject_constant)
        except _NonFiniteError as exc:
            raise UserError(f"{source}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise UserError(f"{source}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
        except RecursionError:
            raise UserError(f"{source}: invalid profile: JSON nested too deeply") from None
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            what = one_line(exc)
            if "digits" in what:  # Python's message suggests changing an interpreter limit
                what = "a number has more than 4300 digits"
            raise UserError(f"{source}: invalid JSON: {what}") from None
        return cls.from_json_obj(obj, source)

    # ---- files ---------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ProfileDB:
        """Load a profile: `.profile` is Lancet's binary format, anything else our JSON."""
        name = os.fspath(path)
        if name.endswith(".profile"):
            times = read_lancet_profile(name)
            db = cls({k: ProfileEntry(float(v)) for k, v in sorted(times.items())})
            db.metadata["source_format"] = "lancet-binary"
            return db
        return cls.from_json_text(read_text(name), name)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write atomically: `.profile` as Lancet's binary format, anything else as JSON."""
        name = os.fspath(path)
        if name.endswith(".profile"):
            write_lancet_profile(name, {k: e.mean_us for k, e in self.entries.items()})
            return
        write_atomic(name, self.to_json_text())


class _NonFiniteError(ValueError):
    pass


def _reject_constant(name: str) -> float:
    raise _NonFiniteError(f"{name} is not a valid time (times must be finite numbers)")


def load_profiles(paths: Iterable[str]) -> ProfileDB:
    """Load several profiles and merge them (in the given order)."""
    db = ProfileDB()
    for path in paths:
        db.merge(ProfileDB.load(path))
    return db


# ---- Lancet's binary .profile ------------------------------------------------------------------
_U64 = struct.Struct("<Q")


def parse_lancet_profile(data: bytes, source: str = "<profile>") -> dict[str, int]:
    """Decode Lancet's binary profile: `uint64 N`, N NUL-terminated keys, N uint64 times (µs),
    all little-endian; the buffer must be consumed exactly."""
    if len(data) < 8:
        raise UserError(f"{source}: truncated Lancet profile ({len(data)} bytes, need >= 8)")
    (count,) = _U64.unpack_from(data, 0)
    # every entry takes at least 1 NUL byte + 8 time bytes: reject absurd counts before looping
    if count > (len(data) - 8) // 9:
        raise UserError(
            f"{source}: truncated Lancet profile: header says {count} entries, "
            f"file has {len(data)} bytes"
        )
    keys: list[str] = []
    pos = 8
    for n in range(count):
        end = data.find(b"\0", pos)
        if end < 0:
            raise UserError(f"{source}: truncated Lancet profile: key #{n} has no NUL terminator")
        try:
            keys.append(data[pos:end].decode("utf-8"))
        except UnicodeDecodeError:
            raise UserError(f"{source}: key #{n} at byte {pos} is not UTF-8") from None
        pos = end + 1
    need = pos + 8 * count
    if len(data) != need:
        what = "truncated" if len(data) < need else "trailing bytes in"
        raise UserError(
            f"{source}: {what} Lancet profile: expected {need} bytes for {count} entries, "
            f"got {len(data)}"
        )
    times = [_U64.unpack_from(data, pos + 8 * n)[0] for n in range(count)]
    out: dict[str, int] = {}
    for key, t in zip(keys, times, strict=True):
        if key in out:
            raise UserError(f"{source}: duplicate key {key!r}")
        out[key] = t
    return out


def read_lancet_profile(path: str | os.PathLike[str]) -> dict[str, int]:
    """Read a Lancet `.profile` file into {key: µs}."""
    return parse_lancet_profile(read_bytes(path), os.fspath(path))


def encode_lancet_profile(times_us: Mapping[str, float]) -> bytes:
    """Encode {key: µs} in Lancet's binary format: keys sorted byte-wise (as std::string
    ordering does), times truncated to integer µs (as Lancet's cast to uint64 does)."""
    items = sorted(((k.encode("utf-8"), v) for k, v in times_us.items()), key=lambda kv: kv[0])
    out = bytearray(_U64.pack(len(items)))
    for raw, _ in items:
        if b"\0" in raw:
            raise UserError(f"key {raw!r} contains a NUL byte")
        out += raw + b"\0"
    for raw, value in items:
        if not math.isfinite(value) or value < 0:
            raise UserError(f"key {raw.decode()!r}: time must be finite and >= 0, got {value}")
        out += _U64.pack(int(value))
    return bytes(out)


def write_lancet_profile(path: str | os.PathLike[str], times_us: Mapping[str, float]) -> None:
    """Write {key: µs} as a Lancet `.profile` file (atomically)."""
    write_atomic(path, encode_lancet_profile(times_us))
