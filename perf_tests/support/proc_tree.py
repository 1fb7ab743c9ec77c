"""A process tree shaped like SGLang's, for the harness's own tests (not a fake engine: no serving).

The root keeps its command line (like SGLang's untitled HTTP server), starts spawn-method children
titled with ``setproctitle`` (e.g. ``sglang::scheduler_TP0``), which also starts multiprocessing's
resource tracker, writes ``--ready-file`` once every child is up, then waits to be signalled.

    python proc_tree.py --title sglang::scheduler_TP0 --title sglang::detokenizer --ready-file F
        [--ignore-term] [--setsid]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import threading
from pathlib import Path


def child(title: str, started: mp.synchronize.Event, ignore_term: bool, setsid: bool) -> None:
    import setproctitle

    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if setsid:
        os.setsid()  # leaves the root's session and process group, like a daemonised helper
    setproctitle.setproctitle(title)
    started.set()
    threading.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--title", action="append", default=[])
    ap.add_argument("--ready-file", type=Path, required=True)
    ap.add_argument("--ignore-term", action="store_true")
    ap.add_argument("--setsid", action="store_true")
    args = ap.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ctx = mp.get_context("spawn")
    procs = []
    for title in args.title:
        started = ctx.Event()
        p = ctx.Process(target=child, args=(title, started, args.ignore_term, args.setsid), daemon=False)
        p.start()
        if not started.wait(timeout=60):
            raise SystemExit(f"child {title!r} did not start within 60 s")
        procs.append(p)
    args.ready_file.write_text(" ".join(str(p.pid) for p in procs))
    threading.Event().wait()


if __name__ == "__main__":
    main()
