"""Running requests as the scheduler reports them: ``sglang:num_running_reqs`` polled from ``/metrics``.

``RunningRequestsSampler(url, interval_s)`` scrapes the engine's Prometheus endpoint on a ``Ticker`` thread
(5 Hz by default, each scrape with a timeout) and summarises the gauge over the window: ``running.max`` and
``running.mean`` of the largest value any scheduler reports at a scrape (TP ranks report the same batch, and
with pipeline parallelism each scheduler reports one micro-batch, which is exactly what the PP cap limits;
a sum would double-count both). ``available()`` says why not when the engine exports no such gauge (started
without ``--enable-metrics``).
"""

from __future__ import annotations

import time
from types import TracebackType

import numpy as np

from engine_fixtures.engine.prometheus import scrape
from engine_fixtures.errors import ConfigError, MeasurementError
from engine_fixtures.sampling.base import Ticker, require_closed
from engine_fixtures.sampling.series import Gauge

GAUGE = "sglang:num_running_reqs"
SCRAPE_TIMEOUT_S = 2.0


class RunningRequestsSampler:
    name = "running-requests"

    def __init__(self, url: str, interval_s: float = 0.2) -> None:
        self.url = url
        self._values: list[float] = []
        self.series = Gauge()
        self._ticker = Ticker(self.name, self._tick, interval_s)
        self._closed = False

    def available(self) -> str | None:
        try:
            snap = scrape(self.url, SCRAPE_TIMEOUT_S)
        except (ConfigError, MeasurementError) as exc:
            return str(exc)
        return None if snap.has(GAUGE) else f"{self.url}/metrics exports no {GAUGE}"

    def _tick(self) -> None:
        snap = scrape(self.url, SCRAPE_TIMEOUT_S)
        snap.total(GAUGE)  # raises, naming the fix, when the gauge is not exported
        value = max(v for _labels, v in snap.samples[GAUGE])
        self._values.append(value)
        self.series.add(time.monotonic(), value)

    def __enter__(self) -> RunningRequestsSampler:
        self._ticker.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._ticker.stop()
        self._closed = True

    def cut(self, t0: float, t1: float) -> dict[str, float]:
        require_closed(self.name, self._closed)
        v = self.series.between(t0, t1, "running-requests")
        return {"running.max": float(v.max()), "running.mean": float(v.mean())}

    def summary(self) -> dict[str, float]:
        require_closed(self.name, self._closed)
        if not self._values:
            raise MeasurementError(f"sampler {self.name!r}: no scrape completed in the window; lengthen the window")
        v = np.asarray(self._values)
        return {"running.max": float(v.max()), "running.mean": float(v.mean())}
