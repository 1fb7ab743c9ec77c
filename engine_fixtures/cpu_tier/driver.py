"""Driver of the mechanism benchmark: one ``Rig`` per arm, rounds interleaved across arms (A B C, C B A, ...),
measured until every verdict is decided or the budget is spent; one ``RunResult`` per arm; nothing leaked.

``run_arms(arms, budget, warmup, requests, control=None, injection=None, undecided=None)``:
- every round runs one window per arm; a round is half a mirrored block (``judge.blocks.rounds``: the order
  reverses each round), so drift hits all arms alike;
- ``control``: the arm every other arm is expressed against, round by round: ``rel.requests_per_s`` and
  ``rel.latency_p50_ms`` are that arm's value over the control's in the same round (a machine that is faster
  today moves both; a change in one arm's code moves the ratio);
- ``budget`` (``judge.sequential.Budget``): ``budget.initial`` rounds, then ``budget.step`` more at a time
  while ``undecided(results, alpha_per_look)`` names cells it cannot decide yet, up to ``budget.maximum``;
  each result's metadata says how many rounds and looks it took and the per-look alpha its verdicts use;
- ``injection`` (``inject.Injection``): a spin or a forced copy per arm, recorded in the result's metadata;
- ``after(results, rigs, twin)``: called once the measured rounds are decided, with the final results and the
  still-running rigs (``twin(arm)`` starts a clean rig of an arm, no injection): the profiler's dedicated rounds,
  which never enter the results.
Errors: ``MeasurementError`` (zero completed or failed requests), ``ProcessCrashed`` (with the log tails),
``LeakError`` after teardown if a descendant process, a ``perf-mech-<pid>-*`` cgroup, a ``perf_mech_`` (or
SGLang's ``sgl_shm_mm_``) segment or a POSIX semaphore that one of the rig's processes mapped outlived the run
(narrowed to this run). Leaks are removed on every path; when the run itself raised, that error wins.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from statistics import median

from engine_fixtures.cpu_tier.arms import CpuTierArm, pixel_shape, visible_cpus
from engine_fixtures.cpu_tier.producer import MECH_PREFIX
from engine_fixtures.cpu_tier.rig import Rig
from engine_fixtures.errors import ConfigError, LeakError
from engine_fixtures.inject import Injection
from engine_fixtures.isolation import owner
from engine_fixtures.isolation.cgroups import PREFIX
from engine_fixtures.isolation.leaks import Leaks, LeakSnapshot, semaphore_files
from engine_fixtures.judge.blocks import ratios_by_block
from engine_fixtures.judge.blocks import rounds as mirrored_rounds
from engine_fixtures.judge.families import CPU_REL_METRICS
from engine_fixtures.judge.metrics import REL_PREFIX
from engine_fixtures.judge.sequential import Budget, measure_until_decided
from engine_fixtures.store.results import RunResult
from engine_fixtures.transport.arms import SGLANG_PREFIX

CGROUP_NAME = f"mech-{os.getpid()}"  # cgroups perf-mech-<pid>-<uuid>: this process's own
Undecided = Callable[[list[RunResult], float], Sequence[str]]
# after(results, rigs by arm id, twin): called once the rounds are decided, rigs still running (profiling)
After = Callable[[list[RunResult], dict[str, Rig], Callable[[CpuTierArm], Rig]], None]


def _own_leaks(before: LeakSnapshot, rigs: list[Rig]) -> Leaks:
    """``LeakSnapshot``'s view narrowed to what this run can have made: its descendants, its own cgroups, its
    segments and the semaphores its processes mapped (other suites on a shared box are not ours to judge)."""
    found = before.new_since(LeakSnapshot.take(before.cgroup_prefix))
    sems = set(semaphore_files({i for r in rigs for i in r.semaphores}))
    ours = (MECH_PREFIX, SGLANG_PREFIX) if any(r.arm.copy == "sglang" for r in rigs) else (MECH_PREFIX,)
    return Leaks(shm=tuple(n for n in found.shm if n.startswith(ours) or n in sems),
                 processes=found.processes, cgroups=found.cgroups)


def _check(arms: Sequence[CpuTierArm], warmup: int, requests: int, control: CpuTierArm | None) -> None:
    if not arms or warmup < 0 or requests < 1:
        raise ConfigError(f"run_arms needs arms, warmup >= 0, requests >= 1; got {len(arms)} arms, "
                          f"warmup={warmup}, requests={requests}")
    if len(set(arms)) != len(arms):
        raise ConfigError("run_arms got the same arm twice; pass each arm once")
    if control is not None and control not in arms:
        raise ConfigError(f"the control arm {control.id} must be one of the measured arms")


def run_arms(arms: Sequence[CpuTierArm], budget: Budget, warmup: int = 1, requests: int = 12, *,
             control: CpuTierArm | None = None, injection: Injection | None = None,
             undecided: Undecided | None = None, after: After | None = None) -> list[RunResult]:
    """Measure ``arms`` interleaved until decided (see the module docstring)."""
    _check(arms, warmup, requests, control)
    injection = injection or Injection()
    before = LeakSnapshot.take(cgroup_prefix=f"{PREFIX}{CGROUP_NAME}-")
    windows: list[list[dict[str, float]]] = [[] for _ in arms]
    rigs: list[Rig] = []
    try:
        with owner.temp_dir("mech") as tmp, ExitStack() as stack:
            for i, arm in enumerate(arms):
                impl, spin_ms = injection.for_arm(arm.copy)
                rigs.append(Rig.start(arm, stack, tmp, i, CGROUP_NAME, copy_impl=impl, spin_ms=spin_ms))
            rounds = [0]

            def measure(n: int) -> None:
                k = n + (warmup if rounds[0] == 0 else 0)
                # mirrored blocks cut into rounds (forward, reversed): the one block order of both tiers
                for order in mirrored_rounds(range(len(rigs)), rounds[0] + k)[rounds[0]:]:
                    for i in order:
                        windows[i].append(rigs[i].window(requests))
                rounds[0] += k

            def judge(alpha: float) -> Sequence[str]:
                if undecided is None:
                    return ()
                return undecided(_results(arms, rigs, windows, warmup, requests, control, injection, {}), alpha)

            progress = measure_until_decided(budget, measure, judge)
            seq = {"rounds": progress.measured, "looks": progress.looks, "alpha_per_look": budget.alpha_per_look(),
                   "budget_rounds": budget.maximum, "undecided_at_budget": list(progress.undecided)}
            results = _results(arms, rigs, windows, warmup, requests, control, injection, seq)
            if after is not None:  # after the verdicts are decided, on the same rigs: measured rounds stay clean

                def twin(arm: CpuTierArm) -> Rig:  # the arm as declared (no injection), torn down with the others
                    rigs.append(Rig.start(arm, stack, tmp, len(rigs), CGROUP_NAME))
                    return rigs[-1]

                after(results, dict(zip([a.id for a in arms], rigs, strict=False)), twin)
    finally:
        leaks = _own_leaks(before, rigs)
        leaks.reap()
    if leaks:
        raise LeakError(f"cpu_tier left these behind (now removed):\n{leaks.describe()}\na rig process was "
                        "not stopped, a segment not unlinked or a multiprocessing primitive not released")
    return results


def _results(arms: Sequence[CpuTierArm], rigs: list[Rig], windows: list[list[dict[str, float]]], warmup: int,
             requests: int, control: CpuTierArm | None, injection: Injection, seq: dict) -> list[RunResult]:
    ctrl = windows[list(arms).index(control)][warmup:] if control is not None else None
    results = []
    for arm, rig, ws in zip(arms, rigs, windows, strict=True):
        measured = ws[warmup:]
        samples = {n: tuple(w[n] for w in measured) for n in measured[0]}
        if ctrl is not None and arm != control:
            rounds = range(len(measured))  # each round the arm against the control, as a ratio
            for name in CPU_REL_METRICS:
                samples[REL_PREFIX + name] = ratios_by_block(name, [c[name] for c in ctrl], rounds,
                                                             [w[name] for w in measured], rounds)
        stages = rig.stage_ms[warmup:] or rig.stage_ms
        impl, spin_ms = injection.for_arm(arm.copy)
        meta = {"decode_ms_median": median(s[0] for s in stages), "shm_create_ms_median": median(s[1] for s in stages),
                "threads_applied": arm.thread_count(), "quota_cores": arm.quota,
                "cgroup_version": rigs[0].quota.version, "pixel_values_shape": list(pixel_shape(arm.resolution)),
                "requests_per_window": requests, "visible_cpus": visible_cpus(), "warmup_windows": warmup,
                "interleaved_with": [a.id for a in arms if a != arm],
                "control": control.id if control is not None and arm != control else None, **seq}
        if impl != arm.copy or spin_ms:
            meta["injected"] = {"copy_impl": impl, "spin_ms": spin_ms}
        results.append(RunResult(arm.scenario, arm.axes, samples=samples,
                                 warmup={n: tuple(w[n] for w in ws[:warmup]) for n in ws[0]}, metadata=meta))
    return results


def run_arm(arm: CpuTierArm, rounds: int, warmup: int = 1, requests: int = 12) -> RunResult:
    return run_arms([arm], Budget.fixed(rounds), warmup, requests)[0]
