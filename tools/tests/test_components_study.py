"""The variance-components study (tools.studies.components): known components are recovered from a logged design,
engines of one build judged against a pool of the others raise no alarm, and the slow-TPOT share tells an
instance's own share from one coin for all."""

from __future__ import annotations

import math
import random

import pytest

from tools.studies.components import components, slow_share


def design(rng: random.Random, engines: int, sd_engine: float, sd_visit: float, sd_window: float,
           slow: dict[int, float] | None = None) -> list[dict]:
    """``engines`` engines, 3 visits of 2 windows each, log-normal req/s at 24 with the given sds, one window's
    requests each (16 requests, TPOT in a fast 4.3 ms or a slow 6.0 ms mode)."""
    log = []
    for e in range(engines):
        eng = rng.gauss(0, sd_engine)
        for v in range(3):
            vis = rng.gauss(0, sd_visit)
            for k in range(2):
                value = 24.0 * math.exp(eng + vis + rng.gauss(0, sd_window))
                share = (slow or {}).get(e, 0.3)
                rows = []
                for i in range(16):
                    tpot = 0.0060 if rng.random() < share else 0.0043
                    rows.append([0.1 * i, 0.1 * i + 0.3, 0.1 * i + 0.3 + 127 * tpot, 128])
                log.append({"arm": "off", "engine": f"e{e}", "group": e, "visit": e * 10 + v, "t_s": 30.0 * v + 3 * k,
                            "values": {"requests_per_s": value},
                            "requests": {"origin_s": 0.0, "t0_s": 0.0, "t1_s": 3.0,
                                         "columns": ["sent_s", "first_token_s", "end_s", "output_tokens"],
                                         "rows": rows}})
    return log


def test_known_components_are_recovered() -> None:
    log = design(random.Random(7), engines=40, sd_engine=0.06, sd_visit=0.03, sd_window=0.02)
    c = components(log, "off", "requests_per_s")
    assert c.engines == 40
    assert c.windows == 240
    assert c.within_visit == pytest.approx(0.02, rel=0.3)
    assert c.between_visits == pytest.approx(0.03, rel=0.35)
    assert c.between_engines == pytest.approx(0.06, rel=0.3)
    assert c.level == pytest.approx(24.0, rel=0.05)
    assert c.loo_judged == 40
    assert c.loo_flags <= 2  # the same build: a flag is a false alarm, at the gate's alpha
    assert c.pool_promise[10] < c.pool_promise[3]  # a bigger pool promises more


def test_a_quiet_host_promises_ten_percent_with_a_small_pool_and_a_noisy_one_does_not() -> None:
    quiet = components(design(random.Random(3), 12, 0.01, 0.01, 0.01), "off", "requests_per_s")
    noisy = components(design(random.Random(3), 12, 0.08, 0.01, 0.01), "off", "requests_per_s")
    assert quiet.pool_promise[10] < 0.10 < noisy.pool_promise[10]


def test_one_engine_is_not_a_spread() -> None:
    with pytest.raises(ValueError, match="components need two or more"):
        components(design(random.Random(1), 1, 0.05, 0.0, 0.01), "off", "requests_per_s")


def test_the_slow_tpot_share_of_an_instance_is_told_from_one_coin() -> None:
    shared = slow_share(design(random.Random(5), 10, 0.0, 0.0, 0.01), "off")
    own = slow_share(design(random.Random(5), 10, 0.0, 0.0, 0.01, slow={e: 0.05 + 0.09 * e for e in range(10)}),
                     "off")
    assert 4.3 < shared["cut_ms"] < 6.0
    assert shared["share_mean"] == pytest.approx(0.3, abs=0.06)
    assert shared["share_sd_between_engines"] < 2 * shared["share_sd_if_one_coin"]
    assert own["share_sd_between_engines"] > 3 * own["share_sd_if_one_coin"]


def test_reports_of_two_calls_merge_with_their_engines_told_apart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from tools.studies.components import components_report, merged
    for i in range(2):
        log = design(random.Random(i), 3, 0.03, 0.01, 0.01)
        (tmp_path / f"{i}.json").write_text(json.dumps({"scenario": "cpu-copy=buffer", "windows": log,
                                                        "groups": [{"engines": {"off": {"kv_tokens": 1000}}}]}))
    report = merged([tmp_path / "0.json", tmp_path / "1.json"])
    rows, found = components_report(report)
    assert {r.metric: r.engines for r in rows}["requests_per_s"] == 6  # e0-e2 of each call, not 3
    assert [c["why"] for c in found["components"] if "why" in c]  # no TTFT in this log: said, not skipped
    assert found["engines"] == [{"kv_tokens": 1000}, {"kv_tokens": 1000}]
    warm = merged([tmp_path / "0.json", tmp_path / "1.json"], skip_first=1)  # the design's group = its engine
    assert {w["engine"] for w in warm["windows"]} == {"r0:e1", "r0:e2", "r1:e0", "r1:e1", "r1:e2"}
    assert warm["groups"] == [{"engines": {"off": {"kv_tokens": 1000}}}]
    assert warm["skipped_groups"] == 1
