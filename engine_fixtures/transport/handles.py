"""Handles of the transport arms (``transport.arms``): make one, read it once, or release it unread.

``produce(arm, tensor) -> (keepalive, payload)``: the payload is the pickled handle (metadata only: the bytes sit
in /dev/shm or GPU memory); keep ``keepalive`` until the consumer has read it. ``materialize(handle)`` reads a
handle once (an SHM segment is unlinked as it is read); ``release(handle)`` unlinks one that will never be read.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from typing import Any

import torch

from engine_fixtures.transport import cuda_ipc, sglang_compat
from engine_fixtures.transport.arms import SEGMENT_PREFIX, TransportArm
from engine_fixtures.transport.shm import ShmTensor


def skip_reason(arm: TransportArm) -> str | None:
    """Why ``arm`` cannot run here (SGLang not importable, no CUDA), or None."""
    if arm.kind == "sglang":
        lookup = sglang_compat.find_shm_class()
        return None if lookup.cls is not None else lookup.reason  # moved: the 'sglang' marker errors first
    if arm.kind == "cuda_ipc":
        return cuda_ipc.skip_reason()
    return None


def create(arm: TransportArm, tensor: torch.Tensor, prefix: str = SEGMENT_PREFIX) -> Any:
    """A fresh SHM handle holding ``tensor`` (the suite's segments are named ``<prefix><pid>_<hex>``)."""
    if arm.kind == "shm":
        return ShmTensor.create(tensor, copy=arm.copy or "torch", prefix=prefix)
    if arm.kind == "sglang":
        cls = sglang_compat.find_shm_class().cls
        if cls is None:
            raise RuntimeError(skip_reason(arm))
        if arm.copy is None:
            return cls(tensor)
        with sglang_compat.copy_arm(cls, arm.copy):
            return cls(tensor)
    raise TypeError(f"arm {arm.id} has no SHM handle: use produce()")


def produce(arm: TransportArm, tensor: torch.Tensor, prefix: str = SEGMENT_PREFIX) -> tuple[Any, bytes]:
    if arm.kind == "cuda_ipc":
        return cuda_ipc.share(tensor)
    return None, pickle.dumps(create(arm, tensor, prefix))


def materialize(handle: object) -> torch.Tensor:
    """Read a handle once: a rebuilt CUDA IPC tensor, or an SHM handle's tensor (its segment is unlinked)."""
    if isinstance(handle, torch.Tensor):  # CUDA IPC: the rebuilt tensor is a view of the producer's memory
        return cuda_ipc.receive(pickle.dumps(handle))
    return handle.materialize()  # type: ignore[attr-defined]  # ShmTensor or SGLang's ShmPointerMMData


def release(handle: object) -> None:
    """Unlink the segment of a handle that will not be read (failure paths)."""
    if isinstance(handle, ShmTensor):
        handle.discard()
        return
    name = getattr(handle, "shm_name", None)
    if name:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"/dev/shm/{name}")
    elif hasattr(handle, "materialize"):  # a class without a name attribute: reading it unlinks
        handle.materialize()
