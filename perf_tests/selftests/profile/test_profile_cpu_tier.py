"""The CPU tier's integration: the cpu_tier rigs profiled after the rounds are decided, real py-spy.

Small rigs (256 px, C=2, quota 0.5), one measured round, 1.5 s of profiled requests per rig: the injected arm's
differential against its clean twin names the injected spin, the invariant's entry exists, the profiled
rounds never enter the results, and (``off``) nothing is profiled at all.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engine_fixtures import Contrast
from engine_fixtures.cpu_tier.arms import CpuTierArm
from engine_fixtures.inject import parse_injection
from engine_fixtures.options import Settings
from engine_fixtures.profile.cpu_tier import after_verdicts
from engine_fixtures.profile.report import ProfileBook
from engine_fixtures.scenarios import cpu_tier
from engine_fixtures.scenarios.cpu_tier import CpuTierScenario

pytestmark = pytest.mark.cgroup()

TORCH, BUFFER = (CpuTierArm(copy=c, threads="cpus", quota=0.5, resolution=256, concurrency=2)
                 for c in ("torch", "buffer"))
INV = Contrast("buffer >= torch (test)", TORCH.id, BUFFER.id, 1.0, ("requests_per_s",))
SCENARIO = CpuTierScenario("profile-test", (TORCH, BUFFER), None, (INV,), warmup=0, requests=8)
SPIN_MS = 15.0


def _measure(tmp_path: Path, profile: str) -> tuple[dict, ProfileBook]:
    settings = Settings(repeats=1, max_repeats=1, profile=profile, inject=parse_injection(f"slow:buffer={SPIN_MS:g}"))
    book = ProfileBook()
    after = after_verdicts(SCENARIO, settings, lambda _r, _a: [], book, lambda s: tmp_path / "pools" / f"{s}.json",
                           tmp_path / "profiles", seconds=1.5)
    return cpu_tier.measure(SCENARIO, settings, lambda _r, _a: [], after), book


def test_injected_arm_minus_its_clean_twin_names_the_spin(tmp_path: Path, leak_check) -> None:  # type: ignore[no-untyped-def]
    results, book = _measure(tmp_path, "always")
    assert [len(r.samples["requests_per_s"]) for r in results.values()] == [1, 1]  # profiled rounds not in results
    titles = [e.title for e in book.entries]
    assert titles[0].startswith("buffer >= torch (test): ")
    injected = next(e for e in book.entries if "slow:buffer=15" in e.title)
    assert BUFFER.scenario in injected.keys
    producer = next(d for d in injected.diffs if d.role == "producer")
    top = producer.growers(1)[0]
    assert top.frame.function == "spin", book.failure_text([BUFFER.scenario])
    assert top.frame.file.endswith("engine_fixtures/inject.py")
    assert "  1. spin (engine_fixtures/inject.py:" in book.failure_text([BUFFER.scenario])


def test_off_profiles_nothing(tmp_path: Path, leak_check) -> None:  # type: ignore[no-untyped-def]
    results, book = _measure(tmp_path, "off")
    assert book.entries == []
    assert not (tmp_path / "profiles").exists()
    assert set(results) == {TORCH.id, BUFFER.id}


def test_on_regression_profiles_only_what_failed(tmp_path: Path) -> None:
    """No verdict failed (the judge returns none; the invariant is judged for real and may pass or not): only
    the invariant's entry can appear, never an arm no failing verdict names."""
    settings = replace(Settings(), profile="on-regression", strict=False)
    book = ProfileBook()
    after = after_verdicts(SCENARIO, settings, lambda _r, _a: [], book, lambda s: tmp_path / f"{s}.json", tmp_path)

    class _R:
        def __init__(self, values: list[float]) -> None:
            self.samples = {"requests_per_s": tuple(values)}
            self.metadata = {"alpha_per_look": 0.01}

    # buffer clearly faster than torch in every round: the invariant passes, so nothing is profiled
    after([_R([10.0, 10.1, 9.9, 10.0, 10.2]), _R([20.0, 20.2, 19.8, 20.1, 20.0])], {}, lambda _arm: None)
    assert book.entries == []
