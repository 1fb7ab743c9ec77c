"""Noise of one quantity measured in several independent runs, split into within-run and between-run parts.

A *run* is one independent measurement (its own process, engine start and time); a *window* is one sample
inside a run (a load window, a mechanism round). Windows of one run share that run's level: on the H200 the
buffer arm's req/s read 31.7, 34.6, 35.9 and 30.3 in four runs while each run's windows agreed within 3-7 %.
A gate that sees only the windows mistakes that level shift for a regression, so both parts are estimated.

Model (one-way random effects on the judged scale: log for positive ratio-like metrics, identity otherwise)::

    x[k, i] = mu + b[k] + e[k, i],   b ~ N(0, between_sd^2),   e ~ N(0, within_sd^2)

From K runs with n_k windows: ``within_sd^2`` is the pooled variance inside runs (df = sum(n_k - 1)) and
``run_sd^2`` the variance of the K run means (df = K - 1). A new run of m windows differs from the pooled
level ``mean(run means)`` by a prediction error with variance

    se^2 = (1 + 1/K) run_sd^2 + new_within_sd^2 / m - within_sd^2 mean(1/n_k)

(for m = n and a new run as noisy as the pooled ones this is the textbook prediction interval of one more run
mean), floored at the pure-within value ``new_within_sd^2/m + within_sd^2 mean(1/n_k)/K`` when the run means
agree better than their windows predict (between-run variance estimated as zero). Degrees of freedom:
Welch-Satterthwaite over the two terms, and never more than K - 1 when the floor is used: an estimate of zero
between-run variance from K run means is itself known only to K - 1 degrees of freedom (using the windows' df
there gave a K=3 pool 1.2 % false alarms at a nominal 0.33 %, and 8-17 % inside the pools whose estimate was 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

MIN_RUNS = 3  # between-run spread needs K - 1 >= 2 degrees of freedom to mean anything
MIN_WINDOWS = 2  # a run's own spread needs two windows

ScaleName = Literal["log", "linear"]
# No metric reaches this in its unit (the largest, copies/s, about 1e5; the smallest positive, CPU seconds per
# request, about 1e-3). A stored value beyond it is a corrupt or hand-edited file, and judging it would overflow a
# double (a log ratio of 1e308 to 10 is 700, whose expm1 does not fit).
MAX_MAGNITUDE = 1e12


@dataclass(frozen=True)
class Scale:
    """The scale a metric is judged on: ``log`` (relative changes; values must be > 0) or ``linear``."""

    name: ScaleName = "log"

    def forward(self, values: Sequence[float]) -> np.ndarray:
        arr = np.asarray(values, dtype=float)
        if self.name == "log":
            if arr.size and not np.all(arr > 0):
                raise ValueError(f"log-scale metric with non-positive values {arr[arr <= 0][:5].tolist()}: "
                                 "judge it on the linear scale (Metric.scale='linear')")
            return np.log(arr)
        return arr

    def problem(self, values: Sequence[float]) -> str | None:
        """Why ``values`` cannot be judged on this scale (None: they can): a value that is not finite or beyond
        ``MAX_MAGNITUDE``, or on the log scale one that is not above its reciprocal. The one check of a scale's
        domain, for stored samples (``store.baselines``)."""
        low = 1 / MAX_MAGNITUDE if self.name == "log" else -MAX_MAGNITUDE
        bad = [v for v in values if not (math.isfinite(v) and low < v < MAX_MAGNITUDE)]
        if not bad:
            return None
        domain = (f"finite and > 0 (log scale; within {low:g} .. {MAX_MAGNITUDE:g})" if self.name == "log"
                  else f"finite (within +-{MAX_MAGNITUDE:g})")
        return f"values {bad[:5]} where every value must be {domain}"

    def size(self, floor: float) -> float:
        """A declared floor (relative for log, absolute for linear) on this scale."""
        return math.log1p(floor) if self.name == "log" else floor

    def as_change(self, effect: float) -> float:
        """An effect on this scale back as a relative change (log) or an absolute one (linear)."""
        return math.expm1(effect) if self.name == "log" else effect

    def text(self, effect: float, unit: str = "") -> str:
        if self.name == "log":
            return f"{math.expm1(effect):+.1%}"
        return f"{effect:+.3g} {unit}".rstrip()


LOG = Scale("log")
LINEAR = Scale("linear")


@dataclass(frozen=True)
class NoiseModel:
    """Within- and between-run spread of one quantity over K runs (on its judged scale)."""

    runs: int
    windows: tuple[int, ...]
    level: float  # mean of the run means
    run_means: tuple[float, ...]
    run_sd: float  # SD of the run means
    within_sd: float  # pooled SD inside runs
    within_df: int

    @classmethod
    def fit(cls, runs: Sequence[Sequence[float]]) -> NoiseModel:
        """Fit from per-run window values already on the judged scale (``Scale.forward``)."""
        arrays = [np.asarray(r, dtype=float) for r in runs if len(r)]
        if not arrays:
            raise ValueError("a noise model needs at least one run with windows")
        means = np.array([a.mean() for a in arrays])
        ss = sum(float(((a - a.mean()) ** 2).sum()) for a in arrays)
        df = sum(len(a) - 1 for a in arrays)
        within = math.sqrt(ss / df) if df > 0 else 0.0
        run_sd = float(means.std(ddof=1)) if len(means) > 1 else 0.0
        return cls(len(arrays), tuple(len(a) for a in arrays), float(means.mean()), tuple(float(m) for m in means),
                   run_sd, within, df)

    @property
    def harmonic_term(self) -> float:
        """mean(1/n_k): how much within-run noise each run mean carries."""
        return float(np.mean([1.0 / n for n in self.windows]))

    @property
    def typical_windows(self) -> int:
        return max(1, round(float(np.mean(self.windows))))

    @property
    def between_sd(self) -> float:
        """Method-of-moments between-run SD (>= 0)."""
        return math.sqrt(max(0.0, self.run_sd**2 - self.within_sd**2 * self.harmonic_term))

    def unusable(self) -> str | None:
        """Why this model cannot judge a new run, or None."""
        if self.runs < MIN_RUNS:
            return (f"the baseline pools {self.runs} run(s); the spread between runs needs >= {MIN_RUNS} "
                    "independent runs")
        return None

    def prediction(self, windows: int, within_sd: float | None = None) -> tuple[float, float]:
        """(se, df) of ``mean(new run) - level`` for a new run of ``windows`` windows whose own within-run SD
        is ``within_sd`` (default: the baseline's)."""
        if windows < 1:
            raise ValueError("a run has at least one window")
        new2 = (self.within_sd if within_sd is None else within_sd) ** 2
        se, df = prediction_terms(self.runs, self.harmonic_term, self.run_sd**2, self.within_sd**2, self.within_df,
                                  new2, windows)
        return float(se), float(df)


def prediction_terms(k: int, h: float, run_var, within_var, within_df: int, new_var, windows: int):
    """The prediction error (se, df) of ``NoiseModel.prediction`` on scalars or numpy arrays of pools (the
    simulations call this very function): K runs, ``h`` = mean(1/n_k), the run means' variance, the pooled
    within-run variance and its df, the new run's within-run variance and window count."""
    a_term = (1 + 1 / k) * np.asarray(run_var, dtype=float)
    c_term = np.asarray(new_var, dtype=float) / windows - np.asarray(within_var, dtype=float) * h
    floor = np.asarray(new_var, dtype=float) / windows + np.asarray(within_var, dtype=float) * h / k
    var = a_term + c_term
    df_m = float(max(k - 1, 1))
    # Run means that agree better than their windows predict (between-run variance estimated as 0) cannot tell
    # that from a between-run spread they happened to hide: the floor's size at the run means' K - 1 df.
    floored = var < floor
    denom = a_term**2 / df_m + c_term**2 / max(within_df, 1)  # |c_term| when negative: a conservative df
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(denom > 0, var**2 / np.where(denom > 0, denom, 1.0), np.inf)
        se = np.sqrt(np.where(floored, floor, np.maximum(var, 0.0)))
    df = np.where(floored, np.where(floor > 0, df_m, np.inf), np.where(var > 0, df, np.inf))
    return se, df


def run_within_sd(model: NoiseModel, values: Sequence[float]) -> float:
    """The within-run SD to assume for a new run: its own spread when that is larger than the pool's (a run
    noisier than its baseline must not borrow the baseline's precision), else the pool's (better estimated)."""
    arr = np.asarray(values, dtype=float)
    own = float(arr.std(ddof=1)) if arr.size >= MIN_WINDOWS else 0.0
    return max(model.within_sd, own)
