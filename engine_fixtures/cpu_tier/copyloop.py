"""Isolated SHM copies per copy arm, served round by round from a child inside a CPU quota (microbenchmarks).

``python -m engine_fixtures.cpu_tier.copyloop '{"mb": 10.8, "threads": 2, "copies": 55}'`` (started inside a
``CpuQuota`` by ``CopyLoop.start``, so the quota holds it from its first instruction, never pytest) fills one
random source tensor of ``mb`` MB, sets torch's intra-op threads and prints ``{"ready": true, "threads": n}``.
Then it serves stdin: ``{"round": ARM}`` -> ``copies`` fresh segments filled with that copy arm
(``ShmTensor.create``, as SGLang does per feature), each unlinked after, the last materialised and compared with
the source bytewise -> ``{"copies": n}``; a copy that differs exits non-zero, naming it; ``{"stop": true}`` or EOF
-> exit. The parent times each round from its side (``CopyLoop.round``: in the microbenchmarks, pytest-benchmark's
``benchmark.pedantic`` around it, in the rig's order of arms). Segments of a killed child are swept.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from engine_fixtures.cpu_tier.rig import launch, log_tail, readline, stop_child
from engine_fixtures.errors import MeasurementError, ProcessCrashed, ProcessStartError
from engine_fixtures.isolation import owner
from engine_fixtures.isolation.cgroups import CpuQuota
from engine_fixtures.isolation.process import Supervised
from engine_fixtures.judge import blocks
from engine_fixtures.transport.shm import ShmTensor, sweep_stale

MB = 1_000_000
PREFIX = "perf_mbench_"
START_DEADLINE_S = 120.0  # torch's import under a 0.5-core quota
ROUND_DEADLINE_S = 300.0


def round_order(arms: Sequence[str], rounds: int) -> list[str]:
    """The arm of each timed round: ``rounds`` passes over ``arms``, forward then reversed (``judge.blocks.rounds``),
    so every arm runs once a pass and a linear drift cancels between two passes."""
    return [arms[i] for one in blocks.rounds(list(range(len(arms))), rounds) for i in one]


def copy_round(src: torch.Tensor, arm: str, copies: int) -> None:
    """``copies`` fresh segments filled with ``arm``, each unlinked after; the last must equal ``src``."""
    for _ in range(copies - 1):
        ShmTensor.create(src, copy=arm, prefix=PREFIX).discard()
    if not torch.equal(ShmTensor.create(src, copy=arm, prefix=PREFIX).materialize(), src):
        raise SystemExit(f"{arm} copy of {src.numel()} bytes does not equal its source")


def serve(spec: dict, commands: Iterator[str]) -> Iterator[dict]:
    """The child's answers: ready, then one per ``{"round": ARM}`` command until ``{"stop": true}`` or the end."""
    torch.set_num_threads(int(spec["threads"]))
    src = torch.randint(0, 256, (int(float(spec["mb"]) * MB),), dtype=torch.uint8)
    yield {"ready": True, "threads": torch.get_num_threads()}
    for line in commands:
        order = json.loads(line)
        if order.get("stop"):
            return
        copy_round(src, order["round"], int(spec["copies"]))
        yield {"copies": int(spec["copies"])}


@dataclass(frozen=True)
class CopyLoop:
    """The parent's handle on a copy loop child inside its quota (``start``); ``round(arm)`` runs one round."""

    child: Supervised
    log: Path
    spec: str

    @classmethod
    @contextmanager
    def start(cls, mb: float, threads: int, quota: float | None, copies: int) -> Iterator[CopyLoop]:
        """The child started inside ``CpuQuota(quota)``, ready, with ``threads`` intra-op threads (else
        ``MeasurementError``); stopped, its quota removed and its stray segments swept on exit."""
        spec = json.dumps({"mb": mb, "threads": threads, "copies": copies})
        with ExitStack() as stack:
            stack.callback(sweep_stale, PREFIX)  # a killed child cannot unlink its segment
            tmp = stack.enter_context(owner.temp_dir("mbench"))
            quota_box = stack.enter_context(CpuQuota(quota, name="perf-mbench"))
            log = Path(tmp, "copyloop.log")
            child = Supervised.start(launch("copyloop", (spec,), log, {}), sandbox=quota_box)
            stack.callback(stop_child, child, json.dumps({"stop": True}))
            loop = cls(child, log, spec)
            ready = loop.answer(START_DEADLINE_S, "start")
            if not ready.get("ready"):
                raise ProcessStartError(f"copy loop ({spec}) did not start: {ready}\n{log_tail(log)}")
            if ready["threads"] != threads:
                raise MeasurementError(f"copy loop ran {ready['threads']} intra-op threads, asked for {threads}")
            yield loop

    def round(self, arm: str) -> None:
        """One round of ``arm``'s copies, answered within ``ROUND_DEADLINE_S``."""
        try:
            self.child.proc.stdin.write(json.dumps({"round": arm}) + "\n")
            self.child.proc.stdin.flush()
        except OSError:
            pass  # a dead child is reported by the read below, with its log
        self.answer(ROUND_DEADLINE_S, f"a round of {arm}")

    def answer(self, deadline_s: float, what: str) -> dict:
        line = readline(self.child, deadline_s)
        if not line:
            code = self.child.proc.wait(timeout=30)
            raise ProcessCrashed(f"copy loop ({self.spec}) exited {code} during {what}:\n{log_tail(self.log)}")
        return json.loads(line)


if __name__ == "__main__":
    for answer in serve(json.loads(sys.argv[1]), iter(sys.stdin.readline, "")):
        print(json.dumps(answer), flush=True)
