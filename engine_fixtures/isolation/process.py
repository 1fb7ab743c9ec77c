"""Supervise one process tree: start it (in a new session) inside a sandbox, wait for readiness, stop all of it.

The one place the suite starts a process tree: the engine, the mechanism benchmark's producer and consumer,
its copy loop, the load client and the self-tests' stubs all go through ``Supervised``.

Contracts:
- ``Supervised.start(spec, sandbox)`` starts ``spec.argv`` with ``spec.env`` (default ``curated_env()``) plus
  ``PERF_RUN_OWNER`` (the run's owner token, ``owner.current()``, unless ``spec.env`` sets it: a later run's
  sweep finds the tree by it if this run dies) inside ``sandbox`` (a ``Sandbox`` such as ``CpuQuota``) from
  the first instruction, in a new session unless ``spec.new_session`` is False. ``spec.stdio``: ``"log"``
  (stdin /dev/null, stdout and stderr to ``spec.log_path``) or ``"pipes"`` (``proc.stdin``/``proc.stdout`` are
  pipes, in text mode if ``spec.text``, for a line or frame protocol; stderr to ``spec.log_path``).
- ``wait_ready(condition, deadline_s)`` returns the seconds it took, or raises ``ProcessStartError`` at
  once when the process exits, or at the deadline (never later than one poll interval past it).
- ``ensure_alive()`` raises ``ProcessCrashed`` if the process has exited.
- ``stop()`` SIGTERMs the group and every descendant (snapshot taken first), SIGKILLs survivors after
  ``grace_s`` and raises ``LeakError`` if anything is still alive; then closes the pipes. Idempotent.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import psutil

from engine_fixtures.errors import (
    ConfigError,
    LeakError,
    ProcessCrashed,
    ProcessStartError,
    QuotaNotPermitted,
)
from engine_fixtures.isolation.owner import OWNER_ENV
from engine_fixtures.isolation.owner import current as current_owner
from engine_fixtures.isolation.signals import describe_exit, wait_exited

TRACKER_GRACE_S = 5.0  # how long a resource tracker may take to clean up after its clients died
PASSTHROUGH: tuple[str, ...] = (
    "PATH", "HOME", "USER", "LANG", "LC_*", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV",
    "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "NVIDIA_VISIBLE_DEVICES", "HF_*",
    "HUGGINGFACE_*", "TRANSFORMERS_*",
)
# The suite's own measuring children (cpu_tier producer/consumer and copy loop, load client, self-test stubs)
# inherited the whole environment before the supervisor curated it. Of that environment these can change how
# they run or what they measure (interpreter settings, OpenMP/MKL thread pools and their spinning, the
# allocator), so they still pass: an operator's OMP_NUM_THREADS=8 experiment still reaches the producer.
# The engine gets PASSTHROUGH only, as before.
TUNING_PASSTHROUGH: tuple[str, ...] = (
    "PYTHON*", "OMP_*", "GOMP_*", "KMP_*", "MKL_*", "OPENBLAS_*", "TORCH_*", "MALLOC_*", "LD_PRELOAD",
)
CHILD_PASSTHROUGH: tuple[str, ...] = (*PASSTHROUGH, *TUNING_PASSTHROUGH)
STDIO = ("log", "pipes")


def curated_env(extra: Mapping[str, str] | None = None, passthrough: Iterable[str] = PASSTHROUGH,
                source: Mapping[str, str] | None = None) -> dict[str, str]:
    """pyperf-style environment: only the ``passthrough`` names (``*`` globs allowed) of ``source``
    (default ``os.environ``), then ``extra`` on top. Nothing else leaks into the child."""
    source = os.environ if source is None else source
    patterns = tuple(passthrough)
    env = {k: v for k, v in source.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)}
    env.update(extra or {})
    return env


class Sandbox(Protocol):
    """What ``Supervised`` needs of a sandbox (``isolation.cgroups.CpuQuota`` is one): join it before exec,
    list who is inside, say where it is."""

    @property
    def path(self) -> Path: ...

    def preexec_fn(self) -> Callable[[], None]: ...

    def pids(self) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class LaunchSpec:
    """What to start: argv, the complete environment, working directory, log file and a display name;
    ``stdio`` (``"log"`` or ``"pipes"``, see the module docstring) and ``text`` (pipes as text);
    ``new_session=False`` keeps the child in the caller's session and process group: a measuring child
    (cpu_tier, load client) is then scheduled as before (with autogroup scheduling a new session is a new
    scheduling group), and ``stop()`` signals it and its descendants one by one instead of a group."""

    argv: tuple[str, ...]
    log_path: Path
    env: Mapping[str, str] = field(default_factory=curated_env)
    cwd: Path | None = None
    name: str = ""
    stdio: str = "log"
    text: bool = False
    new_session: bool = True
    cpus: tuple[int, ...] | None = None  # CPU affinity of the child (inherited by its whole tree)

    def __post_init__(self) -> None:
        if not self.argv:
            raise ConfigError("LaunchSpec.argv is empty; pass the command to run, e.g. ('python', '-m', ...)")
        if self.stdio not in STDIO:
            raise ConfigError(f"LaunchSpec.stdio={self.stdio!r}: use 'log' (stdout and stderr to log_path) or "
                              "'pipes' (stdin/stdout pipes, stderr to log_path)")
        object.__setattr__(self, "argv", tuple(str(a) for a in self.argv))
        if not self.name:
            object.__setattr__(self, "name", Path(self.argv[0]).name)

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class StopReport:
    """How a stop went: the root's exit status and which pids needed SIGTERM or SIGKILL."""

    pid: int
    returncode: int | None
    terminated: tuple[int, ...]  # exited within the grace period
    killed: tuple[int, ...]  # needed SIGKILL
    elapsed_s: float


