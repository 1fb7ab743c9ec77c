"""What the engine fixture does per SGLang release, without SGLang: the layout facts, the command line and
environment ``EngineSpec`` builds, and ``/server_info`` parsed in each release's layout.

The facts were dated from the wheels of 0.5.16 through 0.5.20 and 0.5.23; the per-version envs check them
against each installed release (test_installed_release.py). The ``/server_info`` samples are reconstructed from
source (server_info_samples.py says how), not recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_fixtures import sglang_version as sv
from engine_fixtures.engine.lint import find_hidden_caps
from engine_fixtures.engine.server_info import EffectiveConfig
from engine_fixtures.engine.spec import EngineSpec
from perf_tests.sglang.releases import server_info_samples

MODEL = Path("/models/qwen-tiny")

# release -> (preprocess-cache flag, IPC cache default on, ShmPointerMMData layout, CUDA IPC module, where the
# tokenizer manager reads the IPC pool-handle cache flag)
FACTS = {
    "0.5.16": (False, False, "0.5.16", "sglang.srt.utils.cuda_ipc_transport_utils", "module-global"),
    "0.5.17": (False, True, "0.5.16", "sglang.srt.utils.cuda_ipc_transport_utils", "processor-attribute"),
    "0.5.18": (True, True, "0.5.16", "sglang.srt.multimodal.transport.cuda_ipc", "processor-attribute"),
    "0.5.19": (True, True, "0.5.19+", "sglang.srt.multimodal.transport.cuda_ipc", "processor-attribute"),
    "0.5.20": (True, True, "0.5.19+", "sglang.srt.multimodal.transport.cuda_ipc", "processor-attribute"),
    "0.5.23.post1": (True, True, "0.5.19+", "sglang.srt.multimodal.transport.cuda_ipc", "processor-attribute"),
}


@pytest.mark.parametrize("release", FACTS)
def test_layout_facts_by_release(release: str) -> None:
    flag, cache_on, layout, ipc_module, ipc_cache = FACTS[release]
    v = sv.parse(release)
    assert sv.has_preprocess_cache_flag(v) is flag
    assert sv.ipc_cache_off_by_default(v) is not cache_on
    assert sv.expected_shm_layout(v) == layout
    assert sv.cuda_ipc_module(v) == ipc_module
    assert sv.expected_ipc_cache_layout(v) == ipc_cache
    assert sv.shm_copy_unfixed(v)


def test_the_ipc_cache_layout_is_read_from_the_code() -> None:
    """0.5.16's method reads the module global (and the module has it); 0.5.17+ reads the processor attribute."""
    assert sv.ipc_cache_layout(("is_cuda", "_IPC_POOL_HANDLE_CACHE"), {"_IPC_POOL_HANDLE_CACHE": False}) == (
        "module-global")
    assert sv.ipc_cache_layout(("wrap_tensor", "use_ipc_pool_handle_cache")) == "processor-attribute"
    assert sv.ipc_cache_layout(("_IPC_POOL_HANDLE_CACHE",)) is None  # a name read but no such global
    assert sv.ipc_cache_layout(("wrap_tensor",)) is None


def test_the_running_batch_probe_knows_one_layout() -> None:
    """``Scheduler.run_batch(self, batch, pp_proxy_tensors=None)`` in every checked release (0.5.16 scheduler.py:3290,
    0.5.20 :4245, 0.5.23 :4614): the probe relies on its first two parameters only."""
    assert (sv.SCHEDULER_MODULE, sv.SCHEDULER_CLASS, sv.RUN_BATCH_METHOD) == (
        "sglang.srt.managers.scheduler", "Scheduler", "run_batch")
    assert sv.run_batch_problem(["self", "batch", "pp_proxy_tensors"]) is None
    assert sv.run_batch_problem(["self", "batch"]) is None
    assert sv.run_batch_problem(["self", "forward_batch"]) == "takes (self, forward_batch), not (self, batch, ...)"
    assert sv.run_batch_problem(["self"]) == "takes (self), not (self, batch, ...)"


def test_the_decode_patch_knows_one_layout() -> None:
    """``ModelRunner.forward(self, forward_batch, ...)`` in every checked release (0.5.16 model_runner.py:1232, 0.5.20
    :1628, 0.5.23 :1813): the ``slow-decode`` patch relies on its first two parameters only."""
    assert (sv.MODEL_RUNNER_MODULE, sv.MODEL_RUNNER_CLASS, sv.MODEL_FORWARD_METHOD) == (
        "sglang.srt.model_executor.model_runner", "ModelRunner", "forward")
    assert sv.model_forward_problem(["self", "forward_batch", "skip_attn_backend_init", "pp_proxy_tensors"]) is None
    assert sv.model_forward_problem(["self", "batch"]) == "takes (self, batch), not (self, forward_batch, ...)"
    assert sv.leading_params_problem(["self", "obj"], ()) is None


def test_a_newer_release_is_not_assumed_to_keep_any_layout() -> None:
    v = sv.parse("0.6.0")
    assert sv.is_newer_than_checked(v)
    assert (sv.expected_shm_layout(v), sv.cuda_ipc_module(v), sv.expected_ipc_cache_layout(v)) == (None, None, None)
    assert not sv.shm_copy_unfixed(v), "a newer release is measured, not excused"
    message = sv.unsupported("X moved", "0.6.0")
    assert message.startswith("SGLang 0.6.0 (newer than any release this suite was checked against): X moved. ")
    assert "supports SGLang 0.5.16..0.5.23" in message
    assert "pip install 'sglang>=0.5.16,<=0.5.23'" in message


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize("release", [None, *FACTS, "0.6.0"])
@pytest.mark.parametrize(("transport", "arm"), [("cpu", "torch"), ("cpu", "stock"), ("cuda_ipc", "on"),
                                                ("cuda_ipc", "off"), ("cuda_ipc", "stock")])
def test_argv_and_env_per_release(release: str | None, transport: str, arm: str) -> None:
    arms = {"copy": arm} if transport == "cpu" else {"ipc_cache": arm}
    spec = EngineSpec(MODEL, mm_feature_transport=transport, **arms)  # type: ignore[arg-type]
    argv = spec.argv("python", 31000, release)
    v = sv.parse(release)
    assert flag(argv, "--mm-feature-transport") == transport, "0.5.17+ would otherwise auto-resolve it"
    assert flag(argv, "--mm-preprocess-cache-size-mb") == ("0" if v is not None and v >= (0, 5, 18) else None)
    assert "--disable-radix-cache" in argv
    env = spec.env(release)
    assert env["SGLANG_VLM_CACHE_SIZE_MB"] == "0"
    assert env["PERF_ARMS_TRANSPORT"] == transport
    cache = env.get("SGLANG_USE_IPC_POOL_HANDLE_CACHE")
    assert cache == {"on": "1", "off": "0"}.get(spec.ipc_cache), "stock leaves the release's own default"


@pytest.mark.parametrize("release", server_info_samples.RELEASES)
def test_server_info_of_each_release_parses_to_the_effective_caps(release: str) -> None:
    cfg = EffectiveConfig.parse(server_info_samples.sample(release))
    got = {name: getattr(cfg, name) for name in server_info_samples.EXPECTED}
    assert got == server_info_samples.EXPECTED
    assert cfg.version == release
    (finding,) = find_hidden_caps(cfg, concurrency=64)
    assert (finding.cap, finding.value) == ("pp_max_micro_batch_size", 32)


def test_an_unknown_release_has_no_sample() -> None:
    with pytest.raises(KeyError, match=r"no reconstructed /server_info for SGLang 0\.6\.0"):
        server_info_samples.sample("0.6.0")
