"""Variance components of fresh engines of one build, and what a pool of them promises (issue 36).

    python -m tools.studies.components OUT/ab_study.json [MORE.json ...] [--out DIR]

reads the window logs of one or more ``ab_study`` runs (several device calls on one host: their engines are told
apart by file) and prints the tables below; ``--out`` also writes ``components.json``.

``ab_study --placements off,on --components`` starts fresh instance groups one after another in one call and logs
every window it measures with its engine and visit (``WindowLog``). From that log, per arm and gated metric, on the
metric's judged scale (log for ratios, so an sd reads as a CV):

- **within a visit**: the spread of consecutive windows of one visit (visits of two or more windows);
- **between visits**: what the spread of an engine's windows adds across its visits (blocks), beyond the first;
- **between engines**: sigma_b, the spread of engine means left once the within-engine part is taken out (random
  effects, method of moments), and the raw spread of engine means (what a single run's mean carries);
- **drift**: the mean slope of the metric against time since the engine's first window (%/min);
- **what a pool promises**: each engine in turn judged against a pool of the others by the suite's own pool judge
  (``judge.verdicts.judge_metric``, the gate's alpha for three gated metrics): its verdict (a flag is a false
  alarm: every engine runs the same build) and what that pool catches; and the promise of a pool of K runs of
  this spread (``judge.decide.promised_size``, the formula ``perf-baseline show`` prints);
- **bimodal TPOT**: per engine, the share of requests in the slow TPOT mode (two-means split of log per-request
  TPOT over every engine), against the spread that share would have if it were one coin for every engine.

Every engine here is a "run" of one window set: the runs of a real pool are separate sessions, minutes apart.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from engine_fixtures.judge.decide import ALPHA, BETA, gate_alpha, promised_size
from engine_fixtures.judge.metrics import metric
from engine_fixtures.judge.noise import NoiseModel
from engine_fixtures.judge.verdicts import judge_metric
from engine_fixtures.loadgen.latency import tpot_values
from engine_fixtures.scenarios.segment import stored_window

GATED = ("requests_per_s", "ttft_p50_ms", "tpot_gmean_ms")
POOL_SIZES = (3, 5, 10)

# One logged window: {"arm", "engine" (instance name), "group", "visit", "t_s" (monotonic start), "values",
# "requests" (segment.window_requests)}
WindowLog = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Components:
    arm: str
    metric: str
    engines: int
    windows: int
    level: float  # geometric (log scale) or arithmetic mean, in the metric's unit
    within_visit: float | None  # sd on the judged scale (x100: % for log metrics)
    between_visits: float
    between_engines: float  # sigma_b
    engine_means_sd: float
    drift_per_min: float | None
    loo_flags: int  # leave-one-out verdicts that flagged (false alarms)
    loo_judged: int
    loo_catches: float | None  # median of what a pool of engines - 1 caught, as a worse change (fraction)
    pool_promise: Mapping[int, float]  # K -> what a pool of K such runs promises (fraction, worse direction)


def _by_engine(log: WindowLog, arm: str, name: str) -> dict[str, list[tuple[Any, float, float]]]:
    scale = metric(name).scale
    out: dict[str, list[tuple[Any, float, float]]] = {}
    for w in log:
        if w["arm"] == arm and name in w["values"]:
            out.setdefault(w["engine"], []).append((w["visit"], float(w["t_s"]),
                                                    float(scale.forward([w["values"][name]])[0])))
    return out


def _pooled_var(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    ss = sum(float(((np.asarray(g) - np.mean(g)) ** 2).sum()) for g in groups if len(g) > 1)
    df = sum(len(g) - 1 for g in groups if len(g) > 1)
    return (ss / df if df else math.nan), df


def components(log: WindowLog, arm: str, name: str) -> Components:
    m = metric(name)
    engines = _by_engine(log, arm, name)
    if len(engines) < 2:
        raise ValueError(f"{arm}/{name}: {len(engines)} engine(s) with windows; components need two or more")
    visits = [[v for vis, _t, v in rows if vis == k] for rows in engines.values() for k in {r[0] for r in rows}]
    within_visit, wv_df = _pooled_var(visits)
    within_engine, _ = _pooled_var([[v for _v, _t, v in rows] for rows in engines.values()])
    means = np.array([np.mean([v for _v, _t, v in rows]) for rows in engines.values()])
    n_harm = 1.0 / np.mean([1.0 / len(rows) for rows in engines.values()])
    means_var = float(means.var(ddof=1))
    sigma_b2 = max(0.0, means_var - within_engine / n_harm)
    between_visits = max(0.0, within_engine - within_visit) if wv_df else math.nan
    slopes = []
    for rows in engines.values():
        t = np.array([r[1] for r in rows])
        if len(rows) >= 3 and np.ptp(t) > 0:
            slopes.append(float(np.polyfit((t - t.min()) / 60.0, [r[2] for r in rows], 1)[0]))
    runs = [[math.exp(v) if m.scale.name == "log" else v for _v, _t, v in rows] for rows in engines.values()]
    flags, judged, catches = leave_one_out(m, runs)
    level = float(np.mean(means))
    return Components(arm, name, len(engines), sum(len(r) for r in engines.values()),
                      math.exp(level) if m.scale.name == "log" else level,
                      math.sqrt(within_visit) if wv_df else None, math.sqrt(between_visits) if wv_df else math.nan,
                      math.sqrt(sigma_b2), math.sqrt(means_var), float(np.mean(slopes)) if slopes else None,
                      flags, judged, catches, pool_promises(m, runs))


def leave_one_out(m: Any, runs: Sequence[Sequence[float]], family: int = len(GATED)) -> tuple[int, int, float | None]:
    """Each run judged against a pool of the others by the suite's pool judge (from four runs): the flags (false
    alarms, where every run is the same build), the runs judged, and the median of what those pools caught."""
    verdicts = [judge_metric(m, [list(r) for r in runs[:i] + runs[i + 1:]], list(runs[i]),
                             alpha=gate_alpha(ALPHA, family)) for i in range(len(runs))] if len(runs) >= 4 else []
    judged = [v for v in verdicts if v.status not in ("no-baseline",)]
    catches = sorted(v.detectable for v in judged if v.detectable is not None and math.isfinite(v.detectable))
    return (sum(v.status in ("regression", "improvement") for v in judged), len(judged),
            catches[len(catches) // 2] if catches else None)


def pool_promises(m: Any, runs: Sequence[Sequence[float]], family: int = len(GATED)) -> dict[int, float]:
    """What a pool of K runs as spread as ``runs`` (values in the metric's unit) promises, for each K of
    ``POOL_SIZES``: ``judge.decide.promised_size`` at the gate's alpha, as the worse change it names."""
    model = NoiseModel.fit([m.scale.forward(list(r)) for r in runs])
    n = model.typical_windows
    alpha = gate_alpha(ALPHA, family)
    return {k: _worse(m, promised_size(replace(model, runs=k, windows=(n,) * k, within_df=k * (n - 1)),
                                       m.floor_size(None), alpha, BETA)) for k in POOL_SIZES}


def _worse(m: Any, size: float) -> float:
    """A promise on the judged scale as the worse change it names (fraction), for log metrics."""
    if m.scale.name != "log":
        return size
    return math.exp(size) - 1 if m.sign > 0 else 1 - math.exp(-size)


def slow_share(log: WindowLog, arm: str) -> dict[str, Any]:
    """Per engine, the share of its requests in the slow TPOT mode, and whether that share is the engine's own."""
    per: dict[str, list[float]] = {}
    for w in log:
        if w["arm"] == arm and w.get("requests"):
            _lo, _hi, records = stored_window(w["requests"])
            per.setdefault(w["engine"], []).extend(t for t in tpot_values(records) if t > 0)
    every = np.log(np.concatenate([np.asarray(v) for v in per.values()])) if per else np.array([])
    if len(per) < 2 or every.size < 20:
        return {"engines": len(per), "why": "too few engines or requests"}
    cut = float(np.median(every))
    for _ in range(50):  # two means on log TPOT: the cut halfway between the modes' means
        lo, hi = every[every <= cut], every[every > cut]
        if not lo.size or not hi.size:
            break
        cut, prev = float((lo.mean() + hi.mean()) / 2), cut
        if abs(cut - prev) < 1e-9:
            break
    shares = {e: float(np.mean(np.log(v) > cut)) for e, v in per.items()}
    p = float(np.mean(every > cut))
    n = np.mean([len(v) for v in per.values()])
    return {"engines": len(per), "cut_ms": math.exp(cut) * 1e3, "share_mean": p,
            "share_sd_between_engines": float(np.std(list(shares.values()), ddof=1)),
            "share_sd_if_one_coin": math.sqrt(p * (1 - p) / n), "shares": shares}


def render(rows: Sequence[Components], title: str) -> Table:
    table = Table(title=title)
    for col in ("arm", "metric", "engines", "windows", "level", "within visit", "between visits",
                "between engines (sigma_b)", "engine means sd", "drift /min", "pool of n-1: false alarms",
                "pool of n-1 catches", *(f"pool of {k} promises" for k in POOL_SIZES)):
        table.add_column(col)
    for c in rows:
        def pct(x: float | None) -> str:
            return "-" if x is None or not math.isfinite(x) else f"{100 * x:.1f} %"

        table.add_row(c.arm, c.metric, str(c.engines), str(c.windows), f"{c.level:.4g}", pct(c.within_visit),
                      pct(c.between_visits), pct(c.between_engines), pct(c.engine_means_sd), pct(c.drift_per_min),
                      f"{c.loo_flags}/{c.loo_judged}", pct(c.loo_catches),
                      *(pct(c.pool_promise[k]) for k in POOL_SIZES))
    return table


def components_report(report: Mapping[str, Any]) -> tuple[list[Components], dict]:
    """Variance components, pool promises and the bimodal TPOT of every arm of an ``ab_study`` report: the rows,
    and all of it JSON-ready (an arm whose components cannot be computed says why)."""
    log = report["windows"]
    rows: list[Components] = []
    out: dict = {"components": [], "slow_tpot": {}, "engines": [f for g in report["groups"]
                                                                  for f in g.get("engines", {}).values()]}
    arms = sorted({w["arm"] for w in log}, key=lambda a: (a != "off", a))
    for arm in arms:
        for name in GATED:
            try:
                rows.append(components(log, arm, name))
                out["components"].append(asdict(rows[-1]))
            except ValueError as exc:
                out["components"].append({"arm": arm, "metric": name, "why": str(exc)})
        out["slow_tpot"][arm] = slow_share(log, arm)
    return rows, out


KEPT = ("scenario", "sizes", "patch", "blocks_per_group", "window_s", "warmup_s", "placements")


def merged(paths: Sequence[Path], skip_first: int = 0, same_build: Sequence[str] = ()) -> dict[str, Any]:
    """The window logs and groups of several ``ab_study.json`` files as one report (engines prefixed by file, groups
    numbered on), less the first file's first ``skip_first`` instance groups (a fresh host's warm-up, said in the
    report). The arms named in ``same_build`` (an A/B study's reference and its size-0 candidate: one build) are
    logged under the first one's name as well as their own (``arm`` and ``build``), so components can read them as
    one build's engines."""
    out: dict[str, Any] = {"windows": [], "groups": [], "sources": [str(p) for p in paths],
                           "skipped_groups": skip_first, "calls": []}
    for i, path in enumerate(paths):
        data = json.loads(path.read_text())
        tag = f"r{i}:" if len(paths) > 1 else ""
        skip = skip_first if i == 0 else 0
        base = len(out["groups"]) - skip
        out.update({k: data[k] for k in KEPT if k in data})
        out["windows"] += [{**w, "engine": tag + w["engine"], "visit": f"{tag}{w['visit']}", "group": base + w["group"],
                            "arm": same_build[0] if w["arm"] in same_build else w["arm"], "own_arm": w["arm"]}
                           for w in data["windows"] if w["group"] >= skip]
        out["groups"] += data["groups"][skip:]
        out["calls"].append({k: data.get(k) for k in ("spin_ms", "reference_tpot_ms", "live_check", "elapsed_s",
                                                      "timeline")})
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--skip-first-groups", type=int, default=0,
                    help="leave out the first file's first N instance groups (the fresh host's warm-up)")
    ap.add_argument("--same-build", default="", metavar="ARM,ARM",
                    help="arms of one build read as one (an A/B study's 'reference,c1' when c1 is its size 0)")
    args = ap.parse_args(argv)
    show(merged(args.reports, args.skip_first_groups, [a for a in args.same_build.split(",") if a]), args.out)


def show(report: Mapping[str, Any], out: Path | None, console: Console | None = None) -> None:
    """Print the components of ``report`` (and write ``out/components.json`` where ``out`` is given)."""
    rows, found = components_report(report)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "components.json").write_text(json.dumps(found, indent=1))
    console = console or Console(width=240)
    console.print(render(rows, f"variance components on {report['scenario']}, fresh engines of one build"))
    console.print_json(json.dumps({"slow_tpot": found["slow_tpot"], "engines": found["engines"]}))


if __name__ == "__main__":
    main()
