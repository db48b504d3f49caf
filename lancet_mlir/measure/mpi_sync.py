"""Cross-rank profile averaging (Lancet's SynchronizeProfile, lancet-algorithms.md §4.3).

Every rank contributes its ProfileDB and every rank ends with the identical combined profile,
so that all ranks take identical scheduling decisions. Entries of one key are combined in rank
order, count-weighted (`ProfileEntry.combined`), which equals Lancet's plain mean over ranks
when every rank measured the same number of samples.

Failure is decided collectively: each rank first shares what it has (device, key set, or the
error it hit loading its file) with *all* ranks, and every rank evaluates the same check on
the same data, so a missing key or a device mismatch raises the same UserError on every rank
and no rank is left waiting in a collective.
"""

from __future__ import annotations

from typing import Any

from lancet_mlir.cost.devices import canonical_device_name
from lancet_mlir.cost.profile_db import ProfileDB, ProfileEntry
from lancet_mlir.support.errors import AgreedError, UserError
from lancet_mlir.support.mpi_job import fault_point


def raise_if_any_failed(comm: Any, local_error: str | None) -> None:
    """Share each rank's error (or None) with all ranks; raise the first one on every rank."""
    errors = comm.allgather(local_error)
    failed = [(rank, msg) for rank, msg in enumerate(errors) if msg is not None]
    if failed:
        rank, msg = failed[0]
        more = f" (and {len(failed) - 1} more rank(s) failed)" if len(failed) > 1 else ""
        raise AgreedError(f"rank {rank}: {msg}{more}")


def _consistency_error(summaries: list[tuple[str | None, list[str]]]) -> str | None:
    """The problem with the ranks' (device, sorted keys), or None when they agree."""
    devices = [(rank, canonical_device_name(str(d))) for rank, (d, _) in enumerate(summaries) if d]
    distinct = sorted({d for _, d in devices})
    if len(distinct) > 1:
        listing = ", ".join(f"rank {r}: {d}" for r, d in devices)
        return f"profiles were measured on different devices ({listing})"
    key_sets = [set(keys) for _, keys in summaries]
    union = sorted(set().union(*key_sets))
    for key in union:
        missing = [rank for rank, keys in enumerate(key_sets) if key not in keys]
        if missing:
            total = sum(1 for k in union if any(k not in keys for keys in key_sets))
            ranks = ", ".join(str(r) for r in missing)
            return (
                f"profile key {key!r} is missing on rank(s) {ranks} "
                f"({total} key(s) not measured on every rank)"
            )
    return None


def sync_profile(db: ProfileDB, comm: Any) -> ProfileDB:
    """Combine the ranks' profiles over the mpi4py communicator `comm`; every rank returns
    the identical result (metadata: rank 0's, plus `synced_ranks`)."""
    keys = sorted(db.entries)
    summaries = comm.allgather((db.metadata.get("device"), keys))
    problem = _consistency_error(summaries)
    if problem is not None:
        raise AgreedError(problem)  # every rank evaluated the same data
    rows = [
        (e.mean_us, e.count, e.std_us, e.min_us, e.max_us) for e in (db.entries[k] for k in keys)
    ]
    all_rows = comm.allgather(rows)
    merged: dict[str, ProfileEntry] = {}
    for n, key in enumerate(keys):
        entry = ProfileEntry(*all_rows[0][n])
        for rank_rows in all_rows[1:]:
            entry = entry.combined(ProfileEntry(*rank_rows[n]))
        merged[key] = entry
    metadata = dict(comm.bcast(db.metadata, root=0))
    metadata["synced_ranks"] = comm.Get_size()
    return ProfileDB(merged, metadata)


def load_and_sync(path_pattern: str, comm: Any) -> ProfileDB:
    """Each rank loads `path_pattern` with `{rank}` replaced by its rank, then `sync_profile`;
    a file that fails to load on any rank fails every rank."""
    path = path_pattern.replace("{rank}", str(comm.Get_rank()))
    db: ProfileDB | None = None
    error: str | None = None
    try:
        fault_point("read")
        db = ProfileDB.load(path)
    except UserError as exc:
        error = str(exc)
    raise_if_any_failed(comm, error)
    assert db is not None
    return sync_profile(db, comm)
