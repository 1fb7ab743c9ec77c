"""Summary statistics of one metric's per-repeat samples (what a baseline stores next to raw samples)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Summary:
    """``cv`` = stdev / |mean| (sample stdev, n-1); 0 for one sample; inf if mean is 0 but spread isn't.

    ``to_json`` writes a non-finite cv as ``null`` (strict JSON has no Infinity)."""

    n: int
    median: float
    mean: float
    stdev: float
    cv: float
    min: float
    max: float

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cv"] = self.cv if math.isfinite(self.cv) else None
        return data


def summarize(values: Sequence[float]) -> Summary:
    """Summary of a non-empty sample; ``ValueError`` on an empty one (never a fake 0)."""
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("cannot summarise an empty sample")
    mean = statistics.fmean(vals)
    stdev = statistics.stdev(vals) if len(vals) > 1 else 0.0
    if stdev == 0.0:
        cv = 0.0
    elif mean == 0.0:
        cv = math.inf
    else:
        cv = stdev / abs(mean)
    return Summary(len(vals), statistics.median(vals), mean, stdev, cv, min(vals), max(vals))
