"""A run-history writer in its own process, for the concurrency and kill tests.

``python -m perf_tests.selftests.history.writer URL WRITER RUNS`` appends RUNS deterministic runs (``make_run``) and
prints how many it added. With ``--pause-at samples|commit`` it appends one run and stops inside that run's
transaction (after the samples' INSERT, or just before COMMIT), prints ``paused`` and waits on stdin until it
is killed: the kill test's victim.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys

import sqlalchemy as sa

from engine_fixtures.store.history import HistoryStore
from engine_fixtures.store.history_db import resolve_url
from engine_fixtures.store.results import ResultsFile, RunResult

BASE = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
METRICS = ("requests_per_s", "ttft_p50_ms", "tpot_p50_ms", "cpu_cores.scheduler")


def make_run(writer: int, i: int, machine_key: str = "fleet-box") -> ResultsFile:
    """Run ``i`` of writer ``writer``: two scenarios, four metrics, five windows and a warmup, verdicts."""
    seq = writer * 1000 + i
    results = []
    for s, copy in enumerate(("buffer", "torch")):
        scenario = f"engine/transport=cpu/copy={copy}/c=16"
        samples = {m: tuple(10.0 + k + 0.001 * seq + 0.1 * w + s for w in range(5)) for k, m in enumerate(METRICS)}
        results.append(RunResult(scenario, {"copy": copy, "c": "16"}, samples, {"requests_per_s": (1.0 + seq,)},
                                 {"windows": 5, "writer": writer}))
    verdicts = {r.scenario: {"requests_per_s": "pass", "ttft_p50_ms": "regression" if i % 7 == 3 else "pass"}
                for r in results}
    when = (BASE + dt.timedelta(minutes=seq)).isoformat()
    host = {"gpu_uuids": [], "cpu_model": "fleet CPU", "cpu_max_mhz": None, "kernel": "6.8.0",
            "runner": f"runner-{writer}"}  # a pool is one host's (machine.HostIdentity)
    return ResultsFile(tuple(results), machine_key, {"hostname": f"runner-{writer}", "host": host}, "abc123", when,
                       f"pytest writer {writer}", {"sglang": "0.5.16", "torch": "2.11.0"},
                       f"{machine_key}@{when}#w{writer}r{i}", verdicts, runner={"name": f"runner-{writer}",
                                                                                  "labels": ["fleet", f"w{writer}"]})


def _pause(_conn, *_args) -> None:
    print("paused", flush=True)
    sys.stdin.read()  # blocks until the test kills this process


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("writer", type=int)
    p.add_argument("runs", type=int)
    p.add_argument("--pause-at", choices=("samples", "commit"))
    args = p.parse_args(argv)
    store = HistoryStore.at(resolve_url(args.url, "."))
    if args.pause_at == "commit":
        sa.event.listen(store.engine, "commit", _pause)
    elif args.pause_at == "samples":
        def after(conn, cursor, statement, *_rest) -> None:
            if statement.lstrip().upper().startswith("INSERT INTO SAMPLES"):
                _pause(conn)
        sa.event.listen(store.engine, "after_cursor_execute", after)
    added = sum(store.append(make_run(args.writer, i)) for i in range(args.runs))
    print(f"added {added}", flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
