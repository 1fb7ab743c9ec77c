"""The transports under test, each a producer function ``tensor -> (keepalive, payload bytes)``."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
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
    sglang: bool = False  # SGLang's own class: the 'sglang' marker skips or fails it (plugin), never this skip

    def param(self) -> object:
        return pytest.param(self, id=self.id, marks=[pytest.mark.sglang] if self.sglang else [])


def _shm(arm: str) -> Callable[[torch.Tensor], tuple[Any, bytes]]:
    return lambda t: (None, pickle.dumps(ShmTensor.create(t, copy=arm)))


def _sglang(arm: str) -> Callable[[torch.Tensor], tuple[Any, bytes]]:
    def produce(t: torch.Tensor) -> tuple[Any, bytes]:
        cls = sglang_compat.find_shm_class().cls
        with sglang_compat.copy_arm(cls, arm):
            return None, pickle.dumps(cls(t))

    return produce


TRANSPORTS = (
    Transport("shm-torch", _shm("torch"), lambda: None),
    Transport("shm-buffer", _shm("buffer"), lambda: None),
    Transport("shm-control", _shm("control"), lambda: None),
    Transport("sglang-torch", _sglang("torch"), lambda: None, (SGLANG_PREFIX,), sglang=True),
    Transport("sglang-buffer", _sglang("buffer"), lambda: None, (SGLANG_PREFIX,), sglang=True),
    Transport("cuda_ipc", cuda_ipc.share, cuda_ipc.skip_reason, ()),
)
