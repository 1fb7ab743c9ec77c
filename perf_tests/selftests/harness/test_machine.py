"""Machine facts and the baseline machine key."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine_fixtures.isolation.cgroups import effective_cpu_quota
from engine_fixtures.machine import MachineInfo, cpu_model, machine_key, slug
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
