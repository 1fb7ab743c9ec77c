"""Fake SGLang releases on disk, for the layouts no real release has yet (an SGLang 0.6 that moved things).

``write(root, version, files)`` lays out ``sglang-<version>.dist-info`` (what ``importlib.metadata`` reads)
and the package files under ``root``; ``run(root, code)`` runs ``code`` in a fresh interpreter with ``root``
first on ``PYTHONPATH``, so the fake shadows any real SGLang without touching this process's imports, and
returns what the code printed as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# The 0.5.16..0.5.23 ShmPointerMMData.__init__ with its copy lines replaced by `replacement`.
SHM_CLASS = '''
import os
import sys
from multiprocessing import shared_memory

import torch


class ShmPointerMMData:
    def __init__(self, tensor, precomputed_hash=None):
        tensor = tensor.contiguous()
        self.shape = tensor.shape
        self.dtype = tensor.dtype
        nbytes = tensor.numel() * tensor.element_size()
        shm = shared_memory.SharedMemory(create=True, size=nbytes)
        try:
            {copy}
        except BaseException:
            shm.close()
            shm.unlink()
            raise
        self.shm_name = shm.name
        shm.close()
'''
TORCH_COPY = ("dst = torch.frombuffer(shm.buf, dtype=torch.uint8)\n"
              "            dst.copy_(tensor.view(torch.uint8).reshape(-1))")
CHANGED_COPY = "torch.frombuffer(shm.buf, dtype=torch.uint8).copy_(tensor.view(torch.uint8).reshape(-1))"


def shm_module(copy: str = TORCH_COPY) -> str:
    return SHM_CLASS.replace("{copy}", copy)


def write(root: Path, version: str, files: dict[str, str]) -> Path:
    dist = root / f"sglang-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    (root / "sglang").mkdir()
    (root / "sglang" / "__init__.py").touch()
    for rel, text in files.items():
        path = root / rel
        for package in path.relative_to(root).parents[:-1]:  # every package above the file, below root
            (root / package).mkdir(parents=True, exist_ok=True)
            (root / package / "__init__.py").touch()
        path.write_text(text)
    return root


def run(root: Path, code: str, timeout_s: float = 120.0) -> object:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