def _is_tracker(p: psutil.Process) -> bool:
    try:
        return "multiprocessing.resource_tracker" in " ".join(p.cmdline())
    except psutil.Error:
        return False


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signal(procs: Iterable[psutil.Process], sig: int) -> None:
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            p.send_signal(sig)


class Supervised:
    """A started process tree; use ``Supervised.start`` and as a context manager (``stop`` on exit)."""

    def __init__(self, spec: LaunchSpec, proc: subprocess.Popen[Any], sandbox: Sandbox | None) -> None:
        self.spec = spec
        self.proc = proc
        self.sandbox = sandbox
        self.started = time.monotonic()
        self._report: StopReport | None = None

    @classmethod
    def start(cls, spec: LaunchSpec, sandbox: Sandbox | None = None) -> Supervised:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        pipes = spec.stdio == "pipes"
        env = {**spec.env}
        env.setdefault(OWNER_ENV, current_owner().token)  # so a later run can find the tree if this run dies
        join = sandbox.preexec_fn() if sandbox is not None else None
        cpus = spec.cpus

        def preexec() -> None:  # in the child, before exec: its whole tree inherits both
            if join is not None:
                join()
            if cpus is not None:
                os.sched_setaffinity(0, cpus)

        with open(spec.log_path, "wb") as log:
            try:
                proc = subprocess.Popen(
                    spec.argv, env=env, cwd=spec.cwd,
                    stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
                    stdout=subprocess.PIPE if pipes else log, stderr=log if pipes else subprocess.STDOUT,
                    text=spec.text and pipes, start_new_session=spec.new_session,
                    preexec_fn=preexec if join is not None or cpus is not None else None)
            except FileNotFoundError as exc:
                raise ProcessStartError(f"cannot start {spec.name}: {exc.filename!r} not found "
                                        f"(command: {spec.command}); check PATH in LaunchSpec.env") from None
            except subprocess.SubprocessError as exc:
                where = sandbox.path if sandbox is not None else "?"
                raise QuotaNotPermitted(f"{spec.name} could not join cgroup {where} before exec ({exc}); "
                                        f"run as root or pass --perf-cpu-quota none") from exc
        return cls(spec, proc, sandbox)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log file (decoded leniently)."""
        try:
            data = self.spec.log_path.read_bytes()[-64 * 1024:]
        except FileNotFoundError:
            return "(no log file)"
        return "\n".join(data.decode(errors="replace").splitlines()[-lines:])

    def _details(self, what: str, budget_s: float | None = None) -> str:
        budget = f" of its {budget_s:.1f} s budget" if budget_s is not None else ""
        return (f"{self.spec.name} (pid {self.pid}) {what} after {self.elapsed_s():.1f} s{budget}\n"
                f"  command: {self.spec.command}\n  log: {self.spec.log_path}\n"
                f"--- last lines of the log ---\n{self.log_tail()}")

    def wait_ready(self, condition: Callable[[], bool], deadline_s: float, interval_s: float = 0.25) -> float:
        """Poll ``condition`` every ``interval_s`` until true; return the seconds since start.

        Raises ProcessStartError at once if the process exits, or once ``deadline_s`` (counted from
        this call) has passed."""
        t0 = time.monotonic()
        end = t0 + deadline_s
        while True:
            if self.proc.poll() is not None:
                what = f"{describe_exit(self.proc.returncode)} before it was ready"
                raise ProcessStartError(self._details(what, deadline_s) + "\nFix the cause shown in the log.")
            if condition():
                return self.elapsed_s()
            left = end - time.monotonic()
            if left <= 0:
                raise ProcessStartError(self._details("was not ready", deadline_s) + "\nIf it was only slow, "
                                        "raise the deadline (e.g. --perf-engine-timeout); else see the log.")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=min(interval_s, left))

    def ensure_alive(self) -> None:
        """Raise ProcessCrashed if the process has exited (for checks during a measurement)."""
        if self.proc.poll() is not None:
            raise ProcessCrashed(self._details(describe_exit(self.proc.returncode) + " while being measured"))

    def _tree(self) -> dict[int, psutil.Process]:
        found: dict[int, psutil.Process] = {}
        with contextlib.suppress(psutil.NoSuchProcess):
            found.update({c.pid: c for c in psutil.Process(self.pid).children(recursive=True)})
        for pid in self.sandbox.pids() if self.sandbox is not None and self.sandbox.path.exists() else ():
            if pid != self.pid:
                with contextlib.suppress(psutil.NoSuchProcess):
                    found.setdefault(pid, psutil.Process(pid))
        return found

    def _signal_root(self, sig: int) -> None:
        """The root's process group (its own session), or the root alone when it shares the caller's."""
        with contextlib.suppress(ProcessLookupError):
            if self.spec.new_session:
                os.killpg(self.pid, sig)
            else:
                self.proc.send_signal(sig)

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def _wait_root(self, timeout_s: float) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=max(0.0, timeout_s))

    def stop(self, grace_s: float = 10.0, kill_timeout_s: float = 10.0) -> StopReport:
        """SIGTERM the whole tree, SIGKILL what survives ``grace_s``; LeakError if anything remains."""
        if self._report is not None:
            return self._report
        t0 = time.monotonic()
        tree = self._tree()  # before signalling: children may sit in other sessions or groups
        with_root = self.proc.poll() is None
        if with_root:
            self._signal_root(signal.SIGTERM)
        _signal(tree.values(), signal.SIGTERM)
        self._wait_root(grace_s)
        wait_exited(tree.values(), max(0.0, grace_s - (time.monotonic() - t0)))
        killed: set[int] = set()
        deadline = time.monotonic() + kill_timeout_s
        first = True
        while True:
            alive = [p for p in {**tree, **self._tree()}.values() if _alive(p)]
            root_alive = self.proc.poll() is None
            if not alive and not root_alive:
                break
            if time.monotonic() > deadline:
                pids = sorted({p.pid for p in alive} | ({self.pid} if root_alive else set()))
                self._close_pipes()
                raise LeakError(f"{self.spec.name}: processes {pids} survived SIGKILL for {kill_timeout_s} s "
                                f"(uninterruptible sleep?); inspect with `ps -o pid,stat,wchan,cmd -p ...`")
            # multiprocessing's resource tracker ignores SIGTERM and unlinks the tree's named semaphores
            # and segments once its clients are gone: SIGKILLing it with them leaks /dev/shm/sem.mp-*.
            spared = [p for p in alive if first and _is_tracker(p)]
            victims = [p for p in alive if p not in spared]
            if root_alive:
                killed.add(self.pid)
                if spared:
                    self.proc.kill()
                else:
                    self._signal_root(signal.SIGKILL)
            _signal(victims, signal.SIGKILL)
            killed.update(p.pid for p in victims)
            self._wait_root(1.0)
            wait_exited(victims, 1.0)
            if spared:
                wait_exited(spared, max(0.0, min(TRACKER_GRACE_S, deadline - time.monotonic())))
            first = False
        self._close_pipes()
        terminated = tuple(sorted((({self.pid} if with_root else set()) | set(tree)) - killed))
        self._report = StopReport(self.pid, self.proc.returncode, terminated, tuple(sorted(killed)),
                                  time.monotonic() - t0)
        return self._report

    def __enter__(self) -> Supervised:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True if ``port`` cannot be bound on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def require_free_port(port: int, host: str = "127.0.0.1") -> None:
    """ConfigError naming the port, who holds it (if known) and the fix, if ``port`` is taken."""
    if not port_in_use(port, host):
        return
    holders = []
    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                holders.append(f"pid {c.pid} ({' '.join(psutil.Process(c.pid).cmdline())[:80]})")
    except (psutil.AccessDenied, psutil.NoSuchProcess):
        pass
    who = f" by {', '.join(holders)}" if holders else ""
    raise ConfigError(f"port {port} on {host} is already in use{who}; stop that process or pick another port "
                      f"(engine_fixtures.isolation.process.free_port() returns a free one)")
