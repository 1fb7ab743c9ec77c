"""Config lint: find caps that silently hold concurrency below what the load asks for.

The seed case: PP=8 with ``--pp-max-micro-batch-size`` unset resolves to ``max_running_requests // pp``
(64 // 8 = 8) per micro-batch, below a client concurrency of 32; the server queues the rest and looks
slow for a reason no flag on the command line shows. The lint runs on the *effective* configuration read
back from ``/server_info``, before any load starts.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from engine_fixtures.engine.server_info import EffectiveConfig
from engine_fixtures.errors import ConfigError


class HiddenCapWarning(UserWarning):
    """An effective cap is below the requested concurrency (reported, not raised, with ``strict=False``)."""


@dataclass(frozen=True)
class CapFinding:
    """One cap below the requested concurrency, with the flag that lifts it."""

    cap: str
    value: int
    concurrency: int
    in_flight_limit: int  # requests that can really run at once under this cap
    fix: str

    @property
    def message(self) -> str:
        return (
            f"hidden cap: {self.cap}={self.value} lets at most {self.in_flight_limit} requests run at once, "
            f"below the requested concurrency {self.concurrency}; the rest queue. Fix: {self.fix}"
        )


def find_hidden_caps(cfg: EffectiveConfig, concurrency: int) -> tuple[CapFinding, ...]:
    """Every effective cap that keeps fewer than ``concurrency`` requests running."""
    if concurrency < 1:
        raise ConfigError(f"concurrency must be >= 1, got {concurrency}")
    found: list[CapFinding] = []
    mrr = cfg.max_running_requests
    if mrr is not None and mrr < concurrency:
        found.append(
            CapFinding(
                "max_running_requests",
                mrr,
                concurrency,
                mrr,
                f"launch with --max-running-requests {concurrency} or more (EngineSpec.max_running_requests)",
            )
        )
    pp = cfg.pp_size or 1
    mb = cfg.pp_max_micro_batch_size
    # Each micro-batch holds at most mb requests and a stage advances one micro-batch per step, so the
    # batch a stage runs is capped at mb: the cap the seed hit (64 // 8 = 8 below concurrency 32).
    if pp > 1 and mb is not None and mb < concurrency:
        need = concurrency
        found.append(
            CapFinding(
                "pp_max_micro_batch_size",
                mb,
                concurrency,
                mb,
                f"launch with --pp-max-micro-batch-size {need} "
                f"(auto = max_running_requests // pp_size = "
                f"{mrr if mrr is not None else '?'} // {pp}); "
                "EngineSpec(pp_max_micro_batch_size=N)",
            )
        )
    return tuple(found)


def check_caps(cfg: EffectiveConfig, concurrency: int, *, strict: bool = True) -> tuple[CapFinding, ...]:
    """Raise ConfigError (``strict``) or emit HiddenCapWarning for each hidden cap; return the findings."""
    found = find_hidden_caps(cfg, concurrency)
    if found and strict:
        raise ConfigError("; ".join(f.message for f in found))
    for f in found:
        warnings.warn(f.message, HiddenCapWarning, stacklevel=2)
    return found
