"""A long-lived consumer process for the round-trip properties (one per test module).

Protocol over ``multiprocessing`` pipes (the consumer serves several producers at once with
``connection.wait``): the producer sends ``(op, payload)`` where ``payload`` is the pickled handle
(bytes). ``op`` is ``"materialize"`` (open, materialize, reply with a digest), ``"fail"`` (unpickle,
raise before reading: the consumer must still release the segment) or ``"stop"``. Replies are
``("ok", Digest)`` or ``("error", message)``; one ``("ready", None)`` on the first pipe comes first.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

import torch

from engine_fixtures.transport import handles


@dataclass(frozen=True)
class Digest:
    """What crossed the boundary: bytes (as sha256 and length), dtype, shape and device."""

    sha256: str
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    device: str


def digest_of(tensor: torch.Tensor) -> Digest:
    from engine_fixtures.transport.shm import flat_bytes

    raw = flat_bytes(tensor).numpy().tobytes()
    return Digest(hashlib.sha256(raw).hexdigest(), len(raw), str(tensor.dtype), tuple(tensor.shape),
                  str(tensor.device))


def _handle(op: str, payload: bytes) -> tuple[str, object]:
    obj = None
    try:
        obj = pickle.loads(payload)
        if op == "fail":
            raise RuntimeError("injected consumer failure before materialize")
        return "ok", digest_of(handles.materialize(obj))
    except Exception as exc:
        if obj is not None:
            try:
                handles.release(obj)
            except Exception as rel:
                return "error", f"{type(exc).__name__}: {exc}; release failed too: {rel!r}"
        return "error", f"{type(exc).__name__}: {exc}"


def serve(conns: list[Connection]) -> None:
    """Serve every connection until each has sent ``stop`` or closed. Runs single-threaded torch.

    SGLang (where installed) is imported before the first request, not while unpickling it: that import takes
    10-20 s on a 2-core box, and a segment waiting that long in /dev/shm is exposed to whatever else sweeps it
    (a concurrent suite's leak check removed one that way, failing the first example of each SGLang env)."""
    from engine_fixtures.transport.sglang_compat import find_shm_class

    torch.set_num_threads(1)  # like SGLang's scheduler
    find_shm_class()
    conns[0].send(("ready", None))  # the fixture hands the consumer out only after this
    live = list(conns)
    while live:
        for conn in wait(live):
            try:
                op, payload = conn.recv()
            except EOFError:
                live.remove(conn)
                continue
            if op == "stop":
                live.remove(conn)
                conn.send(("ok", None))
                continue
            conn.send(_handle(op, payload))
