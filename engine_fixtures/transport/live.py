"""``LiveArm``: what a running engine can be switched to without a restart, as plain data.

One engine per transport serves every arm of regressions 1 and 2: the suite's SGLang plugin switches the SHM copy
path (``stock`` = SGLang's own code, ``torch``, ``buffer``), the CUDA IPC pool-handle cache (``stock`` = the
release's default, ``on``, ``off``), the tokenizer manager's intra-op thread cap (``threads``: None = as launched,
else ``torch.set_num_threads(n)`` on the thread that copies) and the named patches (``sglang_plugin.patches``) on a
live engine. The CPU quota, the concurrency, the image size and the request count change without the plugin (the
cgroup and the load client).

The fixture writes ``arm.to_json(seq)`` to ``<PERF_ARMS_PROOF_DIR>/arms.json`` (``EngineHandle.set_arm``); every
engine process reads it back with ``LiveArm.from_json``, applies it (``sglang_plugin.arm_state``) and reports what it
applied in its proof (``arm_seq`` and ``arm_now``: ``to_dict()``). Names only: no torch, no SGLang (the plugin imports
this in every engine process).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine_fixtures.transport.arms import ENGINE_COPY_ARMS

IPC_CACHE_ARMS: tuple[str, ...] = ("stock", "on", "off")
ARMS_FILE = "arms.json"


@dataclass(frozen=True)
class LiveArm:
    copy: str = "stock"
    ipc_cache: str = "stock"
    threads: int | None = None
    patches: tuple[tuple[str, float], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.copy not in ENGINE_COPY_ARMS:
            raise ValueError(f"live arm copy={self.copy!r}: use one of {', '.join(ENGINE_COPY_ARMS)}")
        if self.ipc_cache not in IPC_CACHE_ARMS:
            raise ValueError(f"live arm ipc_cache={self.ipc_cache!r}: use one of {', '.join(IPC_CACHE_ARMS)}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise ValueError(f"live arm threads={self.threads!r}: use None (as launched) or an int >= 1")
        for name, ms in self.patches:
            if not isinstance(name, str) or not isinstance(ms, (int, float)) or ms < 0:
                raise ValueError(f"live arm patch {name!r}={ms!r}: a patch name and milliseconds >= 0")
        object.__setattr__(self, "patches", tuple(sorted((str(n), float(ms)) for n, ms in self.patches)))

    @property
    def patch_ms(self) -> dict[str, float]:
        return dict(self.patches)

    @property
    def label(self) -> str:
        """``copy=buffer,ipc_cache=stock,threads=8,slow-scheduler=0.2``: every axis, stable."""
        parts = [f"copy={self.copy}", f"ipc_cache={self.ipc_cache}",
                 f"threads={'launch' if self.threads is None else self.threads}"]
        parts += [f"{n}={ms:g}" for n, ms in self.patches]
        return ",".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"copy": self.copy, "ipc_cache": self.ipc_cache, "threads": self.threads,
                "patches": dict(self.patches)}

    def to_json(self, seq: int) -> str:
        return json.dumps({"seq": int(seq), **self.to_dict()}, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LiveArm:
        patches = data.get("patches") or {}
        return cls(copy=str(data.get("copy", "stock")), ipc_cache=str(data.get("ipc_cache", "stock")),
                   threads=data.get("threads"), patches=tuple(dict(patches).items()))

    @classmethod
    def from_json(cls, text: str) -> tuple[int, LiveArm]:
        """``(seq, arm)`` from the text ``to_json`` wrote; ValueError on anything else."""
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("seq"), int):
            raise ValueError(f"not a live-arm file: {text[:200]!r}")
        return data["seq"], cls.from_dict(data)
