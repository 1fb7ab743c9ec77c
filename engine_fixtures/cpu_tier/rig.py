"""One arm's processes: a consumer (outside any quota) and a producer started inside a ``CpuQuota``.

Contract of ``Rig.start(arm, stack, tmp, seed)``: both processes are ``isolation.process.Supervised``
(pipes for the JSON-lines protocol, the curated child environment, the caller's session); every resource
it creates is registered on ``stack`` (processes asked to stop, then their trees stopped, then the cgroup
removed, also on failure); each process's stderr goes to a log in ``tmp`` whose tail is quoted by every
error. ``rig.window(n)`` runs ``n`` requests and returns one value per metric: ``requests_per_s``,
``latency_p50_ms``, ``latency_p99_ms``, ``producer_cpu_cores`` (``CpuSampler`` over the quota's pids), and
with a quota ``producer_share_of_quota``, ``throttled_periods`` and ``throttled_ratio``
(``CgroupSampler``). Zero completed requests or any failed request raise ``MeasurementError``; a producer
that dies or stays silent raises ``ProcessCrashed``.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import subprocess
import sys
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine_fixtures.cpu_tier.arms import AUTHKEY_ENV, CpuTierArm
from engine_fixtures.errors import MeasurementError, ProcessCrashed, ProcessStartError, QuotaNotPermitted
from engine_fixtures.isolation.cgroups import CpuQuota
from engine_fixtures.isolation.leaks import mapped_semaphores
from engine_fixtures.isolation.process import CHILD_PASSTHROUGH, LaunchSpec, Supervised, curated_env
from engine_fixtures.sampling.cgroup import CgroupSampler
from engine_fixtures.sampling.cpu import CpuSampler

START_DEADLINE_S = 120.0
WINDOW_DEADLINE_S = 600.0
STOP_DEADLINE_S = 30.0


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").rstrip()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


@dataclass
class Rig:
    arm: CpuTierArm
    quota: CpuQuota
    producer: Supervised
    consumer: Supervised
    logs: tuple[Path, Path]
    semaphores: set[int] = field(default_factory=set)  # inodes mapped by the rig's processes
    stage_ms: list[list[float]] = field(default_factory=list)  # per window: [decode ms, SHM create ms]

    @classmethod
    def start(cls, arm: CpuTierArm, stack: ExitStack, tmp: str, seed: int, cgroup_name: str = "mech", *,
              copy_impl: str | None = None, spin_ms: float = 0.0) -> Rig:
        """Start ``arm``'s consumer and producer; ``copy_impl``/``spin_ms`` inject a forced copy or a CPU spin
        per request (``--perf-inject``), else the arm runs as declared."""
        quota = stack.enter_context(CpuQuota(arm.quota, name=cgroup_name))
        address = os.path.join(tmp, f"c{seed}.sock")
        extra = {AUTHKEY_ENV: secrets.token_bytes(16).hex()}
        plog, clog = Path(tmp, f"producer-{seed}.log"), Path(tmp, f"consumer-{seed}.log")
        cons = Supervised.start(launch("consumer", (address,), clog, extra))
        stack.callback(stop_child, cons, None)
        if readline(cons, START_DEADLINE_S) != "listening":
            raise ProcessStartError(f"cpu_tier consumer did not listen on {address} (exit {cons.proc.poll()}); "
                                    f"its log:\n{log_tail(clog)}")
        if arm.wait_policy == "passive":
            extra["OMP_WAIT_POLICY"] = "PASSIVE"
        spec = {"copy": copy_impl or arm.copy, "spin_ms": spin_ms, "threads": arm.thread_count(),
                "resolution": arm.resolution, "concurrency": arm.concurrency, "address": address, "seed": seed}
        try:
            proc = Supervised.start(launch("producer", (json.dumps(spec),), plog, extra), sandbox=quota)
        except QuotaNotPermitted as exc:
            raise ProcessStartError(f"cpu_tier producer for {arm.id} could not join cgroup {quota.path} "
                                    f"({exc.__cause__}; exists: {quota.path.exists()}); was it removed by someone "
                                    "else's cleanup?") from exc.__cause__
        stack.callback(stop_child, proc, json.dumps({"stop": True}))
        rig = cls(arm, quota, proc, cons, (plog, clog))
        line = readline(proc, START_DEADLINE_S)
        if not line.startswith("{") or not json.loads(line).get("ready"):
            raise ProcessStartError(f"cpu_tier producer for {arm.id} did not start (exit {proc.proc.poll()}):\n"
                                    f"{rig.tails()}")
        return rig

    def tails(self) -> str:
        return "\n".join(f"--- {p.name} (tail) ---\n{log_tail(p)}" for p in self.logs)

    def window(self, requests: int) -> dict[str, float]:
        """Run one window of ``requests`` requests at the arm's concurrency; its metrics."""
        cpu = CpuSampler(lambda: {"producer": self.quota.pids()}, interval_s=0.1, quota_cores=self.arm.quota,
                         name="producer-cpu")
        cg = CgroupSampler.for_quota(self.quota)
        with cpu, cg:
            try:
                self.producer.proc.stdin.write(json.dumps({"window": requests}) + "\n")
                self.producer.proc.stdin.flush()
            except OSError:
                pass  # a dead producer is reported by the read below, with its log
            line = readline(self.producer, WINDOW_DEADLINE_S)
            self.semaphores |= mapped_semaphores((*self.quota.pids(), self.consumer.pid))
        if not line:
            self.producer.proc.wait(timeout=STOP_DEADLINE_S)
            raise ProcessCrashed(f"cpu_tier producer of {self.arm.id} died during a window (exit code "
                                 f"{self.producer.proc.returncode}):\n{self.tails()}")
        out = json.loads(line)
        lat = out["latencies_ms"]
        if not lat:
            raise MeasurementError(f"{self.arm.id}: zero completed requests in a window of {requests} "
                                   f"({out['n_errors']} errors, e.g. {out['errors']}); see the logs:\n{self.tails()}")
        if out["n_errors"]:
            raise MeasurementError(f"{self.arm.id}: {out['n_errors']} of {requests} requests failed, e.g. "
                                   f"{out['errors']}; see the logs:\n{self.tails()}")
        c, g = cpu.summary(), cg.summary()
        self.stage_ms.append(out["stage_ms"])
        m = {"requests_per_s": len(lat) / out["wall_s"], "latency_p50_ms": float(np.percentile(lat, 50)),
             "latency_p99_ms": float(np.percentile(lat, 99)), "producer_cpu_cores": c["cpu.producer.cores"]}
        if self.arm.quota is not None:
            m["producer_share_of_quota"] = g["cgroup.share_of_quota"]
            m["throttled_periods"] = g["cgroup.throttled_periods"]
            m["throttled_ratio"] = g.get("cgroup.throttled_ratio", 0.0)
        return m


