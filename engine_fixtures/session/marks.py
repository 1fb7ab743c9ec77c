"""Markers of this suite, registered with their signatures (``pytest --markers`` documents them)."""

from __future__ import annotations

import pytest

from engine_fixtures.engine.build import EngineBuild
from engine_fixtures.options import OPTIONS_BY_NAME, Settings, display
from engine_fixtures.quota import QuotaSetting

MARKERS: dict[str, str] = {
    "gpu(count=1)": "needs COUNT NVIDIA GPUs visible through NVML; skipped with the reason otherwise.",
    "gpu_tier": "a GPU-tier test: starts the real SGLang engine; skipped when SGLang or a GPU is missing.",
    "cgroup": "needs a writable cgroup CPU controller (skipped with the reason otherwise, and under "
    "--perf-cpu-quota none).",
    "perf(floor=None)": "a measured scenario with verdicts; FLOOR (percent) overrides --perf-floor and "
    "every log-scale metric's declared floor (the smallest change ever flagged) for this test.",
    "cpu_tier": "a CPU-tier test: SGLang's SHM copy path measured between real processes through real /dev/shm under "
    "a real cgroup quota.",
    "slow": "takes minutes; the 'unit' tox env deselects it, and a measured one (perf, cpu_tier, gpu_tier) runs "
    "only with --perf-scale full (skipped with that reason otherwise).",
    "sglang": "uses SGLang's own classes (ShmPointerMMData): skipped when SGLang is not importable here, an error "
    "when the installed release moved them (a layout this suite does not know), so nothing is measured in the "
    "wrong place; --perf-require-sglang VERSION makes the skip an error too.",
    "soak": "the harness under faults for many cycles (the full soak; always also marked slow).",
    "smoke": "the GPU tier's per-pull-request subset: regressions 1 and 2 on small live groups of their own; the "
    "nightly seed matrix deselects it (-m 'not smoke').",
    "weekly": "the GPU tier's weekly step: the seed's figures as measured rows and the transport group "
    "(tox -e perf-gpu-weekly); the nightly deselects it (-m 'not weekly').",
    "ab": "the A/B of two builds: with --perf-reference BUILD, perf_gpu_tier(scenario) measures that build against "
    "--perf-candidate as a group of two launches; skipped without it, while every other measured test is skipped "
    "with it (they judge one build and cannot honour an A/B).",
}

# A test with one of these measures: it never runs under xdist, and its run takes the machine lock first.
MEASURED: tuple[str, ...] = ("perf", "cpu_tier", "gpu_tier")


# Keyword arguments each marker accepts; anything else is a usage error naming the test (pytest-benchmark's rule).
MARKER_KWARGS: dict[str, frozenset[str]] = {
    "gpu": frozenset({"count"}),
    "perf": frozenset({"floor"}),
    "cgroup": frozenset(),
    "gpu_tier": frozenset(),
    "cpu_tier": frozenset(),
    "sglang": frozenset(),
    "soak": frozenset(),
    "smoke": frozenset(),
    "weekly": frozenset(),
    "ab": frozenset(),
}
AB_KEY = pytest.StashKey[tuple[EngineBuild, EngineBuild]]()  # an ab test's (reference, candidate), at collection


def is_measured(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) is not None for m in MEASURED)


def measured(items: list[pytest.Item]) -> list[pytest.Item]:
    """The measured tests of a collection that are not skipped at collection: what makes a session measure."""
    return [i for i in items if is_measured(i) and i.get_closest_marker("skip") is None]


