"""A run that holds one of everything a perf run leaves behind, for the sweep's self-tests (real objects only).

``python -m perf_tests.support.holder_run --results DIR --state DIR --ready FILE [--quota CORES]
[--cgroup-parent PATH]`` makes itself a run (``owner.claim``), records itself in the state directory, starts a
supervised child inside a real ``CpuQuota`` that creates and maps an SGLang-named ``sgl_shm_*`` segment (no
owner in its name, as SGLang's are), opens an atomic write of ``DIR/results-holder.json`` and leaves it
half-written, writes ``FILE`` (JSON: pids, cgroup paths, segment, temp file) and waits until killed. SIGTERM
ends it cleanly (child stopped, sandbox removed, segment unlinked, record removed).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from engine_fixtures.isolation import owner, run_registry
from engine_fixtures.isolation.cgroups import CpuQuota, configure_parent
from engine_fixtures.isolation.process import LaunchSpec, Supervised, curated_env
from engine_fixtures.store.files import atomic_writer

CHILD = """
import mmap, os, secrets, signal, sys, threading
name = "sgl_shm_" + secrets.token_hex(6)
fd = os.open("/dev/shm/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
os.posix_fallocate(fd, 0, 1 << 20)
mem = mmap.mmap(fd, 1 << 20)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(name)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
try:
    threading.Event().wait()  # like an engine: runs on when its parent dies, until it is signalled
finally:
    os.unlink("/dev/shm/" + name)
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="holder_run")
    p.add_argument("--results", type=Path, required=True)
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--ready", type=Path, required=True)
    p.add_argument("--quota", type=float, default=None)
    p.add_argument("--cgroup-parent", type=Path, default=None)
    a = p.parse_args(argv)
    me = owner.claim()
    configure_parent(a.cgroup_parent)
    record, _why = run_registry.register(a.state, a.results)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    named = a.ready.with_name(a.ready.name + ".segment")
    spec = LaunchSpec((sys.executable, "-c", CHILD, str(named)), a.results / "holder-child.log", curated_env(),
                      name="holder child")
    try:
        with CpuQuota(a.quota, name="holder") as quota, Supervised.start(spec, quota) as child:
            child.wait_ready(named.exists, 60.0, interval_s=0.05)
            segment = named.read_text()
            try:
                with atomic_writer(a.results / "results-holder.json") as fh:
                    fh.write('{"half": ')
                    fh.flush()
                    mine = f".results-holder.json.{me.token}."
                    tmp = next(f.name for f in a.results.iterdir() if f.name.startswith(mine))
                    a.ready.write_text(json.dumps({
                        "token": me.token, "pid": me.pid, "child": child.pid, "cgroups": [str(x) for x in quota.paths],
                        "segment": segment, "temp": tmp, "record": str(record)}))
                    stop.wait()
                    raise InterruptedError  # a clean stop abandons the half-written file (the writer removes it)
            except InterruptedError:
                pass
    finally:
        run_registry.unregister(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
