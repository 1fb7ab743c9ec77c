"""``Timeline``: where one arm's wall time went, span by span (engine start, warmup, windows, drains, judging).

Each span has a kind (``KINDS``), a label, its instance (the engine that served it) and its start and end in
``time.monotonic()`` seconds. ``summary()`` is what the results JSON and the report show: the arm's wall time,
the engine starts inside it, the measured load, and ``measured_share_after_ready`` = measured load over the wall
time outside engine starts (the issue's goal: >= 70 %). Gaps (time in no span: judging, proof reads, the
client's first body build) are the rest.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

KINDS = ("engine", "warmup", "window", "drain", "stop", "quota", "switch", "stage", "profile")


@dataclass(frozen=True)
class Span:
    kind: str
    label: str
    t0: float
    t1: float
    instance: str = ""

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0


@dataclass
class Timeline:
    origin: float = field(default_factory=time.monotonic)
    spans: list[Span] = field(default_factory=list)
    end: float | None = None

    def add(self, kind: str, label: str, t0: float, t1: float, instance: str = "") -> None:
        if kind not in KINDS:
            raise ValueError(f"timeline span kind {kind!r}: use one of {', '.join(KINDS)}")
        self.spans.append(Span(kind, label, t0, t1, instance))

    @contextlib.contextmanager
    def span(self, kind: str, label: str, instance: str = "") -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.add(kind, label, t0, time.monotonic(), instance)

    def close(self) -> None:
        self.end = time.monotonic()

    def total(self, kind: str) -> float:
        return sum(s.seconds for s in self.spans if s.kind == kind)

    def summary(self) -> dict[str, float]:
        wall = (self.end if self.end is not None else time.monotonic()) - self.origin
        by_kind = {k: self.total(k) for k in KINDS}
        after_ready = wall - by_kind["engine"] - by_kind["stop"]
        out = {"wall_s": wall, **{f"{k}_s": v for k, v in by_kind.items()},
               "other_s": max(0.0, wall - sum(by_kind.values())),
               "measured_share_after_ready": by_kind["window"] / after_ready if after_ready > 0 else 0.0}
        return {k: round(v, 3) for k, v in out.items()}

    def to_json(self) -> dict:
        return {"summary": self.summary(),
                "spans": [{"kind": s.kind, "label": s.label, "instance": s.instance,
                           "t0": round(s.t0 - self.origin, 3), "t1": round(s.t1 - self.origin, 3)}
                          for s in self.spans]}

    def describe(self) -> str:
        s = self.summary()
        return (f"wall {s['wall_s']:.1f} s: engine starts {s['engine_s']:.1f} s, stops {s['stop_s']:.1f} s, "
                f"warmup {s['warmup_s']:.1f} s, measured {s['window_s']:.1f} s, drains {s['drain_s']:.1f} s, "
                f"other {s['other_s']:.1f} s; measured {s['measured_share_after_ready']:.0%} of the time after the "
                "engines were ready")
