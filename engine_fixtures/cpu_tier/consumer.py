"""Scheduler-like consumer (run as ``python -m engine_fixtures.cpu_tier.consumer ADDRESS``): open,
materialise (clone), release, reply. One torch thread, like SGLang's scheduler. Serves one producer
connection on a ``multiprocessing.connection`` unix socket (authkey hex in ``$PERF_MECH_AUTHKEY``);
exits when the producer disconnects. A failed materialise unlinks the segment and replies the error."""

from __future__ import annotations

import os
import pickle
import sys
from multiprocessing.connection import Listener

import torch

from engine_fixtures.cpu_tier.arms import AUTHKEY_ENV
from engine_fixtures.transport import handles


def serve(address: str, authkey: bytes) -> None:
    """Accept one producer; for each ``(request_id, handle bytes)`` materialise and reply ``(id, error)``."""
    torch.set_num_threads(1)
    with Listener(address, family="AF_UNIX", authkey=authkey) as listener:
        print("listening", flush=True)
        with listener.accept() as conn:
            while True:
                try:
                    rid, payload = conn.recv()
                except EOFError:
                    return
                handle = pickle.loads(payload)
                try:
                    handles.materialize(handle)
                    conn.send((rid, None))
                except Exception as exc:
                    handles.release(handle)
                    conn.send((rid, f"{type(exc).__name__}: {exc}"))


if __name__ == "__main__":
    serve(sys.argv[1], bytes.fromhex(os.environ[AUTHKEY_ENV]))
