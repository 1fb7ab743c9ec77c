"""Seeded simulations of the gate on its own model (random run levels plus window noise), vectorised.

``history_decisions`` is ``decide.decide_history`` over arrays of trials (the test suite checks it against the
scalar gate case by case, so the two cannot drift); ``false_alarm_rate`` and ``whole_run_red_rate`` are what
issue 19 asks to be shown, and ``python -m engine_fixtures.judge.simulate`` prints the tables in
docs/results/judging-simulations.md. ``contrast_outcomes`` judges seeded contrasts with ``decide.decide_contrast``
itself (a few hundred trials, so no vectorised copy of the rule): how often a candidate truly beyond its bound
passes (issue 34); ``--only contrast`` prints just that table.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from engine_fixtures.judge.decide import ALPHA, BETA, decide_contrast, gate_alpha
from engine_fixtures.judge.metrics import metric
from engine_fixtures.judge.noise import prediction_terms
from engine_fixtures.judge.paired import GROUP_CEILING_FACTOR
from engine_fixtures.judge.sequential import Budget

STATUS = ("pass", "regression", "improvement", "inconclusive")
WIDEST = metric("tpot_p50_ms").max_size  # the declared widest promise of a p50 latency (judged scale)
RATE = metric("requests_per_s")  # the contrasts' metric: higher is better, log scale, floor 3 %, ab_detect 10 %
CONTRAST_CASES = ((0.9, 0.85), (0.9, 0.88), (0.9, 0.90), (0.9, 0.97), (1.0, 0.97), (1.0, 1.0))  # (bound, true ratio)


def _q(p: float, df: np.ndarray) -> np.ndarray:
    df = np.asarray(df, dtype=float)
    out = stats.t.ppf(p, np.maximum(df, 1.0))
    return np.where(np.isinf(df) | (df > 1e6), stats.norm.ppf(p), out)


@dataclass(frozen=True)
class Pools:
    """T simulated pools of K runs of n windows (judged scale): the fitted noise model's pieces per trial."""

    k: int
    n: int
    level: np.ndarray
    run_var: np.ndarray
    within_var: np.ndarray

    @classmethod
    def draw(cls, rng: np.random.Generator, trials: int, k: int, n: int, between: float, within: float) -> Pools:
        x = rng.normal(0, between, (trials, k, 1)) + rng.normal(0, within, (trials, k, n))
        means = x.mean(axis=2)
        ss = ((x - means[..., None]) ** 2).sum(axis=(1, 2))
        return cls(k, n, means.mean(axis=1), means.var(axis=1, ddof=1), ss / (k * (n - 1)))

    def prediction(self, m: int, new_var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``NoiseModel.prediction`` per trial: the same function on arrays."""
        return prediction_terms(self.k, 1.0 / self.n, self.run_var, self.within_var, self.k * (self.n - 1),
                                new_var, m)


def history_decisions(pools: Pools, current: np.ndarray, sign: float, floor: float, alpha: float = ALPHA,
                      beta: float = BETA, max_detect: float | None = None) -> np.ndarray:
    """Status index (``STATUS``) per trial of ``current`` (trials x windows) against ``pools``."""
    m = current.shape[1]
    own = current.var(axis=1, ddof=1) if m >= 2 else np.zeros(len(current))
    se_run, df_run = pools.prediction(m, np.maximum(pools.within_var, own))
    se_ref, df_ref = pools.prediction(pools.n, pools.within_var)
    effect = sign * (current.mean(axis=1) - pools.level)
    threshold = np.maximum(floor, _q(1 - alpha, df_run) * se_run)
    promise = np.maximum(floor, _q(1 - alpha, df_ref) * se_ref) + _q(1 - beta, df_ref) * se_ref
    passes = np.abs(effect) + _q(1 - beta, df_run) * se_run <= promise
    if max_detect is not None:
        passes &= promise <= max_detect
    return np.select([effect > threshold, effect < -threshold, passes], [1, 2, 0], default=3)


def false_alarm_rate(rng: np.random.Generator, trials: int, k: int, n: int, between: float, within: float,
                     alpha: float, floor: float = math.log1p(0.02)) -> float:
    """Share of clean runs judged ``regression`` (one side) at ``alpha`` against fresh pools of K runs."""
    pools = Pools.draw(rng, trials, k, n, between, within)
    cur = rng.normal(0, between, (trials, 1)) + rng.normal(0, within, (trials, n))
    return float(np.mean(history_decisions(pools, cur, +1.0, floor, alpha) == 1))


def whole_run_red_rate(rng: np.random.Generator, trials: int, k: int, budget: Budget, gating: int,
                       between: float, within: float, floor: float = math.log1p(0.03),
                       max_detect: float | None = None) -> tuple[float, float]:
    """(red, inconclusive share) of whole clean runs of a scenario with ``gating`` independent gating metrics,
    judged sequentially like the runner: looks after ``budget.initial`` windows and each step up to the budget,
    at ``gate_alpha(ALPHA / looks, gating)`` per cell; red = any cell regression, improvement or inconclusive
    (strict mode). Independent metrics are the worst case of the family-wise bound."""
    a = gate_alpha(budget.alpha_per_look(), gating)
    red = np.zeros(trials, dtype=bool)
    undecided_at_end = np.zeros(trials, dtype=bool)
    for _ in range(gating):
        pools = Pools.draw(rng, trials, k, budget.initial, between, within)
        cur = rng.normal(0, between, (trials, 1)) + rng.normal(0, within, (trials, budget.maximum))
        status = np.full(trials, 3)
        n = budget.initial
        while True:
            open_ = status == 3
            status[open_] = history_decisions(pools, cur[:, :n], +1.0, floor, a, max_detect=max_detect)[open_]
            if n >= budget.maximum or not (status == 3).any():
                break
            n = min(n + budget.step, budget.maximum)
        red |= status != 0
        undecided_at_end |= status == 3
    return float(red.mean()), float(undecided_at_end.mean())


def promise_quantiles(rng: np.random.Generator, trials: int, k: int, n: int, between: float, within: float,
                      alpha: float, floor: float = math.log1p(0.03), limit: float | None = None
                      ) -> tuple[float, float, float]:
    """(median promise, 90th percentile, share of pools wider than ``limit``) as relative changes (worse
    direction of a lower-is-better metric) over fresh pools of K runs."""
    pools = Pools.draw(rng, trials, k, n, between, within)
    se, df = pools.prediction(n, pools.within_var)
    promise = np.maximum(floor, _q(1 - alpha, df) * se) + _q(1 - BETA, df) * se
    return (float(np.expm1(np.median(promise))), float(np.expm1(np.quantile(promise, 0.9))),
            float(np.mean(promise > (WIDEST if limit is None else limit))))


def contrast_outcomes(rng: np.random.Generator, trials: int, blocks: int, sd: float, ratio: float, bound: float,
                      ceiling: float, alpha: float = ALPHA) -> dict[str, int]:
    """How ``trials`` contrasts "candidate >= ``bound`` x reference" in requests/s end, each judged by
    ``decide_contrast`` from ``blocks`` per-block effects drawn N(log ``ratio``, ``sd``): the candidate is truly
    ``ratio`` x the reference. ``ceiling`` (judged scale) is the widest resolution a pass may have."""
    counts = dict.fromkeys(STATUS, 0)
    for effects in rng.normal(math.log(ratio), sd, (trials, blocks)):
        d = decide_contrast(effects, RATE.sign, max(0.0, -math.log(bound)), RATE.scale_floor, ceiling, blocks,
                            alpha=alpha)
        counts[d.status] += 1
    return counts


def contrast_table(seed: int, trials: int, blocks: int = 10, sd: float = 0.06) -> list[str]:
    """The contrast table's lines: each case of ``CONTRAST_CASES`` at a live contrast's ceiling (the metric's
    ``ab_detect``) and a group's (``GROUP_CEILING_FACTOR`` times it), ``trials`` seeded trials per row; both
    ceilings judge the same draws of a case."""
    lines = [f"contrasts \"candidate >= bound x reference\" in requests/s (floor {RATE.floor:.0%}, alpha {ALPHA}), "
             f"per-block sd {sd:.0%}, {blocks} blocks, {trials} trials per row (decide_contrast itself)\n",
             "| ceiling | bound | true ratio | pass | regression | inconclusive |", "|---|---|---|---|---|---|"]
    ceilings = (("live", RATE.ab_size()), ("group", GROUP_CEILING_FACTOR * RATE.ab_size()))
    for name, ceiling in ceilings:
        for i, (bound, ratio) in enumerate(CONTRAST_CASES):  # both ceilings judge the same draws of a case
            n = contrast_outcomes(np.random.default_rng([seed, i]), trials, blocks, sd, ratio, bound, ceiling)
            lines.append(f"| {name} {math.expm1(ceiling):.1%} | {bound:g}x | {ratio:g}x | {n['pass']} | "
                         f"{n['regression']} | {n['inconclusive']} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=200_000)
    p.add_argument("--seed", type=int, default=19)
    p.add_argument("--contrast-trials", type=int, default=200)
    p.add_argument("--only", choices=("history", "contrast"), help="print one part (default: both)")
    args = p.parse_args(argv)
    if args.only != "history":
        print("\n".join(contrast_table(args.seed, args.contrast_trials)) + "\n")
    if args.only == "contrast":
        return 0
    rng = np.random.default_rng(args.seed)
    budget = Budget(5, 5, 15)
    a = budget.alpha_per_look()
    print(f"false-alarm rate (one side) at alpha/looks = {a:.5f}, 5 windows per run, {args.trials} pools each\n")
    print("| K | between SD | within SD | false alarms | / nominal |\n|---|---|---|---|---|")
    for k in (3, 5, 10):
        for between, within in ((0.05, 0.05), (0.08, 0.05), (0.03, 0.08)):
            r = false_alarm_rate(rng, args.trials, k, 5, between, within, a)
            print(f"| {k} | {between} | {within} | {r:.4%} | {r / a:.2f}x |")
    g4 = gate_alpha(a, 4)
    print(f"\nwhat a pool promises (the gate's own formula at alpha {g4:.5f}: 4 gating metrics, alpha/3 per look), "
          f"{args.trials // 4} pools each\n")
    print(f"| K | between SD | within SD | median catches | 90th pct | share wider than {math.expm1(WIDEST):.0%} |"
          "\n|---|---|---|---|---|---|")
    for k in (3, 5, 10, 20):
        for between, within in ((0.03, 0.05), (0.07, 0.10)):
            med, p90, wide = promise_quantiles(rng, args.trials // 4, k, 5, between, within, g4)
            print(f"| {k} | {between} | {within} | {med:+.1%} | {p90:+.1%} | {wide:.1%} |")
    print(f"\nwhole clean run red (strict: any regression, improvement or inconclusive), budget 5/+5/15 windows, "
          f"{args.trials // 4} runs each\n")
    print("| K | gating metrics | between SD | within SD | red | inconclusive at budget | red when pools wider than "
          f"{math.expm1(WIDEST):.0%} say so |\n|---|---|---|---|---|---|---|")
    for k in (3, 5, 10):
        for g in (4, 6):
            for between, within in ((0.03, 0.05), (0.08, 0.05)):
                red, inc = whole_run_red_rate(rng, args.trials // 4, k, budget, g, between, within)
                wide, _ = whole_run_red_rate(rng, args.trials // 4, k, budget, g, between, within,
                                             max_detect=WIDEST)
                print(f"| {k} | {g} | {between} | {within} | {red:.2%} | {inc:.2%} | {wide:.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
