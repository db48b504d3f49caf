"""Progress of long work on stderr: a rich progress bar when stderr is a terminal.

In a pipe or a log file nothing is drawn while the work runs (no bar frames in logs); the
caller prints one summary line when it is done.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import IO, Any


class ProgressBar:
    """A context manager: `update(done, total, text)` moves a transient rich bar on a
    terminal and does nothing otherwise."""

    def __init__(self, description: str, total: int, stream: IO[str] | None = None) -> None:
        self.description = description
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.live = _is_terminal(self.stream)
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> ProgressBar:
        if not self.live:
            return self
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console(file=self.stream, force_terminal=True)
        self._bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("{task.fields[item]}"),
            console=console, transient=True,
        )  # fmt: skip
        self._bar.start()
        self._task = self._bar.add_task(self.description, total=self.total, item="")
        return self

    def update(self, done: int, total: int | None = None, item: str = "") -> None:
        """Show `done` of `total` units, the current `item` beside the bar."""
        if self._bar is None:
            return
        self._bar.update(self._task, completed=done, total=total or self.total,
                         item=item[:60], refresh=True)  # fmt: skip

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False
