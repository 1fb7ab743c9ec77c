"""The stub engine's stand-in for SGLang's ``ShmPointerMMData``, so a live copy arm is provable end to end on a CPU box.

``ShmPointerMMData.__init__`` has SGLang 0.5.16's shape (``mm_utils.py:1853-1880``) and its two copy lines verbatim
(``dst = torch.frombuffer(shm.buf, ...)`` / ``dst.copy_(...)``), so the suite's SGLang plugin builds its ``torch`` and
``buffer`` arms from this source exactly as from SGLang's (``transport.sglang_compat``) and labels the copies by their
code. The segment is a private buffer (``memoryview`` of a ``bytearray``), not a /dev/shm segment: nothing to leak.
The stub engine names this module to the plugin (``PERF_ARMS_SHM_MODULE``; never set in the product path) and builds
one object per request where SGLang's tokenizer manager would (``wrap_shm_features``).

The module's ``torch`` is the real one seen through ``_TorchSeen``, which counts ``frombuffer`` calls: the stub tells
from the count which code copied (``copied_with_torch``), from the code's own side effect and not from the plugin's
label, so a dispatcher that ran the wrong code cannot hide it.
"""

from __future__ import annotations

import threading
from typing import Any

import torch as _torch


class _TorchSeen:
    """``torch`` with ``frombuffer`` calls counted per thread (everything else is the real module)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __getattr__(self, name: str) -> Any:
        return getattr(_torch, name)

    def frombuffer(self, *args: Any, **kwargs: Any) -> Any:
        self._local.calls = self.frombuffer_calls + 1
        return _torch.frombuffer(*args, **kwargs)

    @property
    def frombuffer_calls(self) -> int:
        return getattr(self._local, "calls", 0)


torch = _TorchSeen()


class _Segment:
    """A private stand-in for ``multiprocessing.shared_memory.SharedMemory`` (``buf``, ``close``)."""

    def __init__(self, nbytes: int) -> None:
        self.buf = memoryview(bytearray(nbytes))

    def close(self) -> None:
        self.buf.release()


class ShmPointerMMData:
    """Wraps a tensor the way SGLang 0.5.16 does (one bulk copy into the segment)."""

    def __init__(self, tensor, precomputed_hash=None):  # type: ignore[no-untyped-def]
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        self.shape = tensor.shape
        self.dtype = tensor.dtype
        self.precomputed_hash = precomputed_hash
        nbytes = tensor.numel() * tensor.element_size()
        shm = _Segment(nbytes)
        try:
            dst = torch.frombuffer(shm.buf, dtype=torch.uint8)
            dst.copy_(tensor.view(torch.uint8).reshape(-1))
        except BaseException:
            shm.close()
            raise
        self.shm = shm

    def materialize(self) -> Any:
        """The tensor back from the segment (a copy, as SGLang 0.5.16's scheduler makes)."""
        return _torch.frombuffer(self.shm.buf, dtype=self.dtype).reshape(self.shape).clone()


def copied_with_torch(tensor: Any) -> tuple[ShmPointerMMData, bool]:
    """Build one object from ``tensor``; True when the code that copied called ``torch.frombuffer`` (the torch copy
    lines) rather than the buffer assignment."""
    before = torch.frombuffer_calls
    obj = ShmPointerMMData(tensor)
    return obj, torch.frombuffer_calls > before
