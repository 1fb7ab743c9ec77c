"""Tokenizer-manager-like producer process (run as ``python -m engine_fixtures.cpu_tier.producer``).

Started by the rig inside a ``CpuQuota`` (``Supervised.start(..., sandbox=quota)``); argv[1] is a JSON spec, the
consumer's authkey comes in ``$PERF_MECH_AUTHKEY``. Before any clock starts it encodes ``images`` random
photo-like JPEGs, builds one float32 ``pixel_values`` tensor of Qwen2.5-VL's shape per image and connects
to the consumer. Then it prints ``{"ready": ...}`` and serves stdin commands: ``{"window": N}`` -> one
JSON line ``{"wall_s", "latencies_ms", "errors", "n_errors", "stage_ms"}`` (stage_ms: median wall
ms per request of decode + pixel write, and of the SHM create/copy); ``{"stop": true}`` or EOF -> exit.
A malformed command is a crash (traceback on stderr, non-zero exit), never a silent reply.

Per request, on the asyncio loop thread like SGLang's ``_send_one_request``: decode the JPEG (a real
PIL decode, ~10-25 ms at 1024 px on this box), write its pixels into the head of the image's
pre-built ``pixel_values`` tensor, copy the tensor into a fresh /dev/shm segment with the copy arm
(``ShmTensor.create``: the only intra-op-parallel torch op), send the handle, await the reply.

Why pre-built tensors and JPEG only (faithfulness AND sensitivity): in SGLang on the H200 the image
processor runs on the GPU or in IO threads (internals 7.5), so the tokenizer manager's own CPU per
request is dominated by the SHM copy. Building 25.8 MB of float32 per request on the CPU (another full
memory pass) or decoding PNG noise (~150 ms at 1024 px, 5-10x a JPEG) would bury the copy-arm effect
in work the real process does not do. A consumer failure or a closed connection becomes a per-request
error (reported by the driver), never a hang.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import os
import pickle
import sys
import time
from multiprocessing.connection import Client, Connection

import numpy as np
import torch
from PIL import Image

from engine_fixtures.cpu_tier.arms import AUTHKEY_ENV, pixel_shape, transport_arm
from engine_fixtures.inject import spin
from engine_fixtures.transport import handles

MECH_PREFIX = "perf_mech_"


def make_images(resolution: int, count: int, seed: int) -> list[bytes]:
    """``count`` distinct square JPEGs (smooth, photo-like content from upscaled noise), quality 90."""
    rng = np.random.default_rng(seed)
    blobs = []
    for _ in range(count):
        arr = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(arr).resize((resolution, resolution), Image.BILINEAR).save(buf, format="JPEG", quality=90)
        blobs.append(buf.getvalue())
    return blobs


def decode(blob: bytes) -> np.ndarray:
    """The image's RGB pixels, flat ``uint8``."""
    return np.asarray(Image.open(io.BytesIO(blob)).convert("RGB")).reshape(-1)


def build_pixel_values(blob: bytes, resolution: int) -> torch.Tensor:
    """A float32 (patches, 1176) tensor filled with the image's pixels, tiled (the patch layout does not
    change the copy's cost, so it is not reproduced)."""
    decoded = decode(blob)
    patches, values = pixel_shape(resolution)
    out = np.empty(patches * values, dtype=np.float32)
    filled = min(decoded.size, out.size)
    out[:filled] = decoded[:filled]
    while filled < out.size:  # tile by doubling
        step = min(filled, out.size - filled)
        out[filled:filled + step] = out[:step]
        filled += step
    return torch.from_numpy(out.reshape(patches, values))


class Producer:
    """C concurrent request workers over one consumer connection."""

    def __init__(self, spec: dict, conn: Connection) -> None:
        self.copy = spec["copy"]
        self.spin_ms = float(spec.get("spin_ms", 0.0))  # an injected slowdown (--perf-inject), else 0
        self.concurrency = int(spec["concurrency"])
        self.blobs = make_images(int(spec["resolution"]), int(spec.get("images", 4)), int(spec["seed"]))
        self.tensors = [build_pixel_values(b, int(spec["resolution"])) for b in self.blobs]
        self.conn = conn
        self.ids = itertools.count()
        self.pending: dict[int, tuple[asyncio.Future, object]] = {}
        self.closed: str | None = None
        self.stage_ms: list[tuple[float, float]] = []  # per request: (decode + pixel write, SHM create) ms

    def _on_reply(self) -> None:
        try:
            while self.conn.poll():
                rid, err = self.conn.recv()
                self.pending.pop(rid)[0].set_result(err)
        except (EOFError, OSError) as exc:
            self._close(exc)

    def _close(self, exc: BaseException) -> None:
        """The consumer is gone: fail every in-flight request and unlink its unread segment."""
        if self.closed is None:
            self.closed = f"consumer connection closed ({type(exc).__name__})"
            asyncio.get_running_loop().remove_reader(self.conn.fileno())
        for fut, handle in self.pending.values():
            handles.release(handle)
            fut.set_result(self.closed)
        self.pending.clear()

    async def _one(self, i: int) -> tuple[float, str | None]:
        t0 = time.perf_counter()
        if self.closed:
            return 0.0, self.closed
        k = i % len(self.blobs)
        pixels = decode(self.blobs[k])
        flat = self.tensors[k].view(-1).numpy()
        n = min(pixels.size, flat.size)
        flat[:n] = pixels[:n]
        spin(self.spin_ms)
        t1 = time.perf_counter()
        handle = handles.create(transport_arm(self.copy), self.tensors[k], MECH_PREFIX)
        self.stage_ms.append(((t1 - t0) * 1000.0, (time.perf_counter() - t1) * 1000.0))
        rid = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = (fut, handle)
        try:
            self.conn.send((rid, pickle.dumps(handle)))
        except OSError as exc:
            self._close(exc)
        err = await fut
        return (time.perf_counter() - t0) * 1000.0, err

    async def window(self, n: int) -> dict:
        loop = asyncio.get_running_loop()
        if not self.closed:
            loop.add_reader(self.conn.fileno(), self._on_reply)
        todo = iter(range(n))
        out: list[tuple[float, str | None]] = []

        async def worker() -> None:
            for i in todo:
                out.append(await self._one(i))

        t0 = time.perf_counter()
        try:
            await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        finally:
            if not self.closed:
                loop.remove_reader(self.conn.fileno())
        wall = time.perf_counter() - t0
        errors = [e for _, e in out if e is not None]
        stages, self.stage_ms = self.stage_ms, []
        return {"stage_ms": [float(np.median(col)) for col in zip(*stages, strict=True)] if stages else [],
                "wall_s": wall, "latencies_ms": [lat for lat, e in out if e is None], "errors": errors[:3],
                "n_errors": len(errors)}


def main() -> None:
    spec = json.loads(sys.argv[1])
    torch.set_num_threads(int(spec["threads"]))
    conn = Client(spec["address"], family="AF_UNIX", authkey=bytes.fromhex(os.environ[AUTHKEY_ENV]))
    producer = Producer(spec, conn)
    print(json.dumps({"ready": True, "threads": torch.get_num_threads(), "pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("stop"):
            break
        print(json.dumps(asyncio.run(producer.window(int(cmd["window"])))), flush=True)
    conn.close()


if __name__ == "__main__":
    main()
