"""Which window length makes the within-run spread small? One long segment per setting, cut after the fact.

    python -m tools.studies.window_study --model DIR --scenario cpu-copy=buffer-quota \\
        --seconds 60 --lengths 0.5,1,2,3,4,6 --pin auto,off --out DIR

For each CPU placement in ``--pin`` (``--perf-engine-cpus`` values) a fresh engine serves one closed-loop segment
of ``--seconds`` (after the first-segment warmup); the requests it completed are then cut into back-to-back
windows of each length, and the coefficient of variation across windows is printed for req/s (continuous, as
judged, and counted: ``loadgen.stream.progress_rate``), TTFT p50 and TPOT p50. The same records, cut differently:
the lengths are compared on identical load. Writes
``window_study.json`` (the CVs and each request's completion time, TTFT and TPOT).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from engine_fixtures.engine.build import EngineBuild
from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.isolation.pinning import cpu_split
from engine_fixtures.loadgen.records import RequestRecord
from engine_fixtures.loadgen.stream import LoadStream, finished_in, progress_rate
from engine_fixtures.option_values import parse_cpus_setting
from engine_fixtures.scenarios.engine import EngineScenario
from tools.studies.ab_study import SCENARIOS, study_args, study_parser

METRICS = ("requests_per_s", "requests_per_s_counted", "ttft_p50_ms", "tpot_p50_ms")


def cut(records: Sequence[RequestRecord], start: float, seconds: float, length: float) -> dict[str, list[float]]:
    """Per-window values of back-to-back windows of ``length`` over ``[start, start + seconds)`` (record times)."""
    out: dict[str, list[float]] = {m: [] for m in METRICS}
    for k in range(int(seconds // length)):
        t0 = start + k * length
        done = finished_in(records, t0, t0 + length)
        if not done:
            continue
        out["requests_per_s"].append(progress_rate(records, t0, t0 + length))
        out["requests_per_s_counted"].append(len(done) / length)
        out["ttft_p50_ms"].append(float(np.percentile([r.ttft_s for r in done], 50)) * 1000)
        tpot = [t for r in done if (t := r.tpot_s) is not None]
        if tpot:
            out["tpot_p50_ms"].append(float(np.percentile(tpot, 50)) * 1000)
    return out


def cv(values: Sequence[float]) -> float:
    a = np.asarray(values, dtype=float)
    return float(a.std(ddof=1) / a.mean()) if a.size >= 2 and a.mean() else float("nan")


def study(records: Sequence[RequestRecord], start: float, seconds: float, lengths: Sequence[float]) -> dict:
    rows = {}
    for length in lengths:
        windows = cut(records, start, seconds, length)
        rows[str(length)] = {"windows": len(windows["requests_per_s"]), **{m: cv(v) for m, v in windows.items()}}
    return rows


def run(model: Path, scenario: EngineScenario, seconds: float, lengths: Sequence[float], pins: Sequence[str],
        client_cpus: tuple[int, ...] | None, out: Path) -> dict:
    report: dict = {"scenario": scenario.id, "seconds": seconds, "settings": {}}
    for pin in pins:
        split = cpu_split(parse_cpus_setting(pin), client_cpus)
        factory = EngineFactory(out / f"engines-{pin}", deadline_s=600.0)
        try:
            engine = factory.get(scenario.spec(model, (0,), EngineBuild(), cpus=split.engine))
            with LoadStream(cpus=split.client) as stream:
                seg = stream.segment(engine.url, scenario.workload(), 3.0, seconds)
        finally:
            factory.close()
        t0 = seg.measure_at - seg.start
        report["settings"][pin] = {
            "cpus": split.describe(), "cv": study(seg.records, t0, seconds, lengths),
            "records": [[round(r.end_s - t0, 4), round(r.ttft_s * 1000, 2), round((r.tpot_s or 0) * 1000, 3)]
                        for r in seg.records if r.end_s >= t0]}
        (out / "window_study.json").write_text(json.dumps(report))
    return report


def render(report: dict) -> Table:
    table = Table(title=f"Within-run CV by window length, {report['scenario']}, one {report['seconds']:g} s segment "
                        "per CPU placement")
    for col in ("placement", "window s", "windows", *(f"CV {m}" for m in METRICS)):
        table.add_column(col)
    for pin, row in report["settings"].items():
        for length, r in row["cv"].items():
            table.add_row(pin, length, str(r["windows"]), *(f"{r[m]:.1%}" for m in METRICS))
    return table


def main(argv: Sequence[str] | None = None) -> None:
    ap = study_parser(__doc__)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--lengths", default="0.5,1,2,3,4,6")
    ap.add_argument("--pin", default="auto,off", help="--perf-engine-cpus values to compare, comma-separated "
                                                      "(a CPU list goes alone)")
    args = study_args(ap, argv)
    pins = args.pin.split(",") if args.pin.replace(",", "").isalpha() else [args.pin]
    report = run(args.model, SCENARIOS[args.scenario], args.seconds, [float(x) for x in args.lengths.split(",")],
                 pins, args.client_cpus, args.out)
    Console(width=160).print(render(report))


if __name__ == "__main__":
    main()
