"""Scrape SGLang's Prometheus ``/metrics`` (needs ``--enable-metrics``) with prometheus_client's parser.

Gauges are summed over the scheduler label sets (one per PP stage / DP rank); the TTFT histogram is kept
as cumulative buckets so two scrapes can be subtracted to get the window's distribution.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from engine_fixtures.errors import ConfigError, MeasurementError

RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"
TTFT = "sglang:time_to_first_token_seconds"
REQUESTS_TOTAL = "sglang:num_requests_total"
GEN_TOKENS_TOTAL = "sglang:generation_tokens_total"


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets (upper bound -> count), plus sum and count."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def minus(self, earlier: Histogram) -> Histogram:
        before = dict(earlier.buckets)
        return Histogram(
            tuple((le, c - before.get(le, 0.0)) for le, c in self.buckets),
            self.sum - earlier.sum,
            self.count - earlier.count,
        )

    def quantile(self, q: float) -> float:
        """Upper bound of the bucket holding quantile ``q`` (Prometheus' histogram_quantile without
        interpolation). Raises MeasurementError on an empty window."""
        if self.count <= 0:
            raise MeasurementError(
                "the TTFT histogram has no observations in this window: no request "
                "completed its first token; check the load and the engine log"
            )
        target = q * self.count
        for le, c in self.buckets:
            if c >= target:
                return le
        return float("inf")


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape: samples by name, each a tuple of (labels, value)."""

    samples: Mapping[str, tuple[tuple[Mapping[str, str], float], ...]] = field(default_factory=dict)

    def total(self, name: str) -> float:
        """Sum over all label sets. Raises MeasurementError if the server does not export ``name``."""
        if name not in self.samples:
            raise MeasurementError(
                f"metric {name} is not exported by the engine; start it with "
                "--enable-metrics (EngineSpec.enable_metrics=True) and send one request"
            )
        return sum(v for _, v in self.samples[name])

    def has(self, name: str) -> bool:
        return name in self.samples

    def histogram(self, base: str) -> Histogram:
        """The histogram ``base`` summed over label sets."""
        buckets: dict[float, float] = {}
        for labels, value in self.samples.get(base + "_bucket", ()):
            le = float(labels.get("le", "inf"))
            buckets[le] = buckets.get(le, 0.0) + value
        if not buckets:
            raise MeasurementError(f"histogram {base} is not exported by the engine; start it with --enable-metrics")
        return Histogram(tuple(sorted(buckets.items())), self.total(base + "_sum"), self.total(base + "_count"))

    @classmethod
    def parse(cls, text: str) -> MetricsSnapshot:
        out: dict[str, list[tuple[Mapping[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
        return cls({k: tuple(v) for k, v in out.items()})


def scrape(base_url: str, timeout_s: float = 10.0) -> MetricsSnapshot:
    """GET ``/metrics`` with a timeout. A 404 means metrics are off: the error names the flag."""
    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=timeout_s) as resp:
            text = resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise ConfigError(
                f"{base_url}/metrics answered 404: the engine runs without --enable-metrics; "
                "set EngineSpec(enable_metrics=True)"
            ) from None
        raise MeasurementError(f"{base_url}/metrics answered HTTP {exc.code}") from None
    except OSError as exc:
        raise MeasurementError(f"cannot scrape {base_url}/metrics: {exc}; is the engine still up?") from None
    return MetricsSnapshot.parse(text)
