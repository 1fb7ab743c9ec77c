"""The mechanism producer's copy arms as SHM handles: the suite's ``ShmTensor`` arms and SGLang's own class.

``torch``, ``buffer`` and ``control`` are ``transport.shm.ShmTensor`` copy arms (``control`` is the frozen
yardstick every arm is expressed against). ``sglang`` is SGLang's ``ShmPointerMMData`` exactly as the
installed release ships it (no patch), so a change in SGLang's copy path is judged on a CPU box too; it needs
SGLang importable in the producer's and the consumer's interpreter (``sglang_skip_reason`` says why not).
Every handle pickles as metadata only, is materialised once by the consumer, or discarded unread.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

from engine_fixtures.transport import sglang_compat
from engine_fixtures.transport.shm import CONTROL_ARM, COPY_ARMS, ShmTensor

SGLANG_ARM = "sglang"
CPU_TIER_ARMS: tuple[str, ...] = (*COPY_ARMS, CONTROL_ARM, SGLANG_ARM)
SGLANG_PREFIX = "sgl_shm_mm_"  # SGLang's make_shm_name("mm") segments


def sglang_skip_reason() -> str | None:
    lookup = sglang_compat.find_shm_class()
    return None if lookup.cls is not None else lookup.reason


def create(tensor: torch.Tensor, arm: str, prefix: str) -> Any:
    """A fresh segment holding ``tensor``, filled by ``arm``."""
    if arm == SGLANG_ARM:
        cls = sglang_compat.find_shm_class().cls
        if cls is None:
            raise RuntimeError(sglang_skip_reason())
        return cls(tensor)
    return ShmTensor.create(tensor, copy=arm, prefix=prefix)


def discard(handle: Any) -> None:
    """Unlink an unread segment (failure paths) of either kind of handle."""
    if isinstance(handle, ShmTensor):
        handle.discard()
        return
    name = getattr(handle, "shm_name", None)
    if name:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"/dev/shm/{name}")
