"""py-spy recordings of role processes, all in parallel, around one load window; the collapsed-stack parser.

``record(pids_by_role, drive_load, rate_hz, seconds, workdir, label)`` starts one
``py-spy record --pid PID --rate HZ --duration S+margin --format raw --full-filenames --nonblocking``
per process of every role (``--subprocesses`` on request, for a role whose process forks untitled workers),
waits until each says it samples (a condition with a deadline, never a sleep), runs ``drive_load(seconds)``
(which returns the requests completed), then stops every py-spy with SIGINT, which makes it write what it has,
so the sampled window is the load window (``--duration`` is only the backstop). It returns ``RoleProfiles``:
per role the summed stacks, the rate, the window's requests and seconds.

Sampling: py-spy reads the stacks of the target's Python threads ``rate`` times a second; idle threads are left
out unless ``--idle`` is given, which this module never passes, so each sample is ~1/rate s of a running thread
(``model`` says what that misses). ``--nonblocking`` does not pause the target (less overhead, a torn stack now
and then, which py-spy counts as an error). ``--function`` aggregates by the function's first line.

Where py-spy cannot attach (binary missing, no ptrace permission, process gone) the role gets an empty profile
whose ``note`` is one line with the reason and the fix, and the window still runs: profiling never fails a
verdict. Every subprocess has a timeout; every py-spy is started by the one supervisor
(``isolation.process.Supervised``: owner-tagged, so a sweep finds one a crashed run left) and stopped and reaped on
every path.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from engine_fixtures.isolation.process import LaunchSpec, Supervised
from engine_fixtures.profile.model import Frame, Profile, RoleProfiles, Stack

BINARY_ENV = "PERF_PY_SPY"
ATTACH_DEADLINE_S = 30.0  # py-spy needs ~0.1-1 s to attach and read the interpreter's layout
STOP_DEADLINE_S = 60.0  # after SIGINT it writes the raw file; large profiles take a moment
MARGIN_S = 30.0  # --duration backstop beyond the window; the SIGINT at the window's end is what stops it
PERMISSION_FIX = ("profiles need ptrace permission over the engine's processes: run as root or as their user with "
                  "kernel.yama.ptrace_scope=0, or give py-spy CAP_SYS_PTRACE (`setcap cap_sys_ptrace+ep "
                  "$(which py-spy)`); the verdicts stand without a profile")
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")
_SUMMARY = re.compile(r"Samples: (?P<samples>\d+) Errors: (?P<errors>\d+)")


def py_spy_binary() -> str | None:
    """``$PERF_PY_SPY`` (e.g. a copy given CAP_SYS_PTRACE) if set, else py-spy next to this interpreter (a venv's
    bin), else on PATH; None where there is none."""
    chosen = os.environ.get(BINARY_ENV, "")
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


def parse_frame(text: str) -> Frame:
    m = _FRAME.match(text.strip())
    if m is None:
        return Frame(text.strip(), "", 0)
    return Frame(m["function"], m["file"], int(m["line"] or 0))


def package_root(file: str, seen: dict[str, str]) -> str:
    """The directory ``file``'s top-level package sits in (the first ancestor without an ``__init__.py``), so a
    frame's module path is taken inside the build it runs (``Frame.in_build``) wherever that build is installed; ""
    where the file is not on this machine (the markers of ``model.module_path`` then decide). Read from the files,
    not the process: SGLang's titled processes overwrite their environment with their title (setproctitle)."""
    directory = os.path.dirname(file)
    if directory not in seen:
        d = directory
        while d not in ("", "/") and os.path.exists(os.path.join(d, "__init__.py")):
            d = os.path.dirname(d)
        seen[directory] = d if os.path.isfile(file) else ""
    return seen[directory]


def parse_collapsed(text: str) -> dict[Stack, int]:
    """py-spy's raw output (``frame;frame;... COUNT`` per line, root first) as stack -> samples; the
    ``process PID:"cmd"`` and ``thread (0x..)`` pseudo-frames (``--subprocesses``/``--threads``) are dropped."""
    out: dict[Stack, int] = {}
    for line in text.splitlines():
        body, _, count = line.rstrip().rpartition(" ")
        if not body or not count.isdigit():
            continue
        frames = tuple(parse_frame(f) for f in body.split(";")
                       if f and not f.startswith(("process ", "thread (")))
        out[frames] = out.get(frames, 0) + int(count)
    return out


