"""The one registry of transport arms: how an image tensor crosses from the tokenizer manager to the scheduler.

Every tier names its arms here: the CPU tier's producer and consumer, the bitwise round-trip properties, and the
GPU tier's engine arms (``ENGINE_COPY_ARMS``: SGLang as shipped, ``stock``, or one of the copy arms applied by the
suite's SGLang plugin).

- ``shm-<copy>``: the suite's ``ShmTensor`` filled by a copy arm (``torch``, ``buffer``) or by the frozen
  ``control`` yardstick;
- ``sglang``: SGLang's own ``ShmPointerMMData`` exactly as the installed release ships it (no patch);
  ``sglang-<copy>``: the same class with a copy arm applied (``sglang_compat.copy_arm``);
- ``cuda_ipc``: a CUDA tensor shared by IPC handle (GPU only).

Names only (no torch: the plugin and the engine spec import it); ``transport.handles`` makes and reads the handles.
"""

from __future__ import annotations

from dataclasses import dataclass

COPY_ARMS: tuple[str, ...] = ("torch", "buffer")  # SGLang's line (intra-op parallel) and the one-memcpy fix
CONTROL_ARM = "control"  # the suite's frozen yardstick (one ctypes.memmove), not one of SGLang's arms
SEGMENT_PREFIX = "perf_shm_"  # the suite's ShmTensor segments
SGLANG_PREFIX = "sgl_shm_mm_"  # SGLang's make_shm_name("mm") segments
ENGINE_COPY_ARMS: tuple[str, ...] = ("stock", *COPY_ARMS)  # the GPU tier's copy arms of the engine


@dataclass(frozen=True)
class TransportArm:
    id: str
    kind: str  # "shm" | "sglang" | "cuda_ipc"
    copy: str | None = None  # the copy arm; None for SGLang as shipped and for CUDA IPC

    @property
    def prefixes(self) -> tuple[str, ...]:
        """Name prefixes of the /dev/shm segments this arm creates (none for CUDA IPC)."""
        return {"shm": (SEGMENT_PREFIX,), "sglang": (SGLANG_PREFIX,), "cuda_ipc": ()}[self.kind]


ARMS: dict[str, TransportArm] = {a.id: a for a in (
    *(TransportArm(f"shm-{c}", "shm", c) for c in (*COPY_ARMS, CONTROL_ARM)),
    TransportArm("sglang", "sglang"),
    *(TransportArm(f"sglang-{c}", "sglang", c) for c in COPY_ARMS),
    TransportArm("cuda_ipc", "cuda_ipc"),
)}


def arm(arm_id: str) -> TransportArm:
    try:
        return ARMS[arm_id]
    except KeyError:
        raise ValueError(f"unknown transport arm {arm_id!r}: use one of {', '.join(ARMS)}") from None
