"""The suite in pytest-benchmark's terms: the ``benchmark`` fixture times the CPU tier's microbenchmarks, and every
run's results are exported as pytest-benchmark entries, which pytest-benchmark itself then shows and saves.

- ``timed_rounds(benchmark, target, order)``: ``benchmark.pedantic`` over the rig's rounds, ``target(arm)`` once a
  round in ``order`` (the rig decides the count, the order of arms and the quota; no warm-up, one call a round);
  returns each arm's seconds per round out of pytest-benchmark's own stats, for the suite's judge. The fixture's
  record (every round of every arm) names the arm of each round in its ``extra_info`` (``ROUNDS_KEY``).
- ``export(bench, perf)``: just before pytest-benchmark's own ``pytest_sessionfinish`` saves, each such record is
  filed as one entry per arm (``<test>[<arm>-<param>]``, seconds per round), and one entry per (result, metric) of
  the suite's session is added (name the scenario id, group the metric, stats of its per-window samples in the
  metric's own unit). Both are pytest-benchmark's ``Metadata`` and ``Stats``, so ``--benchmark-json``,
  ``--benchmark-autosave``, ``--benchmark-save``, ``--benchmark-compare`` and its table work as users expect, on
  both tiers, and machine_info, commit_info and the file's layout are pytest-benchmark's own. Each entry's
  ``extra_info`` carries the suite's verdict: ``verdict``, ``catches`` and ``message`` of its own row (a result's
  metric), or of the rows that judge it (a microbenchmark's invariant); ``judged_by``: every row that judges it;
  ``unit`` and ``better`` (the metric's direction). The results JSON, the run history and the pools stay the
  suite's own; this is an export of them, not another store.
- ``write(config, bench, where, stamp)``: every run that recorded results also saves that export beside its results
  JSON (``NNNN_benchmark_<stamp>.json``, through pytest-benchmark's ``FileStorage``), made as pytest-benchmark makes
  its ``--benchmark-json``: its machine_info and commit_info hooks, ``pytest_benchmark_generate_json`` with every
  round's data, ``pytest_benchmark_update_json`` (the suite's implementation, ``describe``, names the results JSON
  the export was made from). ``pytest-benchmark --storage .perf-results compare`` reads every such run.
"""

from __future__ import annotations

import copy
import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_benchmark import plugin as benchmark_plugin
from pytest_benchmark.stats import Metadata
from pytest_benchmark.storage.file import FileStorage

from engine_fixtures.errors import ConfigError, MeasurementError
from engine_fixtures.judge.metrics import metric
from engine_fixtures.judge.verdicts import STATUSES, Verdict

ROUNDS_KEY = "arm_of_round"  # a timed record's extra_info: the arm each of its rounds ran
PLUGIN = "pytest-benchmark"  # the name pytest-benchmark registers its session under
SUITE_OPTIONS = {"timer": "the suite's windows", "source": "sglang-perf-suite results"}


class PerfSession(Protocol):
    """What the export reads of the suite's session (``perf_session.PerfSession``, which imports this module)."""

    records: list[Any]  # perf_session.Record: nodeid, scenario, arm, verdicts, judges, result
    written: list[Path]  # the results JSON first
    machine_key: str
    run_token: str


@dataclass(frozen=True)
class Entry:
    """What pytest-benchmark's ``Metadata`` reads of a fixture: one benchmark's names, params and extra_info."""

    name: str
    fullname: str
    group: str | None
    param: str | None
    params: Mapping[str, Any] | None
    extra_info: dict[str, Any] = field(default_factory=dict)
    cprofile_stats: None = None
    has_error: bool = False


def entry(of: Entry, values: Sequence[float], options: Mapping[str, Any]) -> Metadata:
    """A pytest-benchmark entry of ``values`` (one a round), through its own ``Metadata`` and ``Stats``."""
    made = Metadata(of, iterations=1, options=dict(options))
    for value in values:
        made.update(value)
    return made


def timed_rounds(benchmark: Any, target: Callable[[str], object], order: Sequence[str],
                 group: str | None = None, **extra: Any) -> dict[str, list[float]]:
    """Every round of ``order`` timed by the test's ``benchmark`` fixture (see the module docstring): each arm's
    seconds per round, in order. ``group`` names the arms' table; ``extra`` goes into each arm's extra_info."""
    if not benchmark.enabled:
        raise ConfigError("pytest-benchmark is disabled (--benchmark-disable, or under pytest-xdist): this "
                          "microbenchmark's verdict reads its timings; run without --benchmark-disable and -n")
    turn = itertools.count()

    def setup() -> tuple[tuple[str], dict[str, Any]]:
        return (order[next(turn) % len(order)],), {}

    benchmark.group = group or benchmark.group
    benchmark.extra_info.update(extra, **{ROUNDS_KEY: list(order)})
    benchmark.pedantic(target, setup=setup, rounds=len(order))
    return by_arm(benchmark.stats)


def by_arm(record: Metadata) -> dict[str, list[float]]:
    """A timed record's rounds (pytest-benchmark's data, seconds) by the arm that ran each."""
    order = record.extra_info[ROUNDS_KEY]
    data = record.stats.data
    if len(data) != len(order):
        raise MeasurementError(f"{record.fullname}: pytest-benchmark timed {len(data)} rounds of the rig's "
                               f"{len(order)}")
    out: dict[str, list[float]] = {arm: [] for arm in order}
    for arm, seconds in zip(order, data, strict=True):
        out[arm].append(seconds)
    return out


