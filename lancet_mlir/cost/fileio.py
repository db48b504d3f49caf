"""File helpers of the profile layer (kept as an import path; they live in lancet_mlir.support)."""

from lancet_mlir.support.files import data_path, read_bytes, read_text, write_atomic

__all__ = ["data_path", "read_bytes", "read_text", "write_atomic"]
