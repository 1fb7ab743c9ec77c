"""Machine facts, collected once per session, for the report header, result metadata and the baseline key;
the host's identity (``HostIdentity``), which a pool records and which decides whether a pool judges this host."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import socket
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

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


CPU_MAX_FREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")  # kHz


def cpu_max_mhz(sysfs: Path = CPU_MAX_FREQ) -> float | None:
    """The CPU's maximum clock in MHz: cpufreq's ``cpuinfo_max_freq``, else psutil's ``cpu_freq().max``; None
    where neither knows (many VMs expose no cpufreq and psutil then reports 0)."""
    try:
        khz = float(sysfs.read_text().strip())
        if khz > 0:
            return khz / 1000.0
    except (OSError, ValueError):
        pass
    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError, RuntimeError):
        return None
    return float(freq.max) if freq is not None and freq.max > 0 else None


def runner_label(env: Mapping[str, str] | None = None) -> str:
    """GitHub Actions' ``RUNNER_NAME``, else the host name."""
    env = os.environ if env is None else env
    return env.get("RUNNER_NAME") or socket.gethostname()


@dataclass(frozen=True)
class HostIdentity:
    """The host a measurement came from, as a pool records it.

    The machine key (``MachineInfo.key``) says what KIND of machine measured; two H200 hosts share it and
    their numbers differ (2026-12-01: one H200 host's tokenizer manager spent 24 % more CPU per request than
    another's on the same software, and a clean run read -21 % req/s). So a pool judges only runs of the host
    that recorded it.

    ``same_host`` is narrow on purpose:
    - where GPUs exist (on either side): the same GPU UUIDs (the GPUs visible to the run, so another
      ``CUDA_VISIBLE_DEVICES`` is another host here: other silicon);
    - on GPU-less hosts: the same runner label (``RUNNER_NAME``, else the host name) and CPU model. A CPU box
      cannot be told apart better: a re-imaged VM keeping its name reads as the same host, and two VMs of one
      type with the same name cannot be told apart at all.
    The CPU clock (``cpu_max_mhz``, None where the host does not expose it) and the kernel release are
    recorded for the reader and never decide.
    """

    gpu_uuids: tuple[str, ...]
    cpu_model: str
    cpu_max_mhz: float | None
    kernel: str
    runner: str

    @classmethod
    def collect(cls, gpus: Sequence[GpuInfo], env: Mapping[str, str] | None = None) -> HostIdentity:
        """This host, with ``gpus`` (the visible GPUs) as its GPUs."""
        return cls(tuple(g.uuid for g in gpus), cpu_model(), cpu_max_mhz(), platform.release(), runner_label(env))

    def same_host(self, other: HostIdentity | None) -> bool:
        """Whether ``other`` is this host (the rule in the class docstring); None (no host record) never is."""
        if other is None:
            return False
        if self.gpu_uuids or other.gpu_uuids:
            return sorted(self.gpu_uuids) == sorted(other.gpu_uuids)
        return (self.runner, self.cpu_model) == (other.runner, other.cpu_model)

    def describe(self) -> str:
        """One line for messages and ``perf-baseline show``."""
        clock = "max clock unknown" if self.cpu_max_mhz is None else f"max {self.cpu_max_mhz:.0f} MHz"
        gpus = ", ".join(self.gpu_uuids) if self.gpu_uuids else "no GPU"
        return f"{self.runner} ({gpus}; {self.cpu_model}, {clock}; kernel {self.kernel})"

    def to_json(self) -> dict[str, Any]:
        return {"gpu_uuids": list(self.gpu_uuids), "cpu_model": self.cpu_model, "cpu_max_mhz": self.cpu_max_mhz,
                "kernel": self.kernel, "runner": self.runner}

    @classmethod
    def from_json(cls, data: Any) -> HostIdentity | None:
        """The host of a stored record; None for records written before hosts were recorded (or not a host)."""
        if not isinstance(data, Mapping) or "gpu_uuids" not in data or "runner" not in data:
            return None
        mhz = data.get("cpu_max_mhz")
        return cls(tuple(str(u) for u in data["gpu_uuids"]), str(data.get("cpu_model", "")),
                   None if mhz is None else float(mhz), str(data.get("kernel", "")), str(data["runner"]))


def host_of(machine: Mapping[str, Any] | None) -> HostIdentity | None:
    """The host recorded in a results file's or pool's machine facts (``MachineInfo.as_dict()``), or None."""
    return HostIdentity.from_json((machine or {}).get("host"))


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
    The key cannot tell two hosts of one kind apart; ``host`` (``HostIdentity``) does, and a pool judges only
    its own host's runs.
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
    host: HostIdentity | None = None  # which host this is (pools record it); ``collect`` always fills it

    @classmethod
    def collect(cls) -> MachineInfo:
        """Read every fact now (NVML and cgroups included; imports neither torch nor sglang)."""
        inventory = gpu_inventory()
        gpus = tuple(inventory) if isinstance(inventory, list) else ()
        return cls(
            cpu_model=cpu_model(),
            visible_cpus=len(os.sched_getaffinity(0)),
            cpu_quota=effective_cpu_quota(),
            gpus=gpus,
            gpu_unavailable=inventory if isinstance(inventory, str) else None,
            torch_version=_version("torch"),
            sglang_version=sglang_version.installed(),
            python_version=platform.python_version(),
            hostname=socket.gethostname(),
            host=HostIdentity.collect(gpus),
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
            *([f"perf host: {self.host.describe()}"] if self.host is not None else []),
        ]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready facts plus the key, for result metadata."""
        out = asdict(self)
        out["gpus"] = [asdict(g) for g in self.gpus]
        out["host"] = self.host.to_json() if self.host is not None else None
        out["key"] = self.key
        return out