def export(bench: Any, perf: PerfSession) -> None:
    """Put this session into pytest-benchmark's (``bench``: its ``BenchmarkSession``) before it saves."""
    rows: dict[str, list[Verdict]] = {}
    for rec in perf.records:
        rows.setdefault(rec.nodeid, []).extend(rec.verdicts if not rec.arm else ())
    for record in [b for b in bench.benchmarks if ROUNDS_KEY in b.extra_info]:
        bench.benchmarks.remove(record)
        bench.benchmarks += per_arm(record, rows.get(record.fullname, []))
    bench.benchmarks += suite_entries(perf)


def per_arm(record: Metadata, judging: Sequence[Verdict]) -> list[Metadata]:
    """A timed record filed as one entry per arm, each judged by ``judging`` (its test's rows)."""
    func, _, param = record.name.partition("[")
    full = record.fullname.partition("[")[0]
    info = {k: v for k, v in record.extra_info.items() if k != ROUNDS_KEY}
    out = []
    for arm, seconds in by_arm(record).items():
        label = f"{arm}-{param.removesuffix(']')}" if param else arm
        of = Entry(f"{func}[{label}]", f"{full}[{label}]", record.group, label,
                   {"arm": arm, **(record.params or {})},
                   {**info, "arm": arm, "unit": "s", "better": "lower", **verdict_info(None, judging)})
        out.append(entry(of, seconds, record.options))
    return out


def suite_entries(perf: PerfSession) -> list[Metadata]:
    """One entry per (result, metric) of the session, with its own row and the rows that judge its run."""
    judging: dict[str, list[Verdict]] = {}
    for rec in perf.records:
        for scenario in rec.judges:
            judging.setdefault(scenario, []).extend(rec.verdicts)
    out = []
    for rec in perf.records:
        if rec.result is None:
            continue
        own = {v.metric: v for v in rec.verdicts}
        for name, values in rec.result.samples.items():
            known = metric(name)  # a RunResult's metrics all resolve (store.results)
            info = {"scenario": rec.scenario, "arm": dict(rec.arm), "metric": name, "test": rec.nodeid,
                    "unit": known.unit, "better": known.direction,
                    **verdict_info(own.get(name), judging.get(rec.scenario, []))}
            of = Entry(rec.scenario, f"{rec.scenario}::{name}", name, name, {"metric": name, **rec.arm}, info)
            out.append(entry(of, values, SUITE_OPTIONS))
    return out


def verdict_info(own: Verdict | None, judging: Sequence[Verdict]) -> dict[str, Any]:
    """``verdict``, ``catches`` and ``message`` of the entry's own row, else of the worst row that judges it;
    ``judged_by``: each row that judges it."""
    shown = own or min(judging, key=lambda v: STATUSES.index(v.status), default=None)
    return {"verdict": shown.status if shown else None, "catches": shown.detectable if shown else None,
            "message": shown.message if shown else "",
            "judged_by": [{"row": v.metric, "verdict": v.status, "catches": v.detectable} for v in judging]}


def write(config: Any, bench: Any, where: Path, stamp: str) -> Path:
    """The session's entries (``bench.benchmarks``) as a pytest-benchmark JSON file, saved by its ``FileStorage`` into
    ``where`` as ``NNNN_benchmark_<stamp>.json``: numbered as ``--benchmark-save`` numbers runs, so that
    ``pytest-benchmark compare`` tells two runs apart (it names a run by the first 12 characters of its file)."""
    machine_info = bench.get_machine_info()
    commit_info = config.hook.pytest_benchmark_generate_commit_info(config=config)
    config.hook.pytest_benchmark_update_commit_info(config=config, commit_info=commit_info)
    output = config.hook.pytest_benchmark_generate_json(config=config, benchmarks=bench.benchmarks, include_data=True,
                                                        machine_info=machine_info, commit_info=commit_info)
    config.hook.pytest_benchmark_update_json(config=config, benchmarks=bench.benchmarks, output_json=output)
    storage = FileStorage(where, logger=bench.logger)
    storage.save(output, f"benchmark_{stamp}")
    (path,) = storage.query(f"*_benchmark_{stamp}")
    return path


def machine_info() -> dict[str, Any]:
    """pytest-benchmark's own machine_info, computed once per process (``_machine_info``): its py-cpuinfo starts a
    Python to read CPUID (0.4 s on the 2-core box), and now every recording run, each pytester run inside the
    self-tests among them, writes the export."""
    return copy.deepcopy(_machine_info())


@functools.cache
def _machine_info() -> dict[str, Any]:
    return benchmark_plugin.pytest_benchmark_generate_machine_info()


def describe(perf: PerfSession, output_json: dict[str, Any]) -> None:
    """pytest-benchmark's JSON (any of its files, ``pytest_benchmark_update_json``) names the suite's run it came
    from: the results JSON, the machine key and the run's token."""
    if perf.written:
        output_json["sglang_perf_suite"] = {"results": str(perf.written[0]), "machine_key": perf.machine_key,
                                            "run_token": perf.run_token}


def unscaled(config: Any, unit: str, benchmarks: Sequence[Mapping[str, Any]]) -> tuple[str, float] | None:
    """pytest-benchmark's time scale for a table of the suite's result entries: none, ``("", 1.0)``, for their values
    are in their metric's unit (req/s, ms, ratios), not seconds to be shown as ms; None (pytest-benchmark's own
    scaling) for any other table, or where the user chose ``--benchmark-time-unit``."""
    chosen = config.getoption("benchmark_time_unit", None) if config is not None else None
    if unit != "seconds" or chosen not in (None, "auto") or not benchmarks:
        return None
    return ("", 1.0) if all(b.get("options") == SUITE_OPTIONS for b in benchmarks) else None


def session_of(config: Any) -> Any:
    """pytest-benchmark's session of this run (None where it is not loaded, ``-p no:benchmark``)."""
    return config.pluginmanager.get_plugin(PLUGIN)
