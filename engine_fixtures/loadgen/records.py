"""Per-request records and the error that fails a load run (plain data, no I/O)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from engine_fixtures.errors import MeasurementError


@dataclass(frozen=True)
class RequestError:
    """What went wrong with one request, with enough context to find it: the request index, the HTTP
    status (None when no response), a kind (``connect``, ``http_status``, ``stream_cut``,
    ``malformed_sse``, ``server_error``, ``no_done``, ``timeout``, ``token_count``, ``no_tokens``,
    ``client``), a message and a snippet of the body."""

    index: int
    status: int | None
    kind: str
    message: str
    snippet: str = ""

    def __str__(self) -> str:
        status = f" HTTP {self.status}" if self.status is not None else ""
        snippet = f" body: {self.snippet!r}" if self.snippet else ""
        return f"request #{self.index}{status} [{self.kind}] {self.message}{snippet}"


@dataclass(frozen=True)
class RequestRecord:
    """One request; times are seconds since the run's clock origin. ``intended_s`` is when it should
    have been sent (closed loop: when its slot freed, as this client saw it; open loop: its scheduled
    arrival), ``sent_s`` when it was handed to the HTTP client (TTFT and e2e start there, as in
    sglang.bench_serving), ``token_times_s`` when each content chunk was read.
    ``output_tokens`` comes from the usage chunk when present (``tokens_from='usage'``), else it is
    the content chunk count (``'chunks'``)."""

    index: int
    warmup: bool
    intended_s: float
    sent_s: float
    end_s: float
    token_times_s: tuple[float, ...]
    output_tokens: int
    tokens_from: str
    error: RequestError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft_s(self) -> float:
        """Send to first content chunk."""
        return self.token_times_s[0] - self.sent_s

    @property
    def e2e_s(self) -> float:
        return self.end_s - self.sent_s

    @property
    def tpot_s(self) -> float | None:
        """``(e2e - ttft) / (n - 1)``; None for a single-token response."""
        if self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def itl_s(self) -> tuple[float, ...]:
        """Gaps between consecutive content chunks."""
        times = self.token_times_s
        return tuple(b - a for a, b in itertools.pairwise(times))

    @property
    def scheduling_delay_s(self) -> float:
        return self.sent_s - self.intended_s


class LoadError(MeasurementError):
    """A load run had failed requests. ``errors`` holds every one (with index, status, body snippet);
    ``report`` the partial report when one could be built. Never reported as a latency."""

    def __init__(self, message: str, errors: tuple[RequestError, ...] = (), report: object = None) -> None:
        super().__init__(message)
        self.errors = errors
        self.report = report

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.errors, self.report))
