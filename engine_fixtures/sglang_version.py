"""The one place that knows which SGLang is installed and what differs between its releases.

Reads distribution metadata only and imports nothing heavy (no sglang, no torch), so it is safe in the
pytest process at plugin load and inside SGLang's own processes (``sglang_plugin``).

- ``installed() -> str | None``: the installed SGLang version string, or None.
- ``parse(text) -> tuple[int, ...] | None``: ``"0.5.23.post1"`` -> ``(0, 5, 23)``.
- Layout facts by release: where ``ShmPointerMMData`` and the CUDA IPC transport live, how to tell the
  0.5.16 ``ShmPointerMMData.__init__`` from the 0.5.20+ one, which flags and defaults a release has.
- Known regressions by release (used by the strict xfails of the GPU tier): the SHM ``copy_`` fan-out is
  unfixed in ``SHM_COPY_UNFIXED``; the IPC pool-handle cache is off by default before ``IPC_CACHE_DEFAULT_ON``.
"""

from __future__ import annotations

from importlib import metadata

Version = tuple[int, ...]

DISTRIBUTION = "sglang"
SUPPORTED = ("0.5.16", "0.5.23")  # the oldest and newest release the suite was checked against

# Where the multimodal feature transport lives.
MM_UTILS_MODULE = "sglang.srt.managers.mm_utils"  # holds ShmPointerMMData in 0.5.16 and in 0.5.20+
SHM_CLASS = "ShmPointerMMData"
CUDA_IPC_MODULES = (
    "sglang.srt.multimodal.transport.cuda_ipc",  # 0.5.20+ layout (0.5.23 checked)
    "sglang.srt.utils.cuda_ipc_transport_utils",  # 0.5.16 (a re-export shim later)
)
CUDA_IPC_PROXY_CLASS = "CudaIpcTensorTransportProxy"

# ShmPointerMMData.__init__ layouts: 0.5.20+ initialises ``_materialization_error`` first.
SHM_LAYOUT_0_5_16 = "0.5.16"
SHM_LAYOUT_0_5_20 = "0.5.20+"
_SHM_LAYOUT_0_5_20_MARKER = "_materialization_error"

# Defaults and flags that changed between releases.
IPC_CACHE_DEFAULT_ON = (0, 5, 18)  # SGLANG_USE_IPC_POOL_HANDLE_CACHE: off by default before, on from here
PREPROCESS_CACHE_FLAG = (0, 5, 23)  # --mm-preprocess-cache-size-mb exists from here

# Known regressions (../shared/reference/sglang-0.5.16-internals.md), inclusive version range.
SHM_COPY_UNFIXED = ((0, 5, 12), (0, 5, 23))  # torch frombuffer(...).copy_ in ShmPointerMMData.__init__


def installed() -> str | None:
    """The installed SGLang version (from distribution metadata; SGLang is not imported), or None."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


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


def shm_layout(init_names: tuple[str, ...] | frozenset[str]) -> str:
    """The ``ShmPointerMMData.__init__`` layout from the names its code uses (``__init__.__code__.co_names``)."""
    return SHM_LAYOUT_0_5_20 if _SHM_LAYOUT_0_5_20_MARKER in init_names else SHM_LAYOUT_0_5_16


def has_preprocess_cache_flag(version: Version | None) -> bool:
    """Whether this release has ``--mm-preprocess-cache-size-mb`` (unknown version: assume not)."""
    return version is not None and version >= PREPROCESS_CACHE_FLAG


def shm_copy_unfixed(version: Version | None) -> bool:
    """Whether this release ships the SHM ``copy_`` fan-out (regression 1); unknown version: False."""
    low, high = SHM_COPY_UNFIXED
    return version is not None and low <= version <= high


def ipc_cache_off_by_default(version: Version | None) -> bool:
    """Whether this release leaves the IPC pool-handle cache off by default (regression 2); unknown: False."""
    return version is not None and version < IPC_CACHE_DEFAULT_ON
