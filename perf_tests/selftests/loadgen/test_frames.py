"""The parent's reader of a child's framed answers keeps what it read past a frame.

The session's load client answers every order (``B``: build a workload's bodies; ``S``: a segment) with one frame.
Orders sent while an engine starts are answered before the parent reads, so one ``os.read`` returns several
answers at once; a reader that dropped the bytes past the first frame waited for answers already read (the seed
matrix's rows, six workloads prepared at once: 120 s, then the session's client was stopped, H200 2026-12-02).
"""

from __future__ import annotations

import os
import pickle
import time

from engine_fixtures.loadgen.child import frame
from engine_fixtures.loadgen.runner import FrameReader


class _Count:
    value = 0


def test_answers_written_together_are_each_read() -> None:
    r, w = os.pipe()
    try:
        counter = _Count()
        os.write(w, frame(b"R", pickle.dumps(1)) + frame(b"P", count=7)
                 + frame(b"R", pickle.dumps(2)) + frame(b"E", pickle.dumps(("boom", ""))))
        reader = FrameReader(r)
        got = [reader.read(counter, time.monotonic() + 5.0) for _ in range(3)]
        assert [(k, pickle.loads(p)) for k, p in got] == [(b"R", 1), (b"R", 2), (b"E", ("boom", ""))]
        assert counter.value == 7  # a progress frame between two answers is read, not returned
        assert reader.read(counter, time.monotonic() + 0.05) == (None, b"")  # nothing left: a timeout
        os.close(w)
        w = -1
        assert reader.read(counter, time.monotonic() + 5.0) == (b"", b"")  # end of the pipe
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