def resolve_reference(item: pytest.Item, settings: Settings, absent: str | None = None,
                      beside: bool = False) -> str | None:
    """``--perf-reference``, resolved once per test at collection: an ``ab`` test gets the two builds in its stash
    (``AB_KEY``, read by ``perf_gpu_tier``); the reason to skip a test that cannot take it, or an ``ab`` test without
    it (``absent``: why ``stored-if-kept`` found no kept build, ``preflight.kept_reference_absent``). ``beside``
    (``stored-if-kept``, the nightly's A/B): the tests that judge one build run too, beside the A/B."""
    is_ab = item.get_closest_marker("ab") is not None
    if settings.reference is None:
        return (absent or "an A/B of two builds needs --perf-reference BUILD (e.g. stored for this runner's kept "
                "reference build, installed for a null A/B that records this host's A/A history, or venv:DIR for "
                "another install)") if is_ab else None
    if is_ab:
        item.stash[AB_KEY] = (settings.reference, settings.candidate)
        return None
    if is_measured(item) and not beside:
        return (f"--perf-reference {display(settings.reference)} asks for an A/B of two builds; this "
                "test judges one build (its contrasts, this host's pool) and cannot honour it: only tests marked ab "
                "run with it")
    return None


def scale_skip_reason(item: pytest.Item, scale: str) -> str | None:
    """A slow measured case (the full grid, the large copies) runs at ``--perf-scale full`` only."""
    if scale != "full" and item.get_closest_marker("slow") is not None and is_measured(item):
        return "a slow measured case (full scale): run it with --perf-scale full"
    return None


def marker_errors(item: pytest.Item) -> list[str]:
    """``"<nodeid>: perf mark can't have 'x' keyword argument (accepted: floor)"`` for each bad kwarg."""
    errors = []
    for name, accepted in MARKER_KWARGS.items():
        for mark in item.iter_markers(name):
            for key in sorted(set(mark.kwargs) - accepted):
                errors.append(f"{item.nodeid}: {name} mark can't have {key!r} keyword argument "
                              f"(accepted: {', '.join(sorted(accepted)) or 'none'})")
    return errors


def xdist_reason(config: object) -> str | None:
    """Measurements and parallel workers on the same CPUs do not mix (pytest-benchmark's rule)."""
    getoption = getattr(config, "getoption", None)
    workers = getoption("numprocesses", None) if getoption else None
    if workers:
        return (f"measurements are not reliable under pytest-xdist (-n {workers}): the workers share the CPUs "
                "being measured; run the perf tests with -n0")
    return None


def gpu_tier_skip_reason() -> str | None:
    """Why the real engine cannot start here, or None. Looks for SGLang without importing it."""
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        return ("SGLang is not installed in this environment; install the GPU tier with "
                "`pip install -e '.[gpu]'` (or run `tox -e perf-gpu`) on a machine with an NVIDIA GPU")
    return None


def sglang_skip_reason() -> str | None:
    """Why SGLang's own classes cannot be used here (not installed, or a dependency missing), or None."""
    from engine_fixtures.transport.sglang_compat import find_shm_class

    return find_shm_class().skip_reason


def sglang_layout_error() -> str | None:
    """What moved in the installed SGLang (a layout this suite does not know), or None."""
    from engine_fixtures.transport.sglang_compat import find_shm_class

    return find_shm_class().error


def require_sglang(expected: str) -> str | None:
    """Why this environment is not the SGLang ``expected`` (installed and importable), or None."""
    from engine_fixtures import sglang_version
    from engine_fixtures.transport.sglang_compat import find_shm_class

    found = sglang_version.installed()
    if found != expected:
        return (f"--perf-require-sglang {expected}: this environment has SGLang {found or '(not installed)'}; "
                "install that release (the sglangXXXX-cpu envs in tox.ini on a CPU box) or drop the option")
    lookup = find_shm_class()
    if lookup.cls is None:
        return f"--perf-require-sglang {expected}: SGLang's own classes are not usable: {lookup.reason}"
    return None


def gpu_skip_reason(count: int = 1) -> str | None:
    """Why COUNT GPUs are not usable here, or None. Uses NVML, never initialises CUDA in pytest."""
    from engine_fixtures.nvml import gpu_inventory

    inventory = gpu_inventory()
    if isinstance(inventory, str):
        return (f"needs {count} NVIDIA GPU(s): {inventory}; run the GPU tier on a machine with an NVIDIA GPU and "
                f"its driver (`tox -e perf-gpu` on a self-hosted GPU runner)")
    if len(inventory) < count:
        import os

        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        return (f"needs {count} NVIDIA GPU(s), found {len(inventory)} (CUDA_VISIBLE_DEVICES={cvd!r}); run on a "
                f"runner with {count} GPUs")
    return None


