"""EngineSpec command lines and environments, /server_info read-back, /metrics parsing and the cap lint."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine_fixtures.engine.lint import HiddenCapWarning, check_caps, find_hidden_caps
from engine_fixtures.engine.prometheus import TTFT, MetricsSnapshot
from engine_fixtures.engine.server_info import EffectiveConfig
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError, MeasurementError
from engine_fixtures.sglang_version import parse as parse_version

MODEL = Path("/models/qwen-tiny")


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize("version", [None, "0.5.16", "0.5.23"])
@pytest.mark.parametrize("ipc_cache", ["on", "off"])
def test_arm_env_is_explicit_in_every_version(version: str | None, ipc_cache: str) -> None:
    spec = EngineSpec(MODEL, mm_feature_transport="cuda_ipc", ipc_cache=ipc_cache)
    env = spec.env(version)
    assert env["SGLANG_USE_IPC_POOL_HANDLE_CACHE"] == ("1" if ipc_cache == "on" else "0")
    assert env["SGLANG_VLM_CACHE_SIZE_MB"] == "0"
    argv = spec.argv("python", 31000, version)
    assert flag(argv, "--mm-feature-transport") == "cuda_ipc"  # 0.5.23 would auto-switch Qwen3-VL otherwise
    assert ("--mm-preprocess-cache-size-mb" in argv) == (version == "0.5.23")


def test_argv_carries_kernel_free_defaults_and_caps() -> None:
    spec = EngineSpec(MODEL, pp=2, gpus=(0, 1), pp_max_micro_batch_size=32, max_running_requests=64)
    argv = spec.argv("py", 30001)
    assert argv[:3] == ["py", "-m", "sglang.launch_server"]
    assert flag(argv, "--attention-backend") == "triton"
    assert flag(argv, "--mm-attention-backend") == "triton_attn"
    assert flag(argv, "--sampling-backend") == "pytorch"
    assert flag(argv, "--grammar-backend") == "none"
    assert flag(argv, "--pp-max-micro-batch-size") == "32"
    assert flag(argv, "--max-running-requests") == "64"
    assert flag(argv, "--port") == "30001"
    assert "--disable-radix-cache" in argv
    assert "--enable-metrics" in argv
    assert "--pp-max-micro-batch-size" not in EngineSpec(MODEL).argv("py", 1)


def test_key_changes_with_the_arm_and_not_with_meta() -> None:
    a = EngineSpec(MODEL, copy="torch")
    assert a.key == EngineSpec(MODEL, copy="torch", meta={"note": "x"}).key
    assert a.key != EngineSpec(MODEL, copy="buffer").key
    assert a.arm == {"transport": "cpu", "tp": "1", "pp": "1", "copy": "torch"}


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"mm_feature_transport": "nccl"}, "cpu, cuda_ipc"),
        ({"copy": "memcpy"}, "torch, buffer"),
        ({"ipc_cache": "maybe"}, "on, off"),
        ({"pp": 2}, "--perf-gpus"),
        ({"pp_max_micro_batch_size": 0}, "'auto' or an int"),
        ({"cpu_quota": 0.0}, "cores > 0"),
        ({"mem_fraction_static": 1.5}, "(0, 1)"),
    ],
)
def test_bad_spec_names_the_fix(fields: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=r"EngineSpec: .*" + re.escape(needle)):
        EngineSpec(MODEL, **fields)  # type: ignore[arg-type]


def test_parse_version() -> None:
    assert parse_version("0.5.23.post1") == (0, 5, 23)
    assert parse_version("0.5.16") < (0, 5, 18) <= parse_version("0.5.18")
    assert parse_version(None) is None


SERVER_INFO_0516 = {
    "tp_size": 1,
    "pp_size": 8,
    "dp_size": 1,
    "max_running_requests": None,
    "pp_max_micro_batch_size": None,
    "pp_async_batch_depth": 0,
    "mm_feature_transport": "cpu",
    "version": "0.5.16",
    "internal_states": [{"pp_size": 8, "pp_max_micro_batch_size": 8, "effective_max_running_requests_per_dp": 64}],
}
SERVER_INFO_0523 = {
    "launch_command": "sglang serve ...",
    "tp_size": 1,
    "pp_size": 8,
    "max_running_requests": 64,
    "pp_max_micro_batch_size": None,
    "version": "0.5.23",
    "internal_states": [
        {
            "pp_max_micro_batch_size": 8,
            "effective_max_running_requests_per_dp": 64,
            "pp_size": 8,
            "pp_async_batch_depth": 0,
        }
    ],
}


@pytest.mark.parametrize("info", [SERVER_INFO_0516, SERVER_INFO_0523], ids=["0.5.16", "0.5.23"])
def test_effective_caps_come_from_internal_states(info: dict[str, object]) -> None:
    cfg = EffectiveConfig.parse(info)
    assert (cfg.pp_size, cfg.pp_max_micro_batch_size, cfg.max_running_requests) == (8, 8, 64)
    assert cfg.pp_loop_size == 8


def test_seed_pp_cap_is_found_with_the_fix() -> None:
    cfg = EffectiveConfig.parse(SERVER_INFO_0516)
    (finding,) = find_hidden_caps(cfg, concurrency=32)
    assert (finding.cap, finding.value, finding.in_flight_limit) == ("pp_max_micro_batch_size", 8, 8)
    assert "--pp-max-micro-batch-size 32" in finding.message
    with pytest.raises(ConfigError, match="--pp-max-micro-batch-size 32"):
        check_caps(cfg, 32)
    with pytest.warns(HiddenCapWarning, match="hidden cap"):
        check_caps(cfg, 32, strict=False)
    assert find_hidden_caps(cfg, concurrency=8) == ()


def test_max_running_requests_cap_is_found() -> None:
    cfg = EffectiveConfig.parse({"pp_size": 1, "internal_states": [{"effective_max_running_requests_per_dp": 16}]})
    (finding,) = find_hidden_caps(cfg, 32)
    assert finding.cap == "max_running_requests"
    assert "--max-running-requests 32" in finding.fix


def test_server_info_that_is_not_an_object_is_an_error() -> None:
    with pytest.raises(MeasurementError, match="not a JSON object"):
        EffectiveConfig.parse(["nope"])  # type: ignore[arg-type]


METRICS_TEXT = """\
# HELP sglang:num_running_reqs running
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{pp_rank="0"} 3.0
sglang:num_running_reqs{pp_rank="1"} 5.0
# HELP sglang:time_to_first_token_seconds ttft
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1"} 2.0
sglang:time_to_first_token_seconds_bucket{le="0.5"} 9.0
sglang:time_to_first_token_seconds_bucket{le="+Inf"} 10.0
sglang:time_to_first_token_seconds_sum 2.5
sglang:time_to_first_token_seconds_count 10.0
"""


def test_metrics_sum_over_stages_and_histogram_windows() -> None:
    snap = MetricsSnapshot.parse(METRICS_TEXT)
    assert snap.total("sglang:num_running_reqs") == 8.0
    h = snap.histogram(TTFT)
    assert h.count == 10
    assert h.quantile(0.5) == 0.5
    assert h.quantile(0.1) == 0.1
    empty = h.minus(h)
    with pytest.raises(MeasurementError, match="no observations"):
        empty.quantile(0.5)
    with pytest.raises(MeasurementError, match="--enable-metrics"):
        snap.total("sglang:num_queue_reqs")
