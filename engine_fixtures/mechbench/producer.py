"""Tokenizer-manager-like producer process (run as ``python -m engine_fixtures.mechbench.producer``).

Started by the driver inside a ``CpuQuota`` (``Popen(preexec_fn=...)``). argv[1] is a JSON spec.
Before any clock starts it encodes random images (JPEG and PNG) and connects to the consumer. Then it
prints ``{"ready": ...}`` and serves stdin commands ``{"window": N}`` -> one JSON line
``{"wall_s", "latencies_ms", "errors"}`` and ``{"stop": true}`` -> exit. Per request, on the asyncio
loop thread like SGLang's ``_send_one_request``: decode the image, build the float32 ``pixel_values``
of Qwen2.5-VL's shape (numpy, single-threaded: the SHM copy is the only intra-op-parallel torch op),
copy it into a fresh /dev/shm segment with the copy arm, send the handle, await the consumer's reply. C requests run concurrently.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import pickle
import sys
import time
from multiprocessing.connection import Client, Connection

import numpy as np
import torch
from PIL import Image

from engine_fixtures.mechbench.arms import pixel_shape
from engine_fixtures.transport.shm import ShmTensor

MECH_PREFIX = "perf_mech_"


def make_images(resolution: int, count: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    blobs = []
    for i in range(count):
        arr = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)  # unique content, photo-like smoothness
        buf = io.BytesIO()
        Image.fromarray(arr).resize((resolution, resolution), Image.BILINEAR).save(buf, format="JPEG" if i % 2 == 0 else "PNG", quality=90)
        blobs.append(buf.getvalue())
    return blobs


def pixel_values(blob: bytes, resolution: int) -> torch.Tensor:
    """Decode the image, then fill a float32 (patches, 1176) tensor with its pixels (tiled).

    GPU preprocessing is SGLang's default (internals 7.5), so the tokenizer's CPU cost per request is
    decode + a host tensor; the exact patch layout does not change the copy's cost, so it is skipped."""
    decoded = np.asarray(Image.open(io.BytesIO(blob)).convert("RGB")).reshape(-1)
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
    def __init__(self, spec: dict, conn: Connection) -> None:
        self.copy = spec["copy"]
        self.concurrency = int(spec["concurrency"])
        self.resolution = int(spec["resolution"])
        self.blobs = make_images(int(spec["resolution"]), int(spec.get("images", 8)), int(spec["seed"]))
        self.conn = conn
        self.ids = itertools.count()
        self.pending: dict[int, asyncio.Future] = {}

    def _on_reply(self) -> None:
        while self.conn.poll():
            rid, err = self.conn.recv()
            self.pending.pop(rid).set_result(err)

    async def _one(self, i: int) -> tuple[float, str | None]:
        t0 = time.perf_counter()
        handle = ShmTensor.create(pixel_values(self.blobs[i % len(self.blobs)], self.resolution), copy=self.copy,
                                  prefix=MECH_PREFIX)
        rid = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        self.conn.send((rid, pickle.dumps(handle)))
        err = await fut
        return (time.perf_counter() - t0) * 1000.0, err

    async def window(self, n: int) -> dict:
        loop = asyncio.get_running_loop()
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
            loop.remove_reader(self.conn.fileno())
        wall = time.perf_counter() - t0
        errors = [e for _, e in out if e is not None]
        return {"wall_s": wall, "latencies_ms": [lat for lat, e in out if e is None], "errors": errors[:3],
                "n_errors": len(errors)}


def main() -> None:
    spec = json.loads(sys.argv[1])
    torch.set_num_threads(int(spec["threads"]))
    conn = Client(spec["address"], family="AF_UNIX", authkey=bytes.fromhex(spec["authkey"]))
    producer = Producer(spec, conn)
    print(json.dumps({"ready": True, "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("stop"):
            break
        print(json.dumps(asyncio.run(producer.window(int(cmd["window"])))), flush=True)
    conn.close()


if __name__ == "__main__":
    main()
