"""CUDA IPC round trip through torch.multiprocessing's reductions, and SGLang's IPC proxy.

Contract: ``skip_reason()`` is None only where CUDA works; ``share(t)`` returns the bytes a producer
sends (a ForkingPickler payload holding an IPC handle, not the data; the producer must keep ``t``
alive until the consumer has replied); ``receive(payload)`` in another process opens the handle
and returns an owned clone on the same device. ``sglang_proxy_class()`` finds SGLang's
``CudaIpcTensorTransportProxy`` (0.5.16-0.5.17: ``sglang.srt.utils.cuda_ipc_transport_utils``, 0.5.18+:
``sglang.srt.multimodal.transport.cuda_ipc``) or returns None with the reason.
"""

from __future__ import annotations

import importlib
import pickle
import warnings
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing  # registers the tensor reductions on ForkingPickler

from engine_fixtures import sglang_version

PROXY_MODULES = sglang_version.CUDA_IPC_MODULES


def skip_reason() -> str | None:
    """Why CUDA IPC cannot run here (fact and fix), or None."""
    if not torch.cuda.is_available():
        return (f"CUDA is not available to torch {torch.__version__} (no NVIDIA GPU or a CPU-only wheel): "
                "run this test on a GPU runner with a CUDA build of torch")
    return None


# Finding (H200, torch 2.11.0+cu130): torch's CUDA IPC reduction cannot rebuild float8 tensors in the receiving
# process ("type object 'torch.storage.UntypedStorage' has no attribute 'dtype'"): there is no typed storage
# class for float8. SGLang is not affected (its pool ships raw int8/uint8 bytes plus dtype metadata).
TORCH_REDUCTION_BROKEN_DTYPES = frozenset({torch.float8_e4m3fn, torch.float8_e5m2})


def share(tensor: torch.Tensor, device: int = 0) -> tuple[torch.Tensor, bytes]:
    """Move ``tensor`` to ``cuda:device`` and pickle an IPC handle; returns (the live tensor, payload)."""
    live = tensor.to(f"cuda:{device}").contiguous()
    return live, bytes(ForkingPickler.dumps(live))


def receive(payload: bytes) -> torch.Tensor:
    """Open the IPC handle in this process and return an owned clone (same device)."""
    shared = pickle.loads(payload)
    owned = shared.clone()
    torch.cuda.current_stream(owned.device).synchronize()
    del shared
    return owned


def sglang_proxy_class() -> tuple[type | None, str]:
    """SGLang's ``CudaIpcTensorTransportProxy`` and where it came from, or None and the reason."""
    reasons = []
    for name in PROXY_MODULES:
        try:
            with warnings.catch_warnings():  # SGLang's import chain warns; see sglang_compat.find_shm_class
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except ImportError as exc:
            reasons.append(f"{name}: {exc}")
            continue
        cls = getattr(module, sglang_version.CUDA_IPC_PROXY_CLASS, None)
        if cls is not None:
            return cls, name
        reasons.append(f"{name} has no CudaIpcTensorTransportProxy")
    return None, ("SGLang's CUDA IPC proxy is not importable (" + "; ".join(reasons)
                  + "); install the GPU tier's extra: pip install 'sglang-perf-suite[gpu]'"
                  + ("" if sglang_version.installed() is None else "; " + sglang_version.unsupported(
                      "the proxy is in none of the modules this suite knows", sglang_version.installed())))
