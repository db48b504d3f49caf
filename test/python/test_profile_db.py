"""ProfileDB: averaging of raw samples, JSON and Lancet .profile formats, merge, validation."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from lancet_mlir.cost.profile_db import (
    ProfileDB,
    ProfileEntry,
    average_samples,
    default_warmup,
    encode_lancet_profile,
    parse_lancet_profile,
    read_lancet_profile,
    summarize_samples,
    write_lancet_profile,
)
from lancet_mlir.tools.errors import UserError


# ---- averaging -----------------------------------------------------------------------------------
def test_warmup_drops_first_iterations_not_fastest() -> None:
    # the first two iterations are slow (warm-up), the fastest samples come later
    samples = [100.0, 90.0, 10.0, 12.0, 11.0, 13.0]
    # warmup=2 drops 100 and 90: mean of 10, 12, 11, 13 = 11.5. Lancet's bug (sort first)
    # would have dropped 10 and 11 and averaged 12, 13, 90, 100 = 53.75.
    assert average_samples(samples, warmup=2, trim_fraction=0.0) == 11.5


def test_trim_after_warmup_hand_computed() -> None:
    # 40 samples: default warm-up = 20 -> the 20 remaining are 1..20 shuffled;
    # trim floor(20 * 0.0625) = 1 at each end -> 2..19, mean 10.5
    tail = [7, 3, 20, 1, 15, 9, 12, 2, 19, 4, 18, 5, 17, 6, 16, 8, 14, 10, 13, 11]
    samples = [1000.0] * 20 + [float(v) for v in tail]
    assert default_warmup(40) == 20
    assert average_samples(samples) == 10.5
    entry = summarize_samples(samples)
    assert (entry.count, entry.min_us, entry.max_us) == (18, 2.0, 19.0)
    expected_std = math.sqrt(sum((v - 10.5) ** 2 for v in range(2, 20)) / 18)
    assert entry.std_us == pytest.approx(expected_std, rel=1e-12)


def test_default_warmup_below_40_samples_is_half() -> None:
    assert [default_warmup(n) for n in (1, 2, 3, 10, 39, 41, 100)] == [0, 1, 1, 5, 19, 20, 20]
    # 10 samples: drop the first 5 (50, 40, 30, 20, 10), trim floor(5*0.0625)=0
    assert average_samples([50, 40, 30, 20, 10, 1, 2, 3, 4, 5]) == 3.0


def test_bad_samples_are_user_errors() -> None:
    with pytest.raises(UserError, match="finite"):
        average_samples([1.0, math.nan])
    with pytest.raises(UserError, match="finite"):
        average_samples([1.0, -2.0])
    with pytest.raises(UserError, match="leaves none"):
        average_samples([1.0, 2.0], warmup=2)
    with pytest.raises(UserError, match="no samples"):
        average_samples([])


def test_add_samples_combines_with_existing_entry() -> None:
    db = ProfileDB()
    db.add_samples("k", [4.0, 6.0], warmup=0, trim=0.0)
    entry = db.add_samples("k", [10.0, 10.0, 10.0, 10.0], warmup=0, trim=0.0)
    # count-weighted: (2*5 + 4*10) / 6
    assert entry.count == 6
    assert entry.mean_us == pytest.approx(50 / 6)
    assert (entry.min_us, entry.max_us) == (4.0, 10.0)
    # pooled population std of [4, 6, 10, 10, 10, 10]
    values = [4, 6, 10, 10, 10, 10]
    mean = sum(values) / 6
    assert entry.std_us == pytest.approx(math.sqrt(sum((v - mean) ** 2 for v in values) / 6))


# ---- JSON ----------------------------------------------------------------------------------------
def _sample_db() -> ProfileDB:
    return ProfileDB(
        {
            "comp.matmul;T<64x128xf32>,T<128x256xf32>,|T<64x256xf32>": ProfileEntry(
                12.25, 20, 0.5, 11.5, 13.75
            ),
            "comm.allreduce;T<1024xf32>,|T<1024xf32>": ProfileEntry(30.0, 10, 1.0, 28.0, 33.0),
        },
        {"device": "h100", "dtype": "f32", "world_size": 8, "date": "2025-01-02"},
    )


def test_json_round_trip_is_exact_and_sorted(tmp_path: Path) -> None:
    db = _sample_db()
    path = tmp_path / "p.json"
    db.save(path)
    text = path.read_text()
    doc = json.loads(text)
    assert doc["format"] == "lancet-profile"
    assert doc["version"] == 1
    assert list(doc["entries"]) == sorted(doc["entries"])
    assert doc["entries"]["comm.allreduce;T<1024xf32>,|T<1024xf32>"] == {
        "mean_us": 30.0,
        "count": 10,
        "std_us": 1.0,
        "min_us": 28.0,
        "max_us": 33.0,
    }
    again = ProfileDB.load(path)
    assert again.entries == db.entries
    assert again.metadata == db.metadata
    again.save(tmp_path / "q.json")
    assert (tmp_path / "q.json").read_text() == text


def test_minimal_entry_defaults(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(
        '{"format": "lancet-profile", "version": 1, "entries": {"a;|": {"mean_us": 5}}}'
    )
    entry = ProfileDB.load(path).entries["a;|"]
    assert entry == ProfileEntry(5.0, 1, 0.0, 5.0, 5.0)


def test_merge_is_count_weighted_and_keeps_disjoint_keys() -> None:
    a = ProfileDB({"x": ProfileEntry(10.0, 3, 0.0, 10.0, 10.0)}, {"device": "h100"})
    b = ProfileDB(
        {"x": ProfileEntry(20.0, 1, 0.0, 20.0, 20.0), "y": ProfileEntry(7.0)},
        {"device": "H100", "world_size": 4},
    )
    merged = a.merge(b)
    assert merged is a
    assert merged.entries["x"].mean_us == 12.5  # (3*10 + 1*20) / 4
    assert merged.entries["x"].count == 4
    assert merged.entries["x"].std_us == pytest.approx(math.sqrt(3 * 2.5**2 + 7.5**2) / 2)
    assert merged.entries["y"] == ProfileEntry(7.0)
    assert merged.metadata == {"device": "h100", "world_size": 4}


def test_merge_rejects_different_devices() -> None:
    a = ProfileDB({}, {"device": "h100"})
    with pytest.raises(UserError, match="different devices: h100 and a100"):
        a.merge(ProfileDB({}, {"device": "a100"}))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('{"mean_us": NaN}', "NaN is not a valid time"),
        ('{"mean_us": -1.0}', "mean_us must be finite and >= 0, got -1.0"),
        ('{"mean_us": 1.0, "count": 0}', "count must be an integer >= 1"),
        ('{"mean_us": 5.0, "min_us": 6.0}', "need min_us <= mean_us <= max_us"),
        ('{"mean_us": "fast"}', "mean_us must be a number"),
        ('{"count": 3}', "missing mean_us"),
        ('{"mean_us": 1.0, "median_us": 1.0}', "unknown field 'median_us'"),
    ],
)
def test_bad_entries_name_file_and_key(tmp_path: Path, entry: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(
        '{"format": "lancet-profile", "version": 1, "entries": {"comp.gelu;|": ' + entry + "}}"
    )
    with pytest.raises(UserError) as info:
        ProfileDB.load(path)
    text = str(info.value)
    assert text.startswith(str(path))
    assert message in text
    if "NaN" not in message:
        assert "'comp.gelu;|'" in text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"format": "other", "version": 1, "entries": {}}', "not a lancet profile"),
        (
            '{"format": "lancet-profile", "version": 2, "entries": {}}',
            "unsupported profile version 2",
        ),
        ('{"format": "lancet-profile", "version": 1, "entries": []}', "entries must be an object"),
        ('{"format": "lancet-profile", "version": 1,', "invalid JSON"),
    ],
)
def test_bad_documents(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "doc.json"
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        ProfileDB.load(path)


def test_missing_file_is_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        ProfileDB.load(tmp_path / "none.json")


# ---- Lancet .profile -----------------------------------------------------------------------------
def test_hand_built_lancet_profile() -> None:
    # N=2, keys sorted byte-wise, each NUL-terminated, then two uint64 times (little-endian)
    data = (
        struct.pack("<Q", 2)
        + b"raf_op_cublas_matmul;T<64x128xf32>,T<128x256xf32>,|T<64x256xf32>\0"
        + b"raf_op_gelu;T<8xf32>,|T<8xf32>\0"
        + struct.pack("<QQ", 57, 3)
    )
    times = parse_lancet_profile(data, "hand.profile")
    assert times == {
        "raf_op_cublas_matmul;T<64x128xf32>,T<128x256xf32>,|T<64x256xf32>": 57,
        "raf_op_gelu;T<8xf32>,|T<8xf32>": 3,
    }
    assert encode_lancet_profile(times) == data  # our writer produces the same bytes
    assert len(data) == 8 + sum(len(k) + 1 for k in times) + 8 * 2


def test_lancet_profile_round_trip_via_profiledb(tmp_path: Path) -> None:
    path = tmp_path / "x.profile"
    write_lancet_profile(path, {"b;|": 12.9, "a;|": 7.0, "ä;|": 1.0})
    assert read_lancet_profile(path) == {"a;|": 7, "b;|": 12, "ä;|": 1}  # truncated like Lancet
    db = ProfileDB.load(path)
    assert db.entries["b;|"] == ProfileEntry(12.0)
    db.save(tmp_path / "y.profile")
    assert (tmp_path / "y.profile").read_bytes() == path.read_bytes()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x01\x00", r"truncated Lancet profile \(2 bytes"),
        (struct.pack("<Q", 1000) + b"a\0" + bytes(8), "header says 1000 entries"),
        (struct.pack("<Q", 1) + b"abc" + b"\x01" * 8, "key #0 has no NUL terminator"),
        (struct.pack("<Q", 1) + b"a\0" + bytes(7), "truncated Lancet profile: expected 18"),
        (struct.pack("<Q", 1) + b"a\0" + bytes(9), "trailing bytes in Lancet profile"),
        (struct.pack("<Q", 2) + b"a\0a\0" + bytes(16), "duplicate key 'a'"),
    ],
)
def test_bad_lancet_profiles(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bad.profile"
    path.write_bytes(data)
    with pytest.raises(UserError, match=message) as info:
        ProfileDB.load(path)
    assert str(info.value).startswith(str(path))
