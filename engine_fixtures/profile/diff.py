"""The differential profile: per role, per function, CPU-seconds per request of the candidate minus the reference.

``differential(candidate, reference) -> list[RoleDiff]`` pairs the roles the two ``RoleProfiles`` share. For every
function (``Frame``) of either side it computes self and total CPU-s per request on each side (``Profile.cpu_s``:
samples / rate / requests, so two windows of different lengths or request counts compare) and the change. Functions
are ranked by the growth of their *self* time (where the CPU is spent, not every caller above it); ``share`` is
that growth over the role's gross growth (the sum of every function's increase), so the growers' shares add up to
100 % and stay readable when other functions shrank: under a binding CPU quota the role's net CPU per request
barely moves (stock SGLang's copy took 47 ms/request that the buffer copy had spent elsewhere), and a share of the
net change would read -645 %. The role's net change is reported beside it. Each growing function also names its
hottest caller on the candidate side (``caller``), e.g. ``ShmPointerMMData.__init__`` for a copy it calls.

Sampling noise: a function with n samples has a Poisson error of ~sqrt(n) samples; ``noise_s`` is that error of the
change in CPU-s per request, and ``significant`` marks changes above 3x it, so a ranking reader can tell a real
mover from jitter. Nothing here judges a verdict; the verdicts are decided before a profile is taken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import pairwise

from engine_fixtures.profile.model import Frame, FuncKey, Profile, RoleProfiles


@dataclass(frozen=True)
class FunctionDiff:
    frame: Frame
    candidate_s: float  # self CPU-s per request, candidate
    reference_s: float  # self CPU-s per request, reference
    candidate_total_s: float
    reference_total_s: float
    share: float  # growth of self time over the role's gross growth (0 when nothing grew; negative: it shrank)
    noise_s: float  # ~1 sigma of the change from sampling (Poisson)
    caller: Frame | None = None  # the candidate's hottest direct caller of this function

    @property
    def change_s(self) -> float:
        return self.candidate_s - self.reference_s

    @property
    def significant(self) -> bool:
        return abs(self.change_s) > 3.0 * self.noise_s


@dataclass(frozen=True)
class RoleDiff:
    role: str
    candidate: Profile
    reference: Profile
    functions: tuple[FunctionDiff, ...]  # ranked: largest growth of self time first

    @property
    def candidate_s(self) -> float:
        return self.candidate.cpu_s_per_request

    @property
    def reference_s(self) -> float:
        return self.reference.cpu_s_per_request

    @property
    def change_s(self) -> float:
        return self.candidate_s - self.reference_s

    @property
    def empty(self) -> bool:
        return self.candidate.samples == 0 or self.reference.samples == 0

    def growers(self, n: int) -> list[FunctionDiff]:
        return [f for f in self.functions if f.change_s > 0][:n]


def _callers(p: Profile) -> dict[FuncKey, Frame]:
    """Each function's most-sampled direct caller in ``p`` (the caller's frame at the calling line)."""
    counts: dict[tuple[FuncKey, Frame], int] = {}
    for stack, n in p.stacks.items():
        for parent, child in pairwise(stack):
            if parent.key != child.key:
                counts[(child.key, parent)] = counts.get((child.key, parent), 0) + n
    best: dict[FuncKey, tuple[int, Frame]] = {}
    for (child, parent), n in counts.items():
        if n > best.get(child, (-1, parent))[0]:
            best[child] = (n, parent)
    return {c: p for c, (_, p) in best.items()}


def role_diff(candidate: Profile, reference: Profile) -> RoleDiff:
    cf, rf = candidate.functions(), reference.functions()
    callers = _callers(candidate)
    out = []
    for key in set(cf) | set(rf):
        c, r = cf.get(key), rf.get(key)
        frame = (c or r).frame  # type: ignore[union-attr]
        cs, rs = c.self_samples if c else 0, r.self_samples if r else 0
        ct, rt = c.total_samples if c else 0, r.total_samples if r else 0
        grow = candidate.cpu_s(cs) - reference.cpu_s(rs)
        noise = math.hypot(candidate.cpu_s(math.sqrt(cs)), reference.cpu_s(math.sqrt(rs)))
        out.append(FunctionDiff(frame, candidate.cpu_s(cs), reference.cpu_s(rs), candidate.cpu_s(ct),
                                reference.cpu_s(rt), grow, noise, callers.get(key)))
    gross = sum(f.change_s for f in out if f.change_s > 0)
    out = [replace(f, share=f.change_s / gross if gross else 0.0) for f in out]
    out.sort(key=lambda f: (-f.change_s, -f.candidate_total_s, f.frame.key))
    return RoleDiff(candidate.role, candidate, reference, tuple(out))


def differential(candidate: RoleProfiles, reference: RoleProfiles) -> list[RoleDiff]:
    """Per shared role (the candidate's order), candidate minus reference (module docstring)."""
    return [role_diff(p, reference.profiles[role]) for role, p in candidate.profiles.items()
            if role in reference.profiles]


# Where a role's CPU waits on the GPU (torch's Event, Stream and device ``synchronize``): growth there is GPU time.
GPU_WAIT_MODULES = ("torch/cuda/",)
GPU_WAIT_FUNCTIONS = frozenset({"synchronize", "wait", "wait_event", "wait_stream"})


def gpu_side(diffs: list[RoleDiff]) -> str:
    """One line where a role's largest significant growth is a wait on the GPU (a decode kernel slowed, say): the
    slowdown is then GPU-side, and the functions ranked beside it did not change (issue 52); else ''."""
    for d in diffs:
        top = d.growers(1)
        if top and top[0].significant and top[0].frame.function in GPU_WAIT_FUNCTIONS and \
                top[0].frame.short_file.startswith(GPU_WAIT_MODULES):
            f = top[0]
            return (f"{d.role}: the largest growth is {f.frame.function} ({f.frame.where}, "
                    f"{f.reference_s * 1e3:.2f} -> {f.candidate_s * 1e3:.2f} ms/req), the CPU waiting on the GPU: the "
                    "slowdown is GPU-side (its kernels or their launches); GPU busy and TPOT say where, not a Python "
                    "function")
    return ""
