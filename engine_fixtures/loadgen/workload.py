"""The workload a load run sends: a frozen, validated description (no I/O here)."""

from __future__ import annotations

from dataclasses import dataclass

from engine_fixtures.errors import ConfigError

IMAGE_CONTENTS = ("noise", "repeated")
IMAGE_FORMATS = ("png", "jpeg")
HTTP_CLIENTS = ("fast", "aiohttp")
# Pre-built request bodies live in the client process's memory; refuse workloads that would not fit.
MAX_PAYLOAD_BYTES = 4 * 1024**3


@dataclass(frozen=True)
class WorkloadSpec:
    """One load run. Exactly one of ``concurrency`` (closed loop) or ``request_rate`` (open loop,
    Poisson arrivals drawn from ``seed``) is set. ``warmup_requests`` run first and are never
    measured. ``output_tokens`` is exact: ``max_tokens`` + ``ignore_eos`` + ``temperature=0``, and a
    response with any other count is an error. Thresholds say when the client, not the server, was
    the bottleneck (see ``LoadReport.client_bound``). ``http_client``: ``"fast"`` (lean HTTP/1.1
    keep-alive client on httptools, plain ``http://`` only) or ``"aiohttp"`` (slower per request,
    but TLS, redirects and close-delimited bodies work)."""

    num_requests: int
    concurrency: int | None = None
    request_rate: float | None = None
    warmup_requests: int = 0
    images_per_request: int = 1
    image_resolution: tuple[int, int] = (448, 448)
    image_content: str = "noise"
    image_format: str = "png"
    input_tokens: int = 64
    output_tokens: int = 32
    seed: int = 0
    model: str = "default"
    request_timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    http_client: str = "fast"
    # Client-keeps-up thresholds.
    min_achieved_fraction: float = 0.95
    max_scheduling_delay_p99_ms: float = 10.0
    max_client_cpu_fraction: float = 0.95

    def __post_init__(self) -> None:
        object.__setattr__(self, "image_resolution", tuple(self.image_resolution))
        _check_int("num_requests", self.num_requests, 1)
        _check_int("warmup_requests", self.warmup_requests, 0)
        _check_int("images_per_request", self.images_per_request, 0)
        _check_int("input_tokens", self.input_tokens, 0)
        _check_int("output_tokens", self.output_tokens, 1)
        _check_int("seed", self.seed, 0)
        if (self.concurrency is None) == (self.request_rate is None):
            raise ConfigError(
                f"concurrency={self.concurrency!r}, request_rate={self.request_rate!r}: set exactly one "
                "(concurrency for a closed loop, request_rate in requests/s for an open Poisson loop)"
            )
        if self.concurrency is not None:
            _check_int("concurrency", self.concurrency, 1)
            if self.concurrency > self.total_requests:
                raise ConfigError(
                    f"concurrency={self.concurrency}: more than num_requests + warmup_requests = "
                    f"{self.total_requests}, so it could never be reached; send more requests or lower it"
                )
        if self.request_rate is not None:
            _check_positive("request_rate", self.request_rate)
        res = self.image_resolution
        if len(res) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in res):
            raise ConfigError(f"image_resolution={res!r}: must be (width, height), two integers >= 1")
        if self.image_content not in IMAGE_CONTENTS:
            raise ConfigError(f"image_content={self.image_content!r}: must be one of {', '.join(IMAGE_CONTENTS)}")
        if self.image_format not in IMAGE_FORMATS:
            raise ConfigError(f"image_format={self.image_format!r}: must be one of {', '.join(IMAGE_FORMATS)}")
        if self.http_client not in HTTP_CLIENTS:
            raise ConfigError(
                f"http_client={self.http_client!r}: must be one of {', '.join(HTTP_CLIENTS)} "
                "('aiohttp' for https:// or servers the lean 'fast' client cannot talk to)"
            )
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"model={self.model!r}: must be a non-empty model name (use 'default' for SGLang)")
        for name in ("request_timeout_s", "connect_timeout_s", "max_scheduling_delay_p99_ms"):
            _check_positive(name, getattr(self, name))
        for name in ("min_achieved_fraction", "max_client_cpu_fraction"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ConfigError(f"{name}={value!r}: must be in (0, 1]")
        estimate = self.estimated_payload_bytes()
        if estimate > MAX_PAYLOAD_BYTES:
            raise ConfigError(
                f"num_requests={self.num_requests}, image_resolution={res}: the pre-built request bodies would "
                f"take ~{estimate / 1024**3:.1f} GiB (limit {MAX_PAYLOAD_BYTES / 1024**3:.0f} GiB); use fewer "
                "requests, a smaller resolution, or image_content='repeated'"
            )

    @property
    def closed_loop(self) -> bool:
        return self.concurrency is not None

    @property
    def total_requests(self) -> int:
        return self.warmup_requests + self.num_requests

    def estimated_payload_bytes(self) -> int:
        """Upper bound of the body bytes held in memory (noise images do not compress: base64 of RGB)."""
        w, h = self.image_resolution
        per_image = (w * h * 3 * 4) // 3 + 1024
        text = self.total_requests * (self.input_tokens * 8 + 512)
        # A repeated image is still copied into every body, so it counts once per request too.
        return self.total_requests * self.images_per_request * per_image + text

    def describe(self) -> str:
        """Short human id, e.g. ``c=16 n=500 img=1x448x448/noise/png in=64 out=32``."""
        load = f"c={self.concurrency}" if self.closed_loop else f"rate={self.request_rate:g}/s"
        w, h = self.image_resolution
        img = f"img={self.images_per_request}x{w}x{h}/{self.image_content}/{self.image_format}"
        return f"{load} n={self.num_requests} {img} in={self.input_tokens} out={self.output_tokens}"


def _check_int(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name}={value!r}: must be an integer >= {minimum}")
    if value < minimum:
        raise ConfigError(f"{name}={value}: must be >= {minimum}")


def _check_positive(name: str, value: object) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ConfigError(f"{name}={value!r}: must be a number > 0")
