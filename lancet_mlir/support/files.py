"""File helpers: atomic writes (never a half-written output), reads with one-line errors,
and the data files shipped in the package."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from lancet_mlir.support.errors import UserError


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary file name next to `path`; rename it to `path` on success.

    For writers that want a file name (matplotlib, numpy). On any failure the temporary
    file is removed and `path` is left as it was.
    """
    target = os.fspath(path)
    if os.path.islink(target) or (os.path.exists(target) and not os.path.isfile(target)):
        # /dev/null, /dev/stdout, a FIFO or a symlink: renaming over it would replace the
        # device or the link itself, so write through it
        yield target
        return
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise UserError(f"{target}: folder does not exist")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".lancet-", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs follow the umask
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_output_folder(path: str | os.PathLike[str]) -> None:
    """UserError unless the folder that will hold `path` exists: tools call this before
    long work (measuring, building a model), not only when they finally write."""
    target = os.fspath(path)
    if os.path.isdir(target):
        raise UserError(f"{target}: is a folder")
    if not os.path.isdir(os.path.dirname(os.path.abspath(target))):
        raise UserError(f"{target}: folder does not exist")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and a rename."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """Read a whole file, turning OS errors into a UserError naming the file."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise UserError(f"{os.fspath(path)}: no such file") from None
    except OSError as exc:
        raise UserError(f"{os.fspath(path)}: {exc.strerror or exc}") from None


def read_text(path: str | os.PathLike[str]) -> str:
    """Read a UTF-8 text file; a UserError names the file on any failure."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{os.fspath(path)}: not UTF-8 text (byte {exc.start})") from None


def data_path(name: str) -> Path:
    """Path of a data file shipped in `lancet_mlir/data/`."""
    return Path(str(resources.files("lancet_mlir").joinpath("data", name)))