@dataclass
class _Spy:
    """One running py-spy over one pid."""

    role: str
    pid: int
    sup: Supervised | None  # py-spy, started by the one supervisor (owner-tagged, its tree reaped on every path)
    raw: Path
    log: Path
    note: str = ""

    @property
    def proc(self) -> subprocess.Popen[str] | None:
        return self.sup.proc if self.sup is not None else None

    def wait_sampling(self, deadline: float) -> None:
        """Until py-spy says it samples, or exits (a refusal: its first error line becomes the note)."""
        proc = self.proc
        if proc is None or proc.stdout is None:
            return
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, left))
            line = proc.stdout.readline() if ready else None
            if line and "Sampling process" in line:
                return
            if line == "" or left <= 0:  # EOF: py-spy exited (or never said it samples in time)
                self.stop()
                self.note = self.note or self.refusal(timed_out=left <= 0)
                return

    def refusal(self, timed_out: bool = False) -> str:
        err = self.log.read_text(errors="replace") if self.log.exists() else ""
        first = next((ln.strip() for ln in err.splitlines() if ln.strip() and not ln.startswith(" ")),
                     "no output")
        if timed_out:
            first = f"no sample within {ATTACH_DEADLINE_S:g} s ({first})"
        fix = PERMISSION_FIX if re.search(r"ermission|ptrace|EPERM|Operation not permitted", err) else (
            "the process is gone or not a Python interpreter py-spy knows (py-spy 0.4 reads CPython 3.x)")
        return f"py-spy could not profile {self.role} pid {self.pid}: {first}; {fix}"

    def stop(self) -> tuple[dict[Stack, int], int]:
        """SIGINT (py-spy writes what it sampled), wait, reap; (stacks, py-spy's error count)."""
        proc = self.proc
        if proc is None:
            return {}, 0
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            out = ""
            self.note = self.note or f"py-spy on {self.role} pid {self.pid} did not stop within {STOP_DEADLINE_S:g} s"
        finally:
            self.sup.stop(grace_s=1.0)  # type: ignore[union-attr]  # SIGTERM, SIGKILL what is left, reaped
        m = _SUMMARY.search(out or "")
        stacks = parse_collapsed(self.raw.read_text(errors="replace")) if self.raw.exists() else {}
        placed: dict[Stack, int] = {}
        roots: dict[str, str] = {}
        for stack, n in stacks.items():
            key = tuple(f.in_build((package_root(f.file, roots),)) for f in stack)
            placed[key] = placed.get(key, 0) + n
        return placed, int(m["errors"]) if m else 0


def _missing_note() -> str:
    return (f"py-spy not found ({BINARY_ENV}={os.environ.get(BINARY_ENV, '')!r}, none next to {sys.executable} or "
            "on PATH): no profile taken; install it (`pip install 'py-spy>=0.4,<0.5'`, a dependency "
            f"of this suite) or point {BINARY_ENV} at it")


def _start(binary: str, role: str, pid: int, rate_hz: float, max_s: float, workdir: Path,
           subprocesses: bool) -> _Spy:
    raw, log = workdir / f"{role}-{pid}.raw", workdir / f"{role}-{pid}.log"
    argv = [binary, "record", "--pid", str(pid), "--rate", f"{rate_hz:g}", "--duration", str(int(max_s) + 1),
            "--format", "raw", "--full-filenames", "--nonblocking", "--output", str(raw)]
    if subprocesses:
        argv.append("--subprocesses")
    spec = LaunchSpec(tuple(argv), log, name=f"py-spy {role} {pid}", stdio="pipes", text=True)
    return _Spy(role, pid, Supervised.start(spec), raw, log)


def record(pids_by_role: Mapping[str, Sequence[int]], drive_load: Callable[[float], int], *, rate_hz: float,
           seconds: float, workdir: Path, label: str = "", subprocesses: Sequence[str] = ()) -> RoleProfiles:
    """Profile every role's processes in parallel over one ``drive_load(seconds)`` window (module docstring)."""
    binary = py_spy_binary()
    if binary is None:  # nothing to record: the window is not spent (the H200 nightly lost 50 s to five of them)
        note = _missing_note()
        return RoleProfiles(label, MappingProxyType({
            role: Profile(role, rate_hz, 0, 0.0, MappingProxyType({}), tuple(pids), 0, note)
            for role, pids in pids_by_role.items()}), (note,))
    workdir.mkdir(parents=True, exist_ok=True)
    spies: list[_Spy] = []
    try:
        for role, pids in pids_by_role.items():
            spies += [_start(binary, role, pid, rate_hz, seconds + MARGIN_S, workdir, role in subprocesses)
                      for pid in pids]
        deadline = time.monotonic() + ATTACH_DEADLINE_S
        for spy in spies:
            if spy.proc is not None:
                spy.wait_sampling(deadline)
        t0 = time.monotonic()
        requests = int(drive_load(seconds))
        window_s = time.monotonic() - t0
    finally:
        stopped = [(spy, *spy.stop()) for spy in spies]
    profiles: dict[str, Profile] = {}
    for role, pids in pids_by_role.items():
        stacks: dict[Stack, int] = {}
        errors = 0
        for spy, st, err in stopped:
            if spy.role == role and not spy.note:
                errors += err
                for s, n in st.items():
                    stacks[s] = stacks.get(s, 0) + n
        role_notes = [s.note for s in spies if s.role == role and s.note]
        profiles[role] = Profile(role, rate_hz, requests, window_s, MappingProxyType(stacks), tuple(pids), errors,
                                 "; ".join(role_notes))
    notes = tuple(dict.fromkeys(s.note for s in spies if s.note))  # one line per distinct reason
    return RoleProfiles(label, MappingProxyType(profiles), notes)

