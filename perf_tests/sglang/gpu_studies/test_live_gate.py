"""Study, not the default job: does a live contrast on one engine catch a small slowdown, and stay quiet without one?

On one engine (cpu transport, buffer copy, no quota) a calibration pair of identical arms measures the engine's TPOT;
then each trial switches three arms live in mirrored blocks: ``zero`` and ``zero-again`` (the named patch
``slow-scheduler`` at 0 ms: the same code twice) and ``patched`` (the same patch at 5 % of the measured TPOT, a busy
wait in every scheduler step). Every A/A contrast must pass and every patched one must be flagged on TPOT; the test
prints the trials and fails on any miss or false alarm. Run it with
``python3 -m tox -e perf-gpu -- perf_tests/sglang/gpu_studies/test_live_gate.py`` (about 6 minutes on the 4B shape).
"""

from __future__ import annotations

import statistics

import pytest

from engine_fixtures import Arm, Contrast, EngineScenario, Group
from engine_fixtures.errors import Inconclusive, InvariantViolated

TRIALS = 2
SIZE = 0.05  # the patch: 5 % of the measured TPOT p50
METRICS = ("tpot_p50_ms", "ttft_p50_ms", "requests_per_s")
ENGINE = EngineScenario("gate", transport="cpu", copy="buffer")
ZERO = (("slow-scheduler", 0.0),)
AA = "zero-again no worse than zero"
PATCHED = "patched no worse than zero"

pytestmark = [pytest.mark.gpu(1), pytest.mark.gpu_tier]


def calibration() -> Group:
    return Group("gate-calibration", ENGINE, arms=(Arm("zero", copy="buffer", patches=ZERO),
                                                       Arm("zero-again", copy="buffer", patches=ZERO)),
                     contrasts=(Contrast(AA, "zero", "zero-again", metrics=METRICS),))


def trial(i: int, ms: float) -> Group:
    return Group(f"gate-trial{i}", ENGINE,
                     arms=(Arm("zero", copy="buffer", patches=ZERO), Arm("zero-again", copy="buffer", patches=ZERO),
                           Arm("patched", copy="buffer", patches=(("slow-scheduler", ms),))),
                     contrasts=(Contrast(AA, "zero", "zero-again", metrics=METRICS),
                                Contrast(PATCHED, "zero", "patched", metrics=METRICS)))


def outcome(perf_gpu_tier, group: Group, label: str) -> str:  # type: ignore[no-untyped-def]
    try:
        rows = perf_gpu_tier.check(group, label)
    except InvariantViolated as exc:
        return "flagged: " + " | ".join(line.strip() for line in str(exc).splitlines()[1:])
    except Inconclusive as exc:
        return "inconclusive: " + " | ".join(line.strip() for line in str(exc).splitlines()[1:])
    tpot = next(v for v in rows if v.metric == "tpot_p50_ms")
    return f"passed: {tpot.message}"


@pytest.mark.perf
def test_live_patch_gate(perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    cal = calibration()
    aa = [outcome(perf_gpu_tier, cal, AA)]
    tpot = statistics.median(w["tpot_p50_ms"] for _, w in perf_gpu_tier.measure(cal).windows["zero"])
    ms = round(SIZE * tpot, 4)
    patched = []
    for i in range(1, TRIALS + 1):
        g = trial(i, ms)
        aa.append(outcome(perf_gpu_tier, g, AA))
        patched.append(outcome(perf_gpu_tier, g, PATCHED))
    report = [f"TPOT p50 {tpot:.3f} ms; patch slow-scheduler={ms} ms ({SIZE:.0%})",
              *(f"A/A trial {i}: {o}" for i, o in enumerate(aa)),
              *(f"patched trial {i}: {o}" for i, o in enumerate(patched, 1))]
    print("\n".join(report))
    false_alarms = [o for o in aa if not o.startswith("passed")]
    misses = [o for o in patched if not (o.startswith("flagged") and "tpot_p50_ms " in o)]
    assert not false_alarms, "\n".join(report)
    assert not misses, "\n".join(report)
