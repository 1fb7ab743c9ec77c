"""The transports under test, each a producer function ``tensor -> (keepalive, payload bytes)``."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from engine_fixtures.transport import cuda_ipc, sglang_compat
from engine_fixtures.transport.shm import SEGMENT_PREFIX, ShmTensor

SGLANG_PREFIX = "sgl_shm_mm_"


@dataclass(frozen=True)
class Transport:
    id: str
    produce: Callable[[torch.Tensor], tuple[Any, bytes]]
    skip: Callable[[], str | None]
    prefixes: tuple[str, ...] = (SEGMENT_PREFIX,)


def _shm(arm: str) -> Callable[[torch.Tensor], tuple[Any, bytes]]:
    return lambda t: (None, pickle.dumps(ShmTensor.create(t, copy=arm)))


def _sglang(arm: str) -> Callable[[torch.Tensor], tuple[Any, bytes]]:
    def produce(t: torch.Tensor) -> tuple[Any, bytes]:
        cls = sglang_compat.find_shm_class().cls
        with sglang_compat.copy_arm(cls, arm):
            return None, pickle.dumps(cls(t))

    return produce


def _sglang_skip() -> str | None:
    lookup = sglang_compat.find_shm_class()
    return None if lookup.cls is not None else lookup.reason


TRANSPORTS = (
    Transport("shm-torch", _shm("torch"), lambda: None),
    Transport("shm-buffer", _shm("buffer"), lambda: None),
    Transport("shm-control", _shm("control"), lambda: None),
    Transport("sglang-torch", _sglang("torch"), _sglang_skip, (SGLANG_PREFIX,)),
    Transport("sglang-buffer", _sglang("buffer"), _sglang_skip, (SGLANG_PREFIX,)),
    Transport("cuda_ipc", cuda_ipc.share, cuda_ipc.skip_reason, ()),
)
