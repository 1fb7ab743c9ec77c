"""The CPU tier's profiles: the cpu_tier rigs profiled in dedicated rounds after the verdicts are decided.

``after_verdicts(scenario, settings, judge, book, pool_path)`` returns the ``after`` hook of
``cpu_tier.driver.run_arms``. Once the measured rounds are decided it judges them (the same judge the runner
used), and, per ``--perf-profile`` (``engine.ProfileSettings.wanted``), profiles the rigs that explain a failing
verdict, each in rounds of its own (``PROFILE_SECONDS`` of requests, never entering the results), the producer
(inside its quota) and the consumer in parallel, and adds to ``book``:

- per invariant (``buffer >= torch``, ``stock SGLang >= buffer``): its candidate arm minus its reference arm;
- per injected arm (``--perf-inject``): the arm as run minus the same arm started clean (a twin rig): the
  injection's own cost, by function;
- per arm with a profile stored beside its pool: the arm minus that stored profile (history mode).

With ``--perf-update-baselines``, ``--perf-profile always`` and no injection, each arm's profile is stored beside
its pool for later history-mode differentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from engine_fixtures.cpu_tier.rig import Rig
from engine_fixtures.judge.paired import judge_rounds
from engine_fixtures.profile import record, store
from engine_fixtures.profile.diff import differential
from engine_fixtures.profile.engine import ProfileSettings
from engine_fixtures.profile.model import RoleProfiles
from engine_fixtures.profile.report import ProfileBook

PROFILE_SECONDS = 8.0


def drive(rig: Rig) -> Callable[[float], int]:
    """``drive_load`` of one rig: windows of 2 x concurrency requests until ``seconds`` have passed."""
    n = 2 * rig.arm.concurrency

    def run(seconds: float) -> int:
        done, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            rig.window(n)
            done += n
        return done

    return run


def profile_rig(rig: Rig, ps: ProfileSettings, label: str, workdir: Path) -> RoleProfiles:
    rig.window(2 * rig.arm.concurrency)  # one unrecorded window first: a fresh rig's first window runs slow
    roles = {"producer": tuple(rig.quota.pids()) or (rig.producer.pid,), "consumer": (rig.consumer.pid,)}
    return record.record(roles, drive(rig), rate_hz=ps.rate_hz, seconds=ps.seconds, workdir=workdir / label,
                         label=label)


def after_verdicts(scenario, settings, judge, book: ProfileBook,  # type: ignore[no-untyped-def]
                   pool_path: Callable[[str], Path], workdir: Path, seconds: float = PROFILE_SECONDS):
    """The ``after`` hook (module docstring); ``judge(result, alpha)`` as in ``scenarios.mechanism``; ``seconds``
    of requests per profiled rig."""
    ps = ProfileSettings.from_settings(settings, workdir, seconds)

    def after(results, rigs: dict[str, Rig], twin) -> None:  # type: ignore[no-untyped-def]
        if ps.mode == "off":
            return
        by = {a.id: r for a, r in zip(scenario.arms, results, strict=True)}
        alpha = float(results[0].metadata.get("alpha_per_look", 0.01))
        status = {a.id: {v.status for v in judge(by[a.id], alpha)} for a in scenario.judged_arms}
        inv_status = {c.label: next((s for s in ("regression", "inconclusive") if any(
            v.status == s for v in judge_rounds(c.label, c.metrics, by[c.reference].samples, by[c.candidate].samples,
                                                c.bound_of, alpha))), "pass") for c in scenario.contrasts}
        for inv in scenario.contrasts:  # a contrast's verdict is its arms' too
            for arm_id in (inv.reference, inv.candidate):
                status.setdefault(arm_id, set()).add(inv_status[inv.label])
        taken: dict[str, RoleProfiles] = {}

        def prof(arm_id: str, rig: Rig, label: str) -> RoleProfiles:
            if label not in taken:
                taken[label] = profile_rig(rig, ps, label.replace("/", "_"), workdir)
            return taken[label]

        def add(keys: Iterable[str], title: str, cand: RoleProfiles, ref: RoleProfiles) -> None:
            book.add(keys, title, differential(cand, ref), (*cand.notes, *ref.notes))

        for inv in scenario.contrasts:
            if ps.wanted({inv_status[inv.label]}):
                cand = prof(inv.candidate, rigs[inv.candidate], inv.candidate)
                ref = prof(inv.reference, rigs[inv.reference], inv.reference)
                add((inv.label,), f"{inv.label}: {inv.candidate} minus {inv.reference}", cand, ref)
        injection = settings.inject
        for arm in scenario.judged_arms:
            wanted = ps.wanted(status.get(arm.id, ()))
            impl, spin_ms = injection.for_arm(arm.copy) if injection else (arm.copy, 0.0)
            if wanted and (impl != arm.copy or spin_ms):
                what = injection.describe() if injection else ""
                cand = prof(arm.id, rigs[arm.id], arm.id)
                ref = prof(arm.id, twin(arm), arm.id + " (clean twin)")
                add((arm.scenario, arm.id), f"{arm.id} with {what} minus the same arm without it", cand, ref)
            stored = store.load_beside(pool_path(arm.scenario))
            if wanted and stored is not None:
                add((arm.scenario,), f"{arm.id} minus its pool's stored profile", prof(arm.id, rigs[arm.id], arm.id),
                    stored)
            if settings.update_baselines and not injection and ps.mode == "always":
                store.save_beside(pool_path(arm.scenario), prof(arm.id, rigs[arm.id], arm.id))

    return after