def require_gpu_problem(count: int) -> str | None:
    """Why ``--perf-require-gpu COUNT`` cannot hold here (NVML sees fewer GPUs, or SGLang is missing), or None."""
    reason = gpu_skip_reason(count) or gpu_tier_skip_reason()
    if reason is None:
        return None
    return (f"--perf-require-gpu {count}: {reason}. This run must test the GPU tier, so the GPU tests may not skip; "
            "fix NVML/the driver (nvidia-smi must list the GPUs) or SGLang, or drop --perf-require-gpu")


GPU_TIER_ONLY = ("model", "model_shape", "gpus", "engine_timeout")  # read only by the GPU tier's engines


def cpu_tier_refusal(settings: Settings, items: list[pytest.Item]) -> str | None:
    """Options the CPU tier would silently ignore where this session runs it: ``--perf-cpu-quota CORES`` (its arms
    run under the quotas their scenarios declare; ``none`` is honoured: quota arms skip; ``auto`` is what they do)
    and, where no GPU-tier test is selected to read them, the GPU tier's own options (``GPU_TIER_ONLY``)."""
    if not any(item.get_closest_marker("cpu_tier") is not None for item in items):
        return None
    parts = []
    if settings.cpu_quota.mode == "cores":
        parts.append(f"--perf-cpu-quota {settings.cpu_quota} (from {settings.sources['cpu_quota']}) sets the engine's "
                     "quota on the GPU tier; the CPU tier's arms run under the quotas their scenarios declare (e.g. "
                     "0.5 core) and would silently ignore it. Drop it for perf_tests/sglang/cpu_tier (or use 'none' to "
                     "skip the quota arms), or run the GPU tier")
    gpu = any(item.get_closest_marker(m) is not None for item in items for m in ("gpu_tier", "gpu"))
    given = [f"{OPTIONS_BY_NAME[n].cli} {display(getattr(settings, n), OPTIONS_BY_NAME[n])} (from "
             f"{settings.sources[n]})" for n in GPU_TIER_ONLY if not gpu and settings.sources[n] != "default"]
    if given:
        parts.append(f"{', '.join(given)}: GPU-tier option(s), for the engine, and this session selects CPU-tier tests "
                     "only, which would silently ignore them. Drop them here, or select GPU-tier tests "
                     "(perf_tests/sglang/gpu_tier)")
    return "; ".join(parts) or None


def cgroup_skip_reason(quota_setting: QuotaSetting, source: str) -> str | None:
    """Why a CPU quota cannot be applied, or None."""
    if quota_setting.mode == "none":
        return (f"CPU quotas are disabled (--perf-cpu-quota none from {source}); this test measures under a "
                "quota and is never run without one")
    from engine_fixtures.isolation.cgroups import probe_quota_support

    return probe_quota_support()


_DETECT = "detect"  # read the installed release


def known_regression(regression: object, installed: str | None = _DETECT) -> pytest.MarkDecorator:
    """A strict xfail for a test whose invariant a known upstream regression breaks in the installed release.

    ``regression`` is a ``sglang_version.KnownRegression``. Where the release is in its range the test must
    raise ``InvariantViolated``; anything else fails it: a pass (XPASS(strict)) means this release fixed the
    regression, and the reason printed with it names the constant to move. Outside the range (or with no SGLang)
    the test is an ordinary test, so a newer release is judged, never assumed.
    """
    from engine_fixtures import sglang_version
    from engine_fixtures.errors import InvariantViolated

    reg: sglang_version.KnownRegression = regression  # type: ignore[assignment]
    installed = sglang_version.installed() if installed == _DETECT else installed
    version = sglang_version.parse(installed)
    return pytest.mark.xfail(
        reg.affects(version), strict=True, raises=InvariantViolated,
        reason=(f"known in SGLang {reg.range_text} (installed: {installed}): {reg.what}. If this passes, "
                f"SGLang {installed} fixed it: set {reg.constant}.last below {installed} in "
                "engine_fixtures/sglang_version.py"))
