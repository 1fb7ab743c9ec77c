"""The stub engine's stand-in for SGLang's scheduler module, so the plugin's running-batch probe runs end to end.

``Scheduler.run_batch(self, batch, pp_proxy_tensors=None)`` has the signature of SGLang's (0.5.16 through 0.5.23,
``managers/scheduler.py``), and ``ScheduleBatch`` the two fields the probe reads (``forward_mode`` with
``is_decode()`` / ``is_mixed()``, and ``reqs``). The stub engine names this module to the plugin
(``PERF_ARMS_SCHEDULER_MODULE``; never set in the product path) and imports it in each scheduler-titled child before it
loads the plugins, as SGLang's scheduler process loads them from inside its scheduler module. ``serve(conn)`` is such
a child's loop: every number the stub's server sends is one decode step over that many running requests, run through
``Scheduler.run_batch``; it returns when the server's end of the pipe closes.
"""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any


class ForwardMode(enum.IntEnum):
    EXTEND = enum.auto()
    DECODE = enum.auto()
    MIXED = enum.auto()
    IDLE = enum.auto()

    def is_decode(self) -> bool:
        return self == ForwardMode.DECODE

    def is_mixed(self) -> bool:
        return self == ForwardMode.MIXED


@dataclass(frozen=True)
class ScheduleBatch:
    reqs: tuple[Any, ...]
    forward_mode: ForwardMode


class Scheduler:
    """Runs batches of nothing: what the probe sees is the batch it is handed."""

    def __init__(self) -> None:
        self.forward_ct = 0

    def run_batch(self, batch: ScheduleBatch, pp_proxy_tensors: Any = None) -> int:
        self.forward_ct += 1
        return len(batch.reqs)


def serve(conn: Connection) -> None:
    """Run one decode batch of ``n`` requests for each ``n`` received, until the pipe closes."""
    scheduler = Scheduler()
    with contextlib.suppress(EOFError):
        while True:
            n = int(conn.recv())
            scheduler.run_batch(ScheduleBatch(tuple(range(n)), ForwardMode.DECODE))
