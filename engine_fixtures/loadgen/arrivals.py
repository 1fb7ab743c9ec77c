"""The open loop's arrival schedule, shared by both HTTP clients (``fast_client``, ``aiohttp_client``)."""

from __future__ import annotations

import numpy as np


def poisson_arrivals(rate: float, count: int, seed: int) -> np.ndarray:
    """Seeded arrival offsets in seconds (exponential gaps, first arrival at 0)."""
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=count)
    gaps[0] = 0.0
    return np.cumsum(gaps)
