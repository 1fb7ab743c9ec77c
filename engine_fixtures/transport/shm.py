"""A small, faithful SHM tensor transport with the two copy arms of SGLang's ``ShmPointerMMData``.

Contract:
- ``ShmTensor.create(t, copy=arm)`` copies a CPU tensor into a fresh ``multiprocessing.shared_memory``
  segment named ``perf_shm_<creator pid>_<8 hex>`` (so leak checks and ``sweep_stale`` find it) and
  returns a frozen handle that pickles as metadata only (name, shape, dtype, nbytes).
- Exactly one side releases the segment: the receiver's ``.materialize()`` (clone, close, unlink) or
  ``.discard()`` (unlink unread, for a consumer or producer that fails). A failure inside ``create``
  unlinks before re-raising.
- Copy arms (``COPY_ARMS``, named in ``transport.arms``):
  ``torch`` = ``torch.frombuffer(buf, uint8).copy_(bytes)`` (intra-op
  parallel, SGLang's line); ``buffer`` = ``buf[:n] = bytes.numpy()`` (one memcpy on the calling thread).
  ``control`` (``CONTROL_ARM``, not one of SGLang's arms) is the suite's frozen yardstick: one
  ``ctypes.memmove`` on the calling thread, touched by neither arm's code, so the mechanism benchmark can
  express each arm relative to it. All copy a flat ``uint8`` view, so every dtype works, including
  bfloat16 and float8.
- Inputs are detached, moved to CPU, conj/neg bits resolved and made contiguous first (a lazily
  conjugated complex tensor stays conjugated after ``.contiguous()`` and cannot be viewed as bytes;
  a tensor torch calls contiguous can still have a stride != 1 in a size-1 dim, e.g. ``zeros(2)[::2]``,
  and ``view(torch.uint8)`` rejects it, so such a tensor is cloned densely).
- Zero-size tensors: ``SharedMemory`` cannot be size 0, so a 1-byte segment is created and released
  like any other (uniform lifecycle, leak checks still apply); ``nbytes`` stays 0 and
  ``materialize()`` returns an empty tensor of the right shape and dtype.
- Ownership passes to the handle: the creator unregisters the segment from its resource tracker, so
  no tracker unlinks an in-flight segment at exit; ``sweep_stale`` removes segments of dead creators.
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

import psutil
import torch

from engine_fixtures.errors import ConfigError
from engine_fixtures.transport.arms import CONTROL_ARM, SEGMENT_PREFIX

SHM_DIR = Path("/dev/shm")
_NAME_RE = re.compile(r"^(?P<prefix>.+?)_(?P<pid>\d+)_[0-9a-f]{8}$")


def flat_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's logical content as a contiguous 1-d ``uint8`` CPU tensor (a view when possible)."""
    t = tensor.detach()
    if not t.is_cpu:
        t = t.cpu()
    flat = t.resolve_conj().resolve_neg().contiguous().reshape(-1)  # reshape first: 0-d cannot view
    if flat.numel() == 0:
        return torch.empty(0, dtype=torch.uint8)
    if flat.stride(0) != 1:  # "contiguous" yet strided: a size-1 dim keeps its stride, e.g. zeros(2)[::2]
        flat = flat.clone(memory_format=torch.contiguous_format)
    return flat.view(torch.uint8)


def _copy_torch(buf: memoryview, src: torch.Tensor) -> None:
    dst = torch.frombuffer(buf, dtype=torch.uint8, count=src.numel())
    dst.copy_(src)
    del dst


def _copy_buffer(buf: memoryview, src: torch.Tensor) -> None:
    buf[: src.numel()] = src.numpy()


def _copy_control(buf: memoryview, src: torch.Tensor) -> None:
    dst = (ctypes.c_char * src.numel()).from_buffer(buf)
    ctypes.memmove(dst, src.data_ptr(), src.numel())
    del dst


Copier = Callable[[memoryview, torch.Tensor], None]
COPIERS: dict[str, Copier] = {"torch": _copy_torch, "buffer": _copy_buffer, CONTROL_ARM: _copy_control}


def check_arm(copy: str) -> str:
    if copy not in COPIERS:
        raise ConfigError(f"unknown SHM copy arm {copy!r}: use one of {', '.join(COPIERS)}")
    return copy


def new_segment_name(prefix: str = SEGMENT_PREFIX) -> str:
    return f"{prefix}{os.getpid()}_{secrets.token_hex(4)}"


def list_segments(prefix: str = SEGMENT_PREFIX) -> frozenset[str]:
    """Names of the segments in ``/dev/shm`` that start with ``prefix``."""
    try:
        return frozenset(n for n in os.listdir(SHM_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return frozenset()


def _unlink(name: str) -> bool:
    try:
        (SHM_DIR / name).unlink()
    except FileNotFoundError:
        return False
    return True


def sweep_stale(prefix: str = SEGMENT_PREFIX) -> tuple[str, ...]:
    """Unlink segments with ``prefix`` whose creator process is gone; return their names."""
    removed = []
    for name in sorted(list_segments(prefix)):
        m = _NAME_RE.match(name)
        if m and not psutil.pid_exists(int(m["pid"])) and _unlink(name):
            removed.append(name)
    return tuple(removed)


@dataclass(frozen=True)
class ShmTensor:
    """Handle to one tensor in one SHM segment; pickles as this metadata only."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int

    @classmethod
    def create(cls, tensor: torch.Tensor, copy: str = "torch", prefix: str = SEGMENT_PREFIX) -> ShmTensor:
        """Copy ``tensor`` into a fresh segment with the ``copy`` arm; unlink it if anything fails."""
        copier = COPIERS[check_arm(copy)]
        src = flat_bytes(tensor)
        nbytes = src.numel()
        shm = shared_memory.SharedMemory(create=True, size=max(nbytes, 1), name=new_segment_name(prefix))
        try:
            os.posix_fallocate(shm._fd, 0, max(nbytes, 1))  # ENOSPC as OSError, not SIGBUS mid-copy
            if nbytes:
                copier(shm.buf, src)
            handle = cls(shm.name, tuple(tensor.shape), tensor.dtype, nbytes)
        except BaseException:
            shm.close()
            shm.unlink()
            raise
        shm.close()
        resource_tracker.unregister(shm._name, "shared_memory")  # ownership passes to the handle
        return handle

    def materialize(self) -> torch.Tensor:
        """Open, clone into owned memory, close and unlink. Callable once; the segment is gone after."""
        try:
            shm = shared_memory.SharedMemory(name=self.name)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"SHM segment {self.name!r} does not exist: it was already materialized or discarded "
                "(a handle is consumed once), or its creator's stale sweep removed it"
            ) from None
        try:
            if self.nbytes == 0:
                return torch.empty(self.shape, dtype=self.dtype)
            view = torch.frombuffer(shm.buf, dtype=torch.uint8, count=self.nbytes)
            owned = view.clone()
            del view
            return owned.view(self.dtype).reshape(self.shape)
        finally:
            shm.close()
            shm.unlink()

    def discard(self) -> bool:
        """Unlink the segment unread (failure paths); True if it still existed."""
        return _unlink(self.name)
