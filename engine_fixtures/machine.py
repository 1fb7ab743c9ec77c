"""Machine facts, collected once per session, for the report header, result metadata and the baseline key."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import socket
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine_fixtures import sglang_version
from engine_fixtures.isolation.cgroups import effective_cpu_quota
from engine_fixtures.nvml import GpuInfo, gpu_inventory

MAX_SLUG = 48
_NOISE = (
    r"\((?:r|tm|c)\)",  # Intel(R) Xeon(R), Core(TM)
    r"\bcpu\b",
    r"@\s*[\d.]+\s*[gm]hz",  # @ 2.10GHz
    r"\b\d+-core\s+processor\b",  # AMD EPYC 9654 96-Core Processor
)


def slug(text: str, max_len: int = MAX_SLUG) -> str:
    """Lowercase ASCII ``[a-z0-9.-]`` words joined by ``-``; ``unknown`` if nothing is left."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    for pattern in _NOISE:
        ascii_text = re.sub(pattern, " ", ascii_text)
    words = re.findall(r"[a-z0-9]+(?:\.[a-z0-9]+)*", ascii_text)
    out = "-".join(words)[:max_len].strip("-.")
    return out or "unknown"


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The first ``model name`` of ``/proc/cpuinfo`` (ARM: ``Hardware``/``Model``), else the architecture."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        text = ""
    for key in ("model name", "Hardware", "Model", "cpu model"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if match and match.group(1).strip():
            return match.group(1).strip()
    return platform.machine() or "unknown"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_key(cpu: str, visible_cpus: int, quota: float | None, gpus: tuple[GpuInfo, ...]) -> str:
    """``cpu-<model>-x<visible>__quota-<cores|none>__gpu-<model>-x<count>[_<model>-x<count>]|none``."""
    quota_part = "none" if quota is None else f"{quota:.2f}".rstrip("0").rstrip(".")
    counts = Counter(slug(g.name) for g in gpus)
    gpu_part = "_".join(f"{name}-x{n}" for name, n in sorted(counts.items())) or "none"
    return f"cpu-{slug(cpu)}-x{visible_cpus}__quota-{quota_part}__gpu-{gpu_part}"


@dataclass(frozen=True)
class MachineInfo:
    """Facts about this machine as the suite sees it.

    ``key`` (the baseline machine key) is derived ONLY from what changes performance numbers:
    - ``cpu-<model>-x<N>``: the CPU model from /proc/cpuinfo as a slug (vendor marks, "CPU",
      clock speed and "N-Core Processor" removed) and N = CPUs this process may run on
      (``len(os.sched_getaffinity(0))``, not the host's core count);
    - ``quota-<cores|none>``: the effective cgroup CPU quota of this process (min over its cgroup
      ancestry), rounded to 0.01 cores, ``none`` if unlimited;
    - ``gpu-<model>-x<count>``: each GPU model (slug of NVML's name) with its count, among the GPUs
      visible to this process (``CUDA_VISIBLE_DEVICES``), or ``none``.
    It is ``[a-z0-9._-]`` only (filesystem-safe, no ``/``, never starts with ``.``) and stable: hostname,
    versions and driver never enter it. Example: ``cpu-amd-epyc-9654-x16__quota-13.6__gpu-nvidia-h200-x1``.
    """

    cpu_model: str
    visible_cpus: int
    cpu_quota: float | None
    gpus: tuple[GpuInfo, ...]
    gpu_unavailable: str | None  # why no GPU is listed (NVML's reason), None when NVML answered
    torch_version: str | None
    sglang_version: str | None
    python_version: str
    hostname: str

    @classmethod
    def collect(cls) -> MachineInfo:
        """Read every fact now (NVML and cgroups included; imports neither torch nor sglang)."""
        inventory = gpu_inventory()
        return cls(
            cpu_model=cpu_model(),
            visible_cpus=len(os.sched_getaffinity(0)),
            cpu_quota=effective_cpu_quota(),
            gpus=tuple(inventory) if isinstance(inventory, list) else (),
            gpu_unavailable=inventory if isinstance(inventory, str) else None,
            torch_version=_version("torch"),
            sglang_version=sglang_version.installed(),
            python_version=platform.python_version(),
            hostname=socket.gethostname(),
        )

    @property
    def key(self) -> str:
        return machine_key(self.cpu_model, self.visible_cpus, self.cpu_quota, self.gpus)

    def _gpu_text(self) -> str:
        if not self.gpus:
            return f"none ({self.gpu_unavailable})" if self.gpu_unavailable else "none (NVML lists no GPU)"
        models = Counter(f"{g.name} {g.memory_total_mib / 1024:.0f} GiB" for g in self.gpus)
        listed = ", ".join(f"{n} x {m}" for m, n in models.items())
        return f"{listed}, driver {self.gpus[0].driver}"

    def header_lines(self) -> list[str]:
        """Lines for pytest's report header."""
        quota = "none" if self.cpu_quota is None else f"{self.cpu_quota:g} cores"
        return [
            f"perf machine: {self.cpu_model}, {self.visible_cpus} visible CPUs, effective CPU quota {quota}",
            f"perf GPUs: {self._gpu_text()}",
            f"perf versions: torch {self.torch_version or 'not installed'}, "
            f"sglang {self.sglang_version or 'not installed'}, python {self.python_version}",
            f"perf machine key: {self.key}",
        ]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready facts plus the key, for result metadata."""
        out = asdict(self)
        out["gpus"] = [asdict(g) for g in self.gpus]
        out["key"] = self.key
        return out
