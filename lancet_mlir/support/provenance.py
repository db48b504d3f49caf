"""What a result was made with: tool versions and content hashes of input files.

Reports carry these so that two reports can be told apart (or recognised as the same run)
without the files at hand: the versions of lancet-mlir and xDSL, and the sha256 of every
profile and comm table the cost model read.
"""

from __future__ import annotations

import hashlib
import os
from importlib import metadata


def lancet_mlir_version() -> str:
    """The installed lancet-mlir version ("unknown" when run from an uninstalled tree)."""
    try:
        return metadata.version("lancet-mlir")
    except metadata.PackageNotFoundError:
        return "unknown"


def xdsl_version() -> str:
    """The xDSL version lancet-mlir runs on."""
    try:
        return metadata.version("xdsl")
    except metadata.PackageNotFoundError:
        return "unknown"


def file_sha256(path: str | os.PathLike[str]) -> str:
    """`sha256:<hex>` of a file's bytes (read in blocks; big comm tables are fine)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def describe_files(paths: list[str] | tuple[str, ...]) -> list[dict[str, str]]:
    """[{path, sha256}] for each file, in the given order."""
    return [{"path": p, "sha256": file_sha256(p)} for p in paths]
