"""Progress of a load run with rich, polled from a shared counter by a thread in the parent process,
so the client process pays only one integer increment per request."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

REFRESH_S = 0.25


class ProgressDisplay:
    """Context manager; when ``enabled`` shows ``counter.value`` of ``total`` requests done, refreshed
    at most every ``REFRESH_S`` seconds. Disabled: does nothing."""

    def __init__(self, counter: Any, total: int, description: str, *, enabled: bool) -> None:
        self._counter = counter
        self._total = total
        self._description = description
        self._enabled = enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._progress: Progress | None = None

    def __enter__(self) -> ProgressDisplay:
        if not self._enabled:
            return self
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            refresh_per_second=1 / REFRESH_S,
        )
        self._progress.start()
        task = self._progress.add_task(self._description, total=self._total)
        progress = self._progress

        def poll() -> None:
            while not self._stop.wait(REFRESH_S):
                progress.update(task, completed=self._counter.value)
            progress.update(task, completed=self._counter.value)

        self._thread = threading.Thread(target=poll, name="loadgen-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._progress is not None:
            self._progress.stop()
