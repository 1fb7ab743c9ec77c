"""Markers of this suite, registered with their signatures (``pytest --markers`` documents them)."""

from __future__ import annotations

MARKERS: dict[str, str] = {
    "gpu(count=1)": "needs COUNT NVIDIA GPUs visible through NVML; skipped with the reason otherwise.",
    "engine": "starts the real SGLang engine (GPU tier); skipped when SGLang or a GPU is missing.",
    "cgroup(quota=None)": "needs a writable cgroup CPU controller; QUOTA (cores or 'none') overrides "
    "--perf-cpu-quota for this test.",
    "perf(scenario=None, repeats=None, tolerance=None)": "a measured scenario judged against its baseline; "
    "keyword values override --perf-repeats/--perf-tolerance for this test.",
    "mechanism": "the CPU-tier SHM copy-path mechanism benchmark (real /dev/shm, real processes, real cgroup).",
    "slow": "takes minutes; the 'unit' tox env deselects it unless --perf-scale full.",
}
