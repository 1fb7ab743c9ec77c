"""One sampler interface, a periodic sampling thread, and a set of samplers entered together.

A sampler measures one window: ``__enter__`` opens it (reads the baseline, starts its thread),
``__exit__`` closes it (takes a last sample, stops the thread), ``summary()`` is read after the window
closed and returns flat metric names (``cpu.scheduler.cores``). ``available()`` is a static check that
returns ``None`` when the sampler can run, else the reason as a fact ("NVML not available: ...");
an unavailable sampler is skipped and its reason recorded, it never produces made-up numbers.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Protocol, runtime_checkable

from engine_fixtures.errors import ConfigError, MeasurementError


@runtime_checkable
class Sampler(Protocol):
    """What every sampler provides (see the module docstring for the contract)."""

    name: str

    def available(self) -> str | None: ...

    def __enter__(self) -> Sampler: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def summary(self) -> dict[str, float]: ...


class Ticker:
    """Calls ``tick()`` every ``interval_s`` (fixed rate) on a daemon thread until ``stop()``.

    Waits with ``threading.Event.wait`` so ``stop()`` returns within one tick. The thread's own CPU
    time (``time.thread_time`` inside the thread) is kept in ``self_cpu_s``: the sampler's overhead.
    An exception raised by ``tick()`` ends the thread and is re-raised by ``stop()`` as a
    ``MeasurementError``, so a broken sampler never yields a partial summary silently.
    """

    def __init__(self, name: str, tick: Callable[[], None], interval_s: float) -> None:
        if not interval_s > 0:
            raise ConfigError(f"sampler {name!r}: interval_s must be > 0 seconds, got {interval_s!r}")
        self.name = name
        self.interval_s = interval_s
        self.ticks = 0
        self.self_cpu_s = 0.0
        self._tick = tick
        self._stop = threading.Event()
        self._ticked = threading.Condition()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"sampler-{name}", daemon=True)

    def start(self) -> None:
        if self._thread.ident is not None:
            raise ConfigError(
                f"sampler {self.name!r} measures one window only; create a new sampler per window"
            )
        self._thread.start()

    def _run(self) -> None:
        cpu0 = time.thread_time()
        start = time.monotonic()
        try:
            while True:
                next_at = start + (self.ticks + 1) * self.interval_s
                if self._stop.wait(max(0.0, next_at - time.monotonic())):
                    return
                self._tick()
                with self._ticked:
                    self.ticks += 1
                    self._ticked.notify_all()
        except BaseException as exc:
            self._error = exc
        finally:
            self.self_cpu_s = time.thread_time() - cpu0
            with self._ticked:
                self._ticked.notify_all()

    def wait_ticks(self, n: int, timeout_s: float) -> bool:
        """Block until ``n`` ticks completed (True), or the thread ended / ``timeout_s`` passed (False)."""
        with self._ticked:
            return self._ticked.wait_for(
                lambda: self.ticks >= n or not self._thread.is_alive(), timeout=timeout_s
            ) and self.ticks >= n

    def stop(self, join_timeout_s: float = 10.0) -> None:
        """Stop the thread; raise ``MeasurementError`` if it failed or does not stop in time."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=join_timeout_s)
            if self._thread.is_alive():
                raise MeasurementError(
                    f"sampler {self.name!r}: its thread did not stop within {join_timeout_s:g} s (a read "
                    "is hanging); check the device/driver it reads, or raise the sampling interval"
                )
        if self._error is not None:
            raise MeasurementError(
                f"sampler {self.name!r} failed while sampling: {self._error!r}; its metrics are not reported"
            ) from self._error


def require_closed(name: str, closed: bool, failure: str | None = None) -> None:
    """Raise unless the sampler's window was opened and closed without a failure (summary() reads only
    a window that completed)."""
    if failure is not None:
        raise MeasurementError(f"sampler {name!r} failed during its window ({failure}); it has no summary")
    if not closed:
        raise MeasurementError(
            f"sampler {name!r}: summary() was called before its window closed; use the sampler as a "
            "context manager (`with sampler:`) and read summary() after the block"
        )


class SamplerSet:
    """Enters the available samplers together (``contextlib.ExitStack``) and merges their summaries.

    ``unavailable`` maps the name of each skipped sampler to its reason; ``active`` lists the ones
    entered. Names must be unique, and so must the metric names of the merged summary.
    """

    def __init__(self, samplers: Iterable[Sampler]) -> None:
        self.samplers: tuple[Sampler, ...] = tuple(samplers)
        names = [s.name for s in self.samplers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(
                f"duplicate sampler names {dupes}: give each sampler in a SamplerSet its own name"
            )
        self.unavailable: dict[str, str] = {}
        self.active: tuple[Sampler, ...] = ()
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> SamplerSet:
        self.unavailable = {}
        active: list[Sampler] = []
        with contextlib.ExitStack() as stack:
            for sampler in self.samplers:
                reason = sampler.available()
                if reason is not None:
                    self.unavailable[sampler.name] = reason
                    continue
                stack.enter_context(sampler)
                active.append(sampler)
            self._stack = stack.pop_all()
        self.active = tuple(active)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.__exit__(exc_type, exc, tb)

    def summary(self) -> dict[str, float]:
        """All active samplers' metrics in one flat dict."""
        merged: dict[str, float] = {}
        for sampler in self.active:
            for key, value in sampler.summary().items():
                if key in merged:
                    raise MeasurementError(
                        f"metric {key!r} is reported by two samplers; give them distinct roles or names"
                    )
                merged[key] = value
        return merged


class TickedWindow:
    """The end of a ticking sampler's window, shared by the CPU and GPU samplers: stop the ticker, take the
    last reading, remember a failure (so ``summary()`` refuses numbers from a broken window), and always run
    the sampler's own cleanup and mark the window closed."""

    _ticker: Ticker
    _failure: str | None
    _closed: bool

    def _close_window(self, last_reading: Callable[[], None], cleanup: Callable[[], None]) -> None:
        try:
            self._ticker.stop()
            last_reading()
        except BaseException as err:
            self._failure = repr(err)
            raise
        finally:
            cleanup()
            self._closed = True
