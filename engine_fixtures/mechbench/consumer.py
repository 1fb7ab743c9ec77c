"""Scheduler-like consumer: open, materialise (clone), release, reply. Single torch thread like SGLang's
scheduler. Serves one producer connection over a ``multiprocessing.connection`` unix socket."""

from __future__ import annotations

import pickle
from multiprocessing.connection import Listener

import torch


def serve(address: str, authkey: bytes) -> None:
    """Accept one producer; for each ``(request_id, handle bytes)`` materialise and reply the id."""
    torch.set_num_threads(1)
    with Listener(address, family="AF_UNIX", authkey=authkey) as listener, listener.accept() as conn:
        while True:
            try:
                rid, payload = conn.recv()
            except EOFError:
                return
            handle = pickle.loads(payload)
            try:
                handle.materialize()
                conn.send((rid, None))
            except Exception as exc:
                handle.discard()
                conn.send((rid, f"{type(exc).__name__}: {exc}"))
