"""One arm's processes: a consumer (outside any quota) and a producer started inside a ``CpuQuota``.

Contract of ``Rig.start(arm, stack, tmp, seed)``: every resource it creates is registered on ``stack``
(processes stopped, then the cgroup removed, also on failure); each process's stderr goes to a log in
``tmp`` whose tail is quoted by every error. ``rig.window(n)`` runs ``n`` requests and returns one value
per metric: ``requests_per_s``, ``latency_p50_ms``, ``latency_p99_ms``, ``producer_cpu_cores``
(``CpuSampler`` over the quota's pids), and with a quota ``producer_share_of_quota``,
``throttled_periods`` and ``throttled_ratio`` (``CgroupSampler``). Zero completed requests or any failed
request raise ``MeasurementError``; a producer that dies or stays silent raises ``ProcessCrashed``.
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

from engine_fixtures.errors import MeasurementError, ProcessCrashed, ProcessStartError
from engine_fixtures.isolation.cgroups import CpuQuota
from engine_fixtures.isolation.leaks import mapped_semaphores
from engine_fixtures.mechbench.arms import AUTHKEY_ENV, MechArm
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
    arm: MechArm
    quota: CpuQuota
    producer: subprocess.Popen
    consumer: subprocess.Popen
    logs: tuple[Path, Path]
    semaphores: set[int] = field(default_factory=set)  # inodes mapped by the rig's processes
    stage_ms: list[list[float]] = field(default_factory=list)  # per window: [decode ms, SHM create ms]

    @classmethod
    def start(cls, arm: MechArm, stack: ExitStack, tmp: str, seed: int, cgroup_name: str = "mech") -> Rig:
        quota = stack.enter_context(CpuQuota(arm.quota, name=cgroup_name))
        address = os.path.join(tmp, f"c{seed}.sock")
        env = {**os.environ, AUTHKEY_ENV: secrets.token_bytes(16).hex()}
        plog, clog = Path(tmp, f"producer-{seed}.log"), Path(tmp, f"consumer-{seed}.log")
        with clog.open("w") as err:
            cons = subprocess.Popen([sys.executable, "-m", "engine_fixtures.mechbench.consumer", address],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True,
                                    env=env)
        stack.callback(_stop, cons, None)
        if _readline(cons, START_DEADLINE_S) != "listening":
            raise ProcessStartError(f"mechbench consumer did not listen on {address} (exit {cons.poll()}); "
                                    f"its log:\n{log_tail(clog)}")
        if arm.wait_policy == "passive":
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        spec = {"copy": arm.copy, "threads": arm.thread_count(), "resolution": arm.resolution,
                "concurrency": arm.concurrency, "address": address, "seed": seed}
        with plog.open("w") as err:
            try:
                proc = subprocess.Popen([sys.executable, "-m", "engine_fixtures.mechbench.producer",
                                         json.dumps(spec)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=err, text=True, env=env, preexec_fn=quota.preexec_fn())
            except subprocess.SubprocessError as exc:
                raise ProcessStartError(f"mechbench producer for {arm.id} could not join cgroup {quota.path} "
                                        f"({exc}; exists: {quota.path.exists()}); was it removed by someone "
                                        "else's cleanup?") from exc
        stack.callback(_stop, proc, json.dumps({"stop": True}))
        rig = cls(arm, quota, proc, cons, (plog, clog))
        line = _readline(proc, START_DEADLINE_S)
        if not line.startswith("{") or not json.loads(line).get("ready"):
            raise ProcessStartError(f"mechbench producer for {arm.id} did not start (exit {proc.poll()}):\n"
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
                self.producer.stdin.write(json.dumps({"window": requests}) + "\n")
                self.producer.stdin.flush()
            except OSError:
                pass  # a dead producer is reported by the read below, with its log
            line = _readline(self.producer, WINDOW_DEADLINE_S)
            self.semaphores |= mapped_semaphores((*self.quota.pids(), self.consumer.pid))
        if not line:
            self.producer.wait(timeout=STOP_DEADLINE_S)
            raise ProcessCrashed(f"mechbench producer of {self.arm.id} died during a window (exit code "
                                 f"{self.producer.returncode}):\n{self.tails()}")
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


def _readline(proc: subprocess.Popen, deadline_s: float) -> str:
    """One stdout line of ``proc`` within ``deadline_s`` ('' at EOF); ProcessCrashed on timeout."""
    ready, _, _ = select.select([proc.stdout], [], [], deadline_s)
    if not ready:
        raise ProcessCrashed(f"mechbench process pid {proc.pid} gave no reply within {deadline_s:g} s "
                             f"(exit code {proc.poll()}); raise the deadline or look for a hang in its log")
    return proc.stdout.readline().strip()


def _stop(proc: subprocess.Popen, stop_line: str | None) -> None:
    """Ask ``proc`` to stop (or let it see EOF), wait, SIGKILL after ``STOP_DEADLINE_S``; close its pipes."""
    try:
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
        proc.wait(timeout=STOP_DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_DEADLINE_S)
