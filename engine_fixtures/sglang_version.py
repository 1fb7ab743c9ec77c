"""The one place that knows which SGLang is installed and what differs between its releases.

Reads distribution metadata only and imports nothing heavy (no sglang, no torch), so it is safe in the
pytest process at plugin load and inside SGLang's own processes (``sglang_plugin``).

- ``installed() -> str | None``: the installed SGLang version string, or None.
- ``parse(text) -> tuple[int, ...] | None``: ``"0.5.23.post1"`` -> ``(0, 5, 23)``.
- Layout facts by release: where ``ShmPointerMMData`` and the CUDA IPC transport live, how to tell the
  0.5.16 ``ShmPointerMMData.__init__`` from the 0.5.19+ one, where the tokenizer manager reads the IPC
  pool-handle cache flag (``ipc_cache_layout``: a module global in 0.5.16, a processor attribute from 0.5.17),
  which flags and defaults a release has, where a scheduler runs a batch (``run_batch_problem``: the same method in
  every checked release) and where it runs the model (``model_forward_problem``: ``ModelRunner.forward``, the same in
  every checked release).
  Dated from the wheels of 0.5.16 through 0.5.20 and 0.5.23 (``sglang/srt/environ.py``, ``server_args.py``,
  ``arg_groups/``, ``managers/mm_utils.py``, ``multimodal/transport/``); the CPU tier imports and runs
  0.5.16, 0.5.20 and 0.5.23 (``tox -e sglang{0516,0520,0523}-cpu``).
- Known regressions by release (the strict xfails of both tiers): ``SHM_COPY`` (the SHM ``copy_`` fan-out),
  ``IPC_CACHE_OFF`` (the IPC pool-handle cache off by default) and ``PP_MICROBATCH_CAP`` (the PP micro-batch
  cap); ``marks.known_regression`` turns one into a strict xfail whose XPASS names the constant to move.
- A release newer than ``NEWEST_CHECKED`` is run, never assumed: a layout lookup that fails there is an error
  naming what moved and the range this suite supports (``unsupported()``), not a skip.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from importlib import metadata

Version = tuple[int, ...]

DISTRIBUTION = "sglang"
SUITE_DISTRIBUTION = "sglang-perf-suite"
OLDEST_CHECKED = (0, 5, 16)  # the oldest release whose source the suite was checked against
NEWEST_CHECKED = (0, 5, 23)  # the newest one; a newer release runs, and a moved piece is an error
SUPPORTED = ("0.5.16", "0.5.23")
CPU_TIER_RELEASES = ("0.5.16", "0.5.20", "0.5.23")  # imported and run on a CPU box (tox -e sglangXXXX-cpu)

# Where the multimodal feature transport lives.
MM_UTILS_MODULE = "sglang.srt.managers.mm_utils"  # holds ShmPointerMMData in every release 0.5.16..0.5.23
SHM_CLASS = "ShmPointerMMData"
CUDA_IPC_MODULES = (
    "sglang.srt.multimodal.transport.cuda_ipc",  # 0.5.18+ (0.5.20, 0.5.23 checked)
    "sglang.srt.utils.cuda_ipc_transport_utils",  # 0.5.16, 0.5.17 (a re-export shim from 0.5.18)
)
CUDA_IPC_MOVED = (0, 5, 18)  # the release whose canonical CUDA IPC module is CUDA_IPC_MODULES[0]
CUDA_IPC_PROXY_CLASS = "CudaIpcTensorTransportProxy"
PLUGIN_GROUP = "sglang.srt.plugins"  # the entry-point group SGLang loads plugins from (sglang.srt.plugins)

# ShmPointerMMData.__init__ layouts: 0.5.19+ initialises ``_materialization_error`` first.
SHM_LAYOUT_0_5_16 = "0.5.16"
SHM_LAYOUT_0_5_19 = "0.5.19+"
SHM_LAYOUT_0_5_19_FROM = (0, 5, 19)
_SHM_LAYOUT_0_5_19_MARKER = "_materialization_error"

# Where the tokenizer manager decides whether a CUDA IPC proxy carries the pool handle (the pool-handle cache;
# dated from the wheels of 0.5.16, 0.5.17, 0.5.18, 0.5.20 and 0.5.23). Every release routes each feature through
# BaseMultimodalProcessor._wrap_tensor_for_cuda_ipc, which reads the flag at call time:
# - 0.5.16: the module global base_processor._IPC_POOL_HANDLE_CACHE (the env read once at import);
# - 0.5.17+: the processor attribute self.use_ipc_pool_handle_cache (set in __init__ from the env); 0.5.17 picks
#   pool_ipc_handle by it, 0.5.18+ passes it as MmItemMemoryPool.wrap_tensor(use_pool_handle_cache=...).
MM_PROCESSOR_MODULE = "sglang.srt.multimodal.processors.base_processor"
MM_PROCESSOR_CLASS = "BaseMultimodalProcessor"
IPC_WRAP_METHOD = "_wrap_tensor_for_cuda_ipc"
IPC_CACHE_ENV = "SGLANG_USE_IPC_POOL_HANDLE_CACHE"  # an EnvBool of sglang.srt.environ.envs in every release
ENVIRON_MODULE = "sglang.srt.environ"
IPC_CACHE_GLOBAL = "_IPC_POOL_HANDLE_CACHE"
IPC_CACHE_ATTR = "use_ipc_pool_handle_cache"
IPC_CACHE_LAYOUT_GLOBAL = "module-global"
IPC_CACHE_LAYOUT_ATTR = "processor-attribute"
IPC_CACHE_ATTR_FROM = (0, 5, 17)

# Where a scheduler runs a batch (the running-batch probe, ``sglang_plugin.instrument.install_running_probe``; dated
# from the wheels of 0.5.16, 0.5.20 and 0.5.23, where it has not moved): ``Scheduler.run_batch(self, batch,
# pp_proxy_tensors=None)`` in the scheduler module (0.5.16 scheduler.py:3290, 0.5.20 :4245, 0.5.23 :4614), called once
# per batch by every event loop (normal, overlap, pipeline-parallel, disaggregated); ``batch.forward_mode`` with
# ``is_decode()`` / ``is_mixed()`` and ``len(batch.reqs)``, what SGLang's own "Decode batch, #running-req" log reads.
# A scheduler process loads the plugins from inside that module (``run_scheduler_process``), so it is imported by then.
SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
SCHEDULER_CLASS = "Scheduler"
RUN_BATCH_METHOD = "run_batch"
RUN_BATCH_PARAMS = ("self", "batch")  # the leading parameters the probe relies on

# Where a scheduler runs the model for a batch (the ``slow-decode`` patch, ``sglang_plugin.patches``; dated from the
# wheels of 0.5.16, 0.5.20 and 0.5.23, where it has not moved): ``ModelRunner.forward(self, forward_batch, ...)`` in the
# model-runner module (0.5.16 model_runner.py:1232, 0.5.20 :1628, 0.5.23 :1813). The TP worker calls it once per batch
# (``self.model_runner.forward(forward_batch, ...)``, tp_worker.py) on the scheduler's current stream (the forward
# stream under the overlap scheduler); it replays the decode CUDA graph or runs eagerly, and CUDA-graph capture never
# calls it (the graph runners call the model's own ``forward``). ``forward_batch.forward_mode.is_decode()`` is the
# test it makes itself; ``self.is_draft_worker`` marks a speculative draft model's runner. The scheduler module does
# not import the model runner when the plugin loads: the ``TpModelWorker`` that ``Scheduler.__init__`` builds imports
# it inside its own ``__init__`` (0.5.16 tp_worker.py:422), so the patch waits for that import.
MODEL_RUNNER_MODULE = "sglang.srt.model_executor.model_runner"
MODEL_RUNNER_CLASS = "ModelRunner"
MODEL_FORWARD_METHOD = "forward"
MODEL_FORWARD_PARAMS = ("self", "forward_batch")  # the leading parameters the patch relies on

# Defaults and flags that changed between releases (dated from the wheels; the CPU-tier envs check them).
IPC_CACHE_DEFAULT_ON = (0, 5, 17)  # SGLANG_USE_IPC_POOL_HANDLE_CACHE: EnvBool(False) in 0.5.16, True from 0.5.17
PREPROCESS_CACHE_FLAG = (0, 5, 18)  # --mm-preprocess-cache-size-mb exists from here (absent in 0.5.17)


@dataclass(frozen=True)
class KnownRegression:
    """An upstream regression present in ``first..last`` (inclusive; ``last`` is the newest affected release
    known). ``constant`` names where the range is declared, so a fixed release's XPASS says what to change."""

    constant: str
    first: Version
    last: Version
    what: str

    def affects(self, version: Version | None) -> bool:
        """Whether this release ships the regression; an unknown version (stub, not installed): False."""
        return version is not None and self.first <= version <= self.last

    @property
    def range_text(self) -> str:
        return f"{_text(self.first)}..{_text(self.last)}"


