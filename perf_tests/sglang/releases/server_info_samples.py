"""``/server_info`` responses per release, RECONSTRUCTED FROM SOURCE, not recorded.

No recorded response of any release is in the repository (the H200 runs of 0.5.16 read ``/server_info`` through
the fixture but kept only the parsed caps). Each sample repeats how its release assembles the response, for one
configuration: pp=2, tp=1, dp=1, ``--max-running-requests`` unset and resolved to 64 per DP rank, the PP
micro-batch cap left to the scheduler (64 // 2 = 32), the CPU feature transport.

- 0.5.16 ``entrypoints/http_server.py`` ``server_info``: ``{**dataclasses.asdict(server_args),
  **scheduler_info, "internal_states": [...], "version", "kv_events"}``; ``scheduler_info`` is
  ``Scheduler.get_init_info``'s ``{status, max_total_num_tokens, max_req_input_len}``; each internal state is
  ``Scheduler.get_internal_state``: ``dict(vars(get_server_args()))`` (with the scheduler's
  ``pp_max_micro_batch_size`` override), ``last_gen_throughput``, ``memory_usage``,
  ``effective_max_running_requests_per_dp``.
- 0.5.20 ``server_info``: ``{**server_args.resolved_dict(), "launch_command", **scheduler_info (+
  startup_time), "startup_time", "internal_states", "version", "kv_events"}``; the internal state is
  ``get_context().resolved_server_args_dict()`` (the override log applied) plus ``world_size``,
  ``last_gen_throughput``, ``memory_usage``, ``startup_time``, ``effective_max_running_requests_per_dp``.
- 0.5.23 ``server_info``: ``{**build_server_info(server_args, scheduler_info)`` (``resolved_dict()`` +
  ``launch_command`` + scheduler_info (+ ``hicache_object_layout``) + ``kv_events``), ``"startup_time"``,
  ``"internal_states"``, ``"version"``, ``"frontend": "python"}``; the internal state comes from
  ``SchedulerInternalStateController.get_internal_state`` (same keys, contributed by ``_add_topology`` etc.).

The per-version envs check these against the installed release (perf_tests/sglang/releases/
test_installed_release.py): every server-args key a sample uses is a field of that release's ``ServerArgs``,
and the scheduler keys appear in its source.
"""

from __future__ import annotations

from typing import Any

RELEASES = ("0.5.16", "0.5.20", "0.5.23")
EXPECTED = {"tp_size": 1, "pp_size": 2, "dp_size": 1, "max_running_requests": 64,
            "requested_max_running_requests": None, "pp_max_micro_batch_size": 32, "pp_async_batch_depth": 0,
            "mm_feature_transport": "cpu", "disable_radix_cache": True, "enable_metrics": True,
            "max_total_num_tokens": 163840}

# ServerArgs fields as the launcher resolved them (a subset; the parser reads only these). Names are the field
# names of every release 0.5.16..0.5.23 (flat, also where 0.5.23 declares them in arg_groups/fields/).
SERVER_ARGS: dict[str, Any] = {
    "model_path": "/models/qwen-tiny", "tp_size": 1, "pp_size": 2, "dp_size": 1, "max_running_requests": None,
    "pp_max_micro_batch_size": None, "pp_async_batch_depth": 0, "mm_feature_transport": "cpu",
    "disable_radix_cache": True, "enable_metrics": True, "attention_backend": "triton",
    "mm_attention_backend": "triton_attn", "sampling_backend": "pytorch", "grammar_backend": "none",
    "load_format": "dummy", "mem_fraction_static": 0.5,
}
SCHEDULER_OVERRIDE = {"pp_max_micro_batch_size": 32}  # "scheduler.pp_max_micro_batch_size_default"
MEMORY_USAGE = {"weight": 0.01, "kvcache": 0.31, "token_capacity": 163840, "graph": 0.0}
SCHEDULER_INFO = {"status": "ready", "max_total_num_tokens": 163840, "max_req_input_len": 32762}
LAUNCH = "python -m sglang.launch_server --model-path /models/qwen-tiny --pp-size 2 ..."


def sample(release: str) -> dict[str, Any]:
    """The reconstructed ``/server_info`` of ``release`` (one of ``RELEASES``)."""
    if release == "0.5.16":
        state = {**SERVER_ARGS, **SCHEDULER_OVERRIDE, "last_gen_throughput": 0.0, "memory_usage": MEMORY_USAGE,
                 "effective_max_running_requests_per_dp": 64}
        return {**SERVER_ARGS, **SCHEDULER_INFO, "internal_states": [state], "version": release, "kv_events": None}
    state = {**SERVER_ARGS, **SCHEDULER_OVERRIDE, "world_size": 2, "last_gen_throughput": 0.0,
             "memory_usage": MEMORY_USAGE, "startup_time": 41.5, "effective_max_running_requests_per_dp": 64}
    info = {**SERVER_ARGS, "launch_command": LAUNCH, **SCHEDULER_INFO, "startup_time": 41.5}
    if release == "0.5.20":
        return {**info, "internal_states": [state], "version": release, "kv_events": None}
    if release == "0.5.23":
        return {**info, "hicache_object_layout": None, "kv_events": None, "internal_states": [state],
                "version": release, "frontend": "python"}
    raise KeyError(f"no reconstructed /server_info for SGLang {release}; have {', '.join(RELEASES)}")
