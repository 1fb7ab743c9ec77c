"""Machine facts, the baseline machine key and the host identity pools record."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine_fixtures.isolation.cgroups import effective_cpu_quota
from engine_fixtures.machine import (
    HostIdentity,
    MachineInfo,
    cpu_max_mhz,
    cpu_model,
    host_of,
    machine_key,
    runner_label,
    slug,
)
from engine_fixtures.nvml import GpuInfo

GPU_PART = r"(none|[a-z0-9.-]+-x\d+(_[a-z0-9.-]+-x\d+)*)"
KEY_RE = re.compile(rf"^cpu-[a-z0-9.-]+-x\d+__quota-(none|\d+(\.\d{{1,2}})?)__gpu-{GPU_PART}$")


def h200(index: int = 0) -> GpuInfo:
    return GpuInfo(index, "NVIDIA H200", 143771.0, "570.133.20", f"GPU-{index}")


@pytest.fixture(scope="module")
def info() -> MachineInfo:
    return MachineInfo.collect()


def test_collected_facts_are_this_machines(info: MachineInfo) -> None:
    assert info.visible_cpus == len(os.sched_getaffinity(0))
    assert info.cpu_quota == effective_cpu_quota()
    assert info.cpu_model == cpu_model()
    assert info.python_version.count(".") == 2
    assert bool(info.gpus) != bool(info.gpu_unavailable)  # GPUs listed, or the reason why none


def test_key_is_well_formed_and_stable(info: MachineInfo) -> None:
    assert KEY_RE.match(info.key), info.key
    assert info.key == MachineInfo.collect().key
    assert info.key.startswith(f"cpu-{slug(info.cpu_model)}-x{info.visible_cpus}__")
    if not info.gpus:
        assert info.key.endswith("__gpu-none")


def test_key_uses_only_hardware_and_quota(info: MachineInfo) -> None:
    other_host = dataclasses.replace(info, hostname="elsewhere", torch_version="9.9", sglang_version="0.6.0",
                                     python_version="3.99.0", gpu_unavailable="x")
    assert other_host.key == info.key
    assert dataclasses.replace(info, cpu_quota=0.5).key != dataclasses.replace(info, cpu_quota=None).key
    assert dataclasses.replace(info, visible_cpus=info.visible_cpus + 1).key != info.key
    one, two = dataclasses.replace(info, gpus=(h200(),)), dataclasses.replace(info, gpus=(h200(), h200(1)))
    assert one.key != two.key


def test_examples_from_the_contract() -> None:
    assert machine_key("Intel(R) Xeon(R) Processor", 2, None, ()) == (
        "cpu-intel-xeon-processor-x2__quota-none__gpu-none")
    assert machine_key("AMD EPYC 9654 96-Core Processor", 16, 13.6, (h200(),)) == (
        "cpu-amd-epyc-9654-x16__quota-13.6__gpu-nvidia-h200-x1")
    assert slug("Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz") == "intel-xeon-platinum-8480"
    assert machine_key("x", 1, 13.604, ()) == machine_key("x", 1, 13.6, ())  # rounded to 0.01 cores
    assert "quota-1000000__" in machine_key("x", 1, 1e6, ())  # never 1e+06


def test_mixed_gpus_are_counted_per_model() -> None:
    a100 = GpuInfo(2, "NVIDIA A100-SXM4-80GB", 81920.0, "570", "GPU-2")
    assert machine_key("x", 4, None, (h200(0), a100, h200(1))).endswith(
        "__gpu-nvidia-a100-sxm4-80gb-x1_nvidia-h200-x2")


@given(
    model=st.text(max_size=300),
    cpus=st.integers(1, 4096),
    quota=st.none() | st.floats(0.01, 1e7, allow_nan=False),
    gpu_names=st.lists(st.text(max_size=80), max_size=8),
)
def test_key_is_filesystem_safe_for_any_model_strings(
    model: str, cpus: int, quota: float | None, gpu_names: list[str]
) -> None:
    gpus = tuple(GpuInfo(i, name, 1.0, "d", f"GPU-{i}") for i, name in enumerate(gpu_names))
    key = machine_key(model, cpus, quota, gpus)
    assert KEY_RE.match(key), key
    assert len(key) <= 40 + 8 * 60 + 2 * 48  # bounded; one path component
    assert key == machine_key(model, cpus, quota, gpus)


def test_cpu_model_reads_x86_and_arm_cpuinfo(tmp_path: Path) -> None:
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n")
    assert cpu_model(x86) == "Intel(R) Xeon(R) Processor"
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd4f\n\nHardware\t: NVIDIA Grace\n")
    assert cpu_model(arm) == "NVIDIA Grace"
    assert cpu_model(tmp_path / "missing")  # falls back to the architecture, never empty


def test_header_lines_and_metadata(info: MachineInfo) -> None:
    lines = info.header_lines()
    text = "\n".join(lines)
    assert f"perf machine key: {info.key}" in lines
    assert f"{info.visible_cpus} visible CPUs" in text
    assert info.cpu_model in text
    if info.gpu_unavailable:
        assert info.gpu_unavailable in text
    meta = json.loads(json.dumps(info.as_dict()))
    assert meta["key"] == info.key
    assert meta["visible_cpus"] == info.visible_cpus
    with_gpu = dataclasses.replace(info, gpus=(h200(),), gpu_unavailable=None)
    assert "1 x NVIDIA H200 140 GiB, driver 570.133.20" in "\n".join(with_gpu.header_lines())


def host(uuids: tuple[str, ...] = (), runner: str = "gpu-runner-1", cpu: str = "Intel(R) Xeon(R) Processor",
         mhz: float | None = 2100.0, kernel: str = "6.8.0-45-generic") -> HostIdentity:
    return HostIdentity(uuids, cpu, mhz, kernel, runner)


def test_host_identity_is_this_hosts_and_round_trips(info: MachineInfo) -> None:
    assert info.host is not None
    assert info.host.gpu_uuids == tuple(g.uuid for g in info.gpus)
    assert info.host.cpu_model == info.cpu_model
    assert info.host.runner == runner_label()
    meta = json.loads(json.dumps(info.as_dict()))
    assert HostIdentity.from_json(meta["host"]) == info.host
    assert host_of(meta) == info.host
    assert host_of({}) is None  # results and pools from before hosts were recorded
    assert HostIdentity.from_json({"cpu": "x"}) is None
    assert f"perf host: {info.host.describe()}" in info.header_lines()


def test_runner_label_is_github_runner_name_else_the_hostname() -> None:
    assert runner_label({"RUNNER_NAME": "h200-a"}) == "h200-a"
    assert runner_label({}) == socket.gethostname()
    assert HostIdentity.collect((h200(),), {"RUNNER_NAME": "h200-a"}).runner == "h200-a"


def test_same_host_is_the_gpu_uuids_where_gpus_exist() -> None:
    a = host(("GPU-64585b80",))
    assert a.same_host(host(("GPU-64585b80",), runner="renamed", mhz=None, kernel="6.9"))  # clock, kernel: facts
    assert not a.same_host(host(("GPU-0d1f2e3c",)))  # another H200 of the same machine key
    assert not a.same_host(host())  # a GPU host is not a GPU-less one with its name
    assert host(("GPU-b", "GPU-a")).same_host(host(("GPU-a", "GPU-b")))  # NVML's order does not matter
    assert not host(("GPU-a", "GPU-b")).same_host(host(("GPU-a",)))  # another CUDA_VISIBLE_DEVICES: other GPUs
    assert not a.same_host(None)  # no host record never matches


def test_same_host_without_gpus_is_runner_label_and_cpu_model() -> None:
    a = host()
    assert a.same_host(host(mhz=None, kernel="6.9"))
    assert not a.same_host(host(runner="gpu-runner-2"))
    assert not a.same_host(host(cpu="AMD EPYC 9654 96-Core Processor"))


def test_cpu_max_mhz_reads_cpufreq_and_says_absent_as_none(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    sysfs = tmp_path / "cpuinfo_max_freq"
    sysfs.write_text("3800000\n")  # kHz
    assert cpu_max_mhz(sysfs) == 3800.0
    monkeypatch.setattr(psutil, "cpu_freq", lambda: None)  # a VM: no cpufreq, psutil knows nothing
    assert cpu_max_mhz(tmp_path / "missing") is None
    monkeypatch.setattr(psutil, "cpu_freq", lambda: SimpleNamespace(current=2600.0, min=0.0, max=0.0))
    assert cpu_max_mhz(tmp_path / "missing") is None  # psutil's 0 means unknown
    monkeypatch.setattr(psutil, "cpu_freq", lambda: SimpleNamespace(current=2600.0, min=800.0, max=3500.0))
    assert cpu_max_mhz(tmp_path / "missing") == 3500.0
    assert "max clock unknown" in host(mhz=None).describe()
