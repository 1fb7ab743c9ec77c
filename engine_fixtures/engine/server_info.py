"""The engine's effective configuration, read back from ``/server_info``.

SGLang resolves several caps inside the scheduler, so the top level of ``/server_info`` does not show
them: ``pp_max_micro_batch_size`` stays null there and the real value is in ``internal_states[0]`` (the
PP0/TP0 scheduler), next to ``effective_max_running_requests_per_dp``. The 0.5.16 layout
(``asdict(server_args)`` at the top) and the 0.5.20 / 0.5.23 layout (``resolved_dict()`` plus
``launch_command``; the internal state is ``resolved_server_args_dict()`` with the scheduler's overrides) use
the same flat key names, so one parser reads all three (samples reconstructed from each release's source:
perf_tests/sglang/releases/server_info_samples.py; the per-version envs check the key names against the
installed release's ``ServerArgs``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine_fixtures.errors import MeasurementError


def _int_or_none(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class EffectiveConfig:
    """What the server actually runs with. ``None`` means the server did not report the value."""

    version: str | None
    tp_size: int | None
    pp_size: int | None
    dp_size: int | None
    max_running_requests: int | None  # effective cap per DP rank (scheduler's value when reported)
    requested_max_running_requests: int | None  # the top-level (user) value, null when unset
    pp_max_micro_batch_size: int | None  # the scheduler's resolved value (auto or explicit)
    pp_async_batch_depth: int | None
    mm_feature_transport: str | None
    disable_radix_cache: bool | None
    enable_metrics: bool | None
    max_total_num_tokens: int | None
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def pp_loop_size(self) -> int | None:
        """Number of PP micro-batches: pp_size + pp_async_batch_depth."""
        if self.pp_size is None:
            return None
        return self.pp_size + (self.pp_async_batch_depth or 0)

    @classmethod
    def parse(cls, info: Mapping[str, Any]) -> EffectiveConfig:
        """Parse a ``/server_info`` JSON object (0.5.16, 0.5.20 or 0.5.23 layout)."""
        if not isinstance(info, Mapping):
            raise MeasurementError(
                f"/server_info returned {type(info).__name__}, not a JSON object; is the URL an SGLang server?"
            )
        states = info.get("internal_states") or []
        state: Mapping[str, Any] = states[0] if states and isinstance(states[0], Mapping) else {}

        def pick(name: str) -> Any:
            value = state.get(name)
            return info.get(name) if value is None else value

        eff_mrr = _int_or_none(state.get("effective_max_running_requests_per_dp"))
        if eff_mrr is None:
            eff_mrr = _int_or_none(state.get("max_running_requests"))
        return cls(
            version=info.get("version"),
            tp_size=_int_or_none(pick("tp_size")),
            pp_size=_int_or_none(pick("pp_size")),
            dp_size=_int_or_none(pick("dp_size")),
            max_running_requests=eff_mrr if eff_mrr is not None else _int_or_none(info.get("max_running_requests")),
            requested_max_running_requests=_int_or_none(info.get("max_running_requests")),
            pp_max_micro_batch_size=_int_or_none(pick("pp_max_micro_batch_size")),
            pp_async_batch_depth=_int_or_none(pick("pp_async_batch_depth")),
            mm_feature_transport=pick("mm_feature_transport"),
            disable_radix_cache=pick("disable_radix_cache"),
            enable_metrics=pick("enable_metrics"),
            max_total_num_tokens=_int_or_none(pick("max_total_num_tokens")),
            raw=dict(info),
        )


def http_json(
    url: str, timeout_s: float, method: str = "GET", body: Mapping[str, Any] | None = None
) -> tuple[int, Any]:
    """One HTTP request with a timeout; returns (status, parsed JSON or text). Raises OSError on no answer."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"} if data else {}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            status, text = resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, text


def fetch_server_info(base_url: str, timeout_s: float = 10.0) -> EffectiveConfig:
    """GET ``/server_info`` (falling back to the deprecated ``/get_server_info``) and parse it."""
    last = ""
    for path in ("/server_info", "/get_server_info"):
        try:
            status, payload = http_json(base_url + path, timeout_s)
        except OSError as exc:
            last = f"{path}: {exc}"
            continue
        if status == 200:
            return EffectiveConfig.parse(payload)
        last = f"{path}: HTTP {status}"
    raise MeasurementError(
        f"cannot read the engine's effective configuration from {base_url} ({last}); "
        "check that the server is up and is SGLang >= 0.5.16"
    )
