"""A group of engines end to end through pytest, with stub engines in place of SGLang: two launches that cannot
switch live (here two token times), each started twice (replicas), all four one at a time with equal KV pools,
measured in mirrored blocks on a fresh instance group, judged with this host's A/A history and the run's own
same-launch pairs pooled into the variance: the slower member's contrast is violated and the faster one's holds,
each naming the variance it used; the run's pairs are added to the history."""

from __future__ import annotations

import json

import pytest

from engine_fixtures.machine import MachineInfo, host_of
from engine_fixtures.store.null_history import NullHistory, null_entry
from perf_tests.support import STEAL

pytest_plugins = ("pytester",)

TEST_FILE = """
import pytest
from engine_fixtures import Arm, Contrast, EngineScenario, Group
from engine_fixtures.errors import InvariantViolated

def stub(ms):  # a launcher only: the engine's PYTHONPATH has the repository root (perf_tests.support.launcher)
    return ("-m", "perf_tests.support.stub_engine", "--stub-token-ms", str(ms))

METRICS = ("tpot_gmean_ms",)
GROUP = Group("stub", arms=(
    Arm("fast", launch=EngineScenario("fast", concurrency=2, output_tokens=8, launcher=stub(2), proof=False)),
    Arm("slow", launch=EngineScenario("slow", concurrency=2, output_tokens=8, launcher=stub(6), proof=False))),
    contrasts=(Contrast("slow >= 0.9x fast", "fast", "slow", 0.9, METRICS),
               Contrast("fast >= slow", "slow", "fast", 1.0, METRICS)))

@pytest.mark.perf
def test_fast_holds(perf_gpu_tier):
    (row,) = perf_gpu_tier.check(GROUP, "fast >= slow")
    assert "over 1 fresh engine group(s), variance pooled with 8 null pair(s) of this host's A/A history" in row.message
    assert "and this run's 2 same-build pair(s)" in row.message

@pytest.mark.perf
@pytest.mark.xfail(raises=InvariantViolated, strict=True, reason="the slow stub takes 3x the token time")
def test_slow_is_caught(perf_gpu_tier):
    perf_gpu_tier.check(GROUP, "slow >= 0.9x fast")
"""


def test_a_group_of_launches_decides_its_contrasts_with_this_hosts_null_history(pytester: pytest.Pytester) -> None:
    info = MachineInfo.collect()
    history = NullHistory(pytester.path / "bl", info.key, host_of(info.as_dict()))
    history.record("model=qwen-tiny/c=2/out=8/quota=none",  # the group's load shape (shape_key)
                   null_entry("seed", 1, 0.3, {"tpot_gmean_ms": [0.02, -0.02, 0.01, -0.01, 0.015, -0.015]}))
    pytester.makepyfile(test_group=TEST_FILE)
    out = pytester.path / "out"
    r = pytester.runpytest_subprocess(
        "-rsx", "-p", "no:cacheprovider", "--perf-baseline-dir", str(pytester.path / "bl"), "--perf-results-dir",
        str(out), "--perf-model-shape", "tiny", "--perf-ab-instances", "1", "--perf-ab-max-instances", "1",
        "--perf-ab-blocks", "1", "--perf-window-s", "0.3", "--perf-warmup-s", "0.1", "--perf-strict", "yes",
        "--perf-cpu-quota", "none", "--perf-profile", "off", *STEAL, timeout=600)
    r.assert_outcomes(passed=1, xfailed=1)
    (path,) = out.glob("results-*.json")
    members = {res["metadata"]["group_member"]: res for res in json.loads(path.read_text())["results"]
               if "group_member" in res["metadata"]}
    assert set(members) == {"fast", "slow"}
    for res in members.values():
        meta = res["metadata"]
        assert meta["instance_groups"] == 1
        assert set(meta["window_instance_group"]) == {0}
        assert len(meta["window_block"]) == 4  # one mirrored block: each replica twice
        assert meta["replicas"] == 2
        assert sorted(set(meta["window_replica"])) == [f"{meta['group_member']}@{k}" for k in (1, 2)]
        assert len(set(meta["window_instance"])) == 2  # two engines of each launch, alive together
    entries = json.loads(history.path_for("model=qwen-tiny/c=2/out=8/quota=none").read_text())["entries"]
    assert [e["run"] for e in entries[:1]] == ["seed"]
    assert len(entries) == 2
    added = entries[1]
    assert added["replicas"] == 2
    pooled, aside = added["units"]["tpot_gmean_ms"], added.get("warmup", {}).get("tpot_gmean_ms", [])
    assert len(pooled) + len(aside) == 2  # fast@2 - fast@1, slow@2 - slow@1
    assert all(abs(e) < 0.5 for e in pooled + aside)  # same launch: no 3x token time between them
