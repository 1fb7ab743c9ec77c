"""``EngineScenario``: one GPU-tier arm, declared: transport and arms, quota, parallelism, workload.

A test module lists scenarios; ``spec()`` turns one into an ``EngineSpec`` for this machine (model dir, GPUs,
build), ``workload()`` into the load of its segments, ``key()`` into the stable id its baselines are stored
under (``engine/transport=cpu/tp=1/pp=1/copy=buffer/quota=4/model=qwen-tiny/c=16``). ``quota="quarter"``
is a quarter of the visible CPUs (``quota.declared_cores``). Whether GPU utilisation gates is read from the pool
(``judge.gating``: where the pooled runs show the GPU at least 60 % busy), not declared here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine_fixtures.engine.build import EngineBuild
from engine_fixtures.engine.spec import SGLANG_LAUNCHER, EngineSpec
from engine_fixtures.errors import ConfigError
from engine_fixtures.isolation.pinning import RolePlacement
from engine_fixtures.loadgen.workload import WorkloadSpec
from engine_fixtures.quota import declared_cores

DEFAULT_IMAGE_PX = 448
DEFAULT_OUTPUT_TOKENS = 32


@dataclass(frozen=True)
class EngineScenario:
    id: str
    transport: str = "cpu"
    copy: str = "stock"
    ipc_cache: str = "stock"
    quota: str | float | None = None
    concurrency: int = 16
    image_px: int = DEFAULT_IMAGE_PX
    image_content: str = "noise"  # "repeated": the same image in every request
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    tp: int = 1
    pp: int = 1
    max_running_requests: int | None = None
    pp_max_micro_batch_size: str | int = "auto"
    gpus: int = 1
    mem_fraction_static: float = 0.5
    lint: bool = True  # False for an arm that exists to exhibit a cap (judged by its invariant instead)
    launcher: tuple[str, ...] = SGLANG_LAUNCHER  # the harness's self-tests put the stub engine here
    proof: bool = True

    def spec(self, model: Path, gpus: tuple[int, ...], build: EngineBuild | None = None,
             mem_fraction_static: float | None = None, cpus: tuple[int, ...] | None = None,
             role_cpus: RolePlacement | None = None) -> EngineSpec:
        if len(gpus) < self.gpus:
            raise ConfigError(f"scenario {self.id} needs {self.gpus} GPU(s), --perf-gpus gives {gpus}")
        # Decode batches never exceed the client's concurrency: capturing CUDA graphs beyond it costs start time.
        # A power-of-two bucket (at least 16) keeps one launch for C = 1, 4 and 16, so a concurrency sweep
        # reuses one engine instead of starting one per point.
        graph = ("--cuda-graph-max-bs", str(graph_bucket(self.concurrency)))
        return EngineSpec(model=model, mm_feature_transport=self.transport, copy=self.copy if self.transport == "cpu"
                          else "stock", ipc_cache=self.ipc_cache if self.transport == "cuda_ipc" else "stock",
                          cpu_quota=declared_cores(self.quota, f"EngineScenario {self.id} quota"), tp=self.tp,
                          pp=self.pp,
                          max_running_requests=self.max_running_requests,
                          pp_max_micro_batch_size=self.pp_max_micro_batch_size, gpus=tuple(gpus[: self.gpus]),
                          mem_fraction_static=mem_fraction_static or self.mem_fraction_static, extra_args=graph,
                          build=build or EngineBuild(), launcher=self.launcher, proof=self.proof, cpus=cpus,
                          role_cpus=role_cpus,
                          name="sglang" if self.launcher == SGLANG_LAUNCHER else "stub")

    def workload(self) -> WorkloadSpec:
        """The load of this scenario's segments (closed loop; how long is the segment's, not the workload's)."""
        return WorkloadSpec(num_requests=self.concurrency, concurrency=self.concurrency,
                            image_resolution=(self.image_px, self.image_px), image_content=self.image_content,
                            output_tokens=self.output_tokens)

    @staticmethod
    def key(spec: EngineSpec, scenario: EngineScenario) -> str:
        """What was measured: the arm (quota included), the model, the load (image size, content and output length
        only where they differ from the defaults, so keys recorded before they varied stay valid)."""
        load = f"/c={scenario.concurrency}"
        if scenario.image_px != DEFAULT_IMAGE_PX:
            load += f"/px={scenario.image_px}"
        if scenario.image_content != "noise":
            load += f"/img={scenario.image_content}"
        if scenario.output_tokens != DEFAULT_OUTPUT_TOKENS:
            load += f"/out={scenario.output_tokens}"
        return "engine/" + "/".join(f"{k}={v}" for k, v in spec.arm.items()) + f"/model={spec.model.name}{load}"


def graph_bucket(concurrency: int) -> int:
    """The CUDA-graph batch size cap for a concurrency: the next power of two, at least 16."""
    return max(16, 1 << (max(1, concurrency) - 1).bit_length())