def launch(role: str, args: tuple[str, ...], log: Path, extra: dict[str, str]) -> LaunchSpec:
    """``python -m engine_fixtures.cpu_tier.<role> ARGS``: JSON lines over stdin/stdout, stderr to ``log``,
    in this process's session (scheduled as before), with the curated child environment plus ``extra``."""
    return LaunchSpec((sys.executable, "-m", f"engine_fixtures.cpu_tier.{role}", *args), log,
                      curated_env(extra, CHILD_PASSTHROUGH), name=f"cpu_tier {role}", stdio="pipes", text=True,
                      new_session=False)


def readline(child: Supervised, deadline_s: float) -> str:
    """One stdout line of ``child`` within ``deadline_s`` ('' at EOF); ProcessCrashed on timeout."""
    proc = child.proc
    ready, _, _ = select.select([proc.stdout], [], [], deadline_s)
    if not ready:
        raise ProcessCrashed(f"cpu_tier process pid {proc.pid} gave no reply within {deadline_s:g} s "
                             f"(exit code {proc.poll()}); raise the deadline or look for a hang in its log")
    return proc.stdout.readline().strip()


def stop_child(child: Supervised, stop_line: str | None) -> None:
    """Ask ``child`` to stop (or let it see EOF) and give it ``STOP_DEADLINE_S``; then stop its tree
    (SIGKILL what is left, ``LeakError`` if anything survives; the pipes are closed)."""
    proc = child.proc
    if proc.poll() is None and stop_line is not None:
        try:
            proc.stdin.write(stop_line + "\n")
            proc.stdin.flush()
        except OSError:
            pass
    for f in (proc.stdin, proc.stdout):
        if f is not None:
            with suppress(OSError):
                f.close()
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_DEADLINE_S)
    child.stop(grace_s=0.0, kill_timeout_s=STOP_DEADLINE_S)