# Known regressions (../shared/reference/sglang-0.5.16-internals.md), inclusive version ranges.
SHM_COPY = KnownRegression(
    "SHM_COPY", (0, 5, 12), (0, 5, 23),
    "regression 1: ShmPointerMMData.__init__ copies with torch frombuffer(...).copy_, whose intra-op fan-out "
    "burns the quota")
IPC_CACHE_OFF = KnownRegression(
    "IPC_CACHE_OFF", (0, 0, 0), (0, 5, 16),
    "regression 2: SGLANG_USE_IPC_POOL_HANDLE_CACHE defaults to off, so the scheduler re-opens the IPC pool "
    "handle for every image")
PP_MICROBATCH_CAP = KnownRegression(
    "PP_MICROBATCH_CAP", (0, 5, 16), (0, 5, 23),
    "regression 3: without --pp-max-micro-batch-size the scheduler caps each micro-batch at "
    "max(max_running_requests // pp_size, 1), so pipeline parallelism silently admits fewer running requests")


def _text(version: Version) -> str:
    return ".".join(str(p) for p in version)


def installed() -> str | None:
    """The installed SGLang version (from distribution metadata; SGLang is not imported), or None."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def suite_version() -> str:
    """This suite's own version (``sglang-perf-suite``), for messages that say which suite supports what."""
    try:
        return metadata.version(SUITE_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def parse(text: str | None) -> Version | None:
    """``"0.5.16"`` or ``"0.5.23.post1"`` -> ``(0, 5, 16)`` / ``(0, 5, 23)``; None stays None."""
    if not text:
        return None
    parts: list[int] = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None


def is_newer_than_checked(version: Version | None) -> bool:
    return version is not None and version[:3] > NEWEST_CHECKED


def unsupported(what: str, version: str | None) -> str:
    """The error text for a layout piece this release does not have: what moved, which suite supports which
    releases, and the two ways out."""
    ver = version or "unknown"
    newer = " (newer than any release this suite was checked against)" if is_newer_than_checked(parse(version)) \
        else ""
    return (f"SGLang {ver}{newer}: {what}. sglang-perf-suite {suite_version()} supports SGLang "
            f"{SUPPORTED[0]}..{SUPPORTED[-1]}; install one of those (pip install 'sglang>={SUPPORTED[0]},"
            f"<={SUPPORTED[-1]}') or teach engine_fixtures/sglang_version.py this release's layout")


def shm_layout(init_names: tuple[str, ...] | frozenset[str]) -> str:
    """The ``ShmPointerMMData.__init__`` layout from the names its code uses (``__init__.__code__.co_names``)."""
    return SHM_LAYOUT_0_5_19 if _SHM_LAYOUT_0_5_19_MARKER in init_names else SHM_LAYOUT_0_5_16


def run_batch_problem(parameters: Sequence[str]) -> str | None:
    """Why a ``Scheduler.run_batch`` with these parameter names (``inspect.signature`` of the method, or its ``def``
    read from source) is not the layout the running-batch probe knows (``"takes (...), not (self, batch, ...)"``);
    None when it is."""
    return leading_params_problem(parameters, RUN_BATCH_PARAMS)


def model_forward_problem(parameters: Sequence[str]) -> str | None:
    """Why a ``ModelRunner.forward`` with these parameter names is not the layout the ``slow-decode`` patch knows;
    None when it is."""
    return leading_params_problem(parameters, MODEL_FORWARD_PARAMS)


def leading_params_problem(parameters: Sequence[str], expected: tuple[str, ...]) -> str | None:
    """Why a method with these parameter names does not start with ``expected`` (``"takes (...), not (...)"``); None
    when it does (and always for an empty ``expected``)."""
    if tuple(parameters[:len(expected)]) == expected:
        return None
    return f"takes ({', '.join(parameters)}), not ({', '.join(expected)}, ...)"


def expected_shm_layout(version: Version | None) -> str | None:
    """The layout a release is known to have (None: unknown version)."""
    if version is None or is_newer_than_checked(version):
        return None
    return SHM_LAYOUT_0_5_19 if version >= SHM_LAYOUT_0_5_19_FROM else SHM_LAYOUT_0_5_16


def ipc_cache_layout(wrap_names: Container[str], module_names: Container[str] = ()) -> str | None:
    """The pool-handle cache layout from the names ``_wrap_tensor_for_cuda_ipc`` uses (its ``__code__.co_names``)
    and the module's globals; None when neither flag is read there (a layout this suite does not know)."""
    if IPC_CACHE_GLOBAL in wrap_names and IPC_CACHE_GLOBAL in module_names:
        return IPC_CACHE_LAYOUT_GLOBAL
    if IPC_CACHE_ATTR in wrap_names:
        return IPC_CACHE_LAYOUT_ATTR
    return None


def expected_ipc_cache_layout(version: Version | None) -> str | None:
    """The pool-handle cache layout a release is known to have (None: unknown version)."""
    if version is None or is_newer_than_checked(version):
        return None
    return IPC_CACHE_LAYOUT_ATTR if version >= IPC_CACHE_ATTR_FROM else IPC_CACHE_LAYOUT_GLOBAL


def cuda_ipc_module(version: Version | None) -> str | None:
    """The module that defines ``CudaIpcTensorTransportProxy`` in this release (None: unknown version)."""
    if version is None or is_newer_than_checked(version):
        return None
    return CUDA_IPC_MODULES[0] if version >= CUDA_IPC_MOVED else CUDA_IPC_MODULES[1]


def has_preprocess_cache_flag(version: Version | None) -> bool:
    """Whether this release has ``--mm-preprocess-cache-size-mb`` (unknown version: assume not)."""
    return version is not None and version >= PREPROCESS_CACHE_FLAG


def shm_copy_unfixed(version: Version | None) -> bool:
    """Whether this release ships the SHM ``copy_`` fan-out (regression 1); unknown version: False."""
    return SHM_COPY.affects(version)


def ipc_cache_off_by_default(version: Version | None) -> bool:
    """Whether this release leaves the IPC pool-handle cache off by default (regression 2); unknown: False."""
    return IPC_CACHE_OFF.affects(version)
