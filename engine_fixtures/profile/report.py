"""The session's differential profiles: what the failure message, summary.md and the HTML report show.

``ProfileBook`` (``PerfSession.profiles``) collects ``Entry``s: a differential (``diffs``) under the keys it
explains (scenario ids of arms, invariant labels), with a title and the one-line notes of what could not be
profiled. ``failure_text(keys)`` is the top 3 per role for a failing test's message; ``markdown()`` the top 10 per
role; ``figures()`` one differential icicle per entry. A runner adds entries with ``add``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine_fixtures.profile import render
from engine_fixtures.profile.diff import RoleDiff

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Entry:
    keys: tuple[str, ...]
    title: str
    diffs: tuple[RoleDiff, ...]
    notes: tuple[str, ...] = ()


class ProfileBook:
    """Entries of one session (mutable collector, like ``PerfSession``; entries are frozen)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.notes: list[str] = []  # run-level lines, e.g. "profiling off" or a refusal

    def add(self, keys: Iterable[str], title: str, diffs: Sequence[RoleDiff], notes: Iterable[str] = ()) -> Entry:
        entry = Entry(tuple(keys), title, tuple(diffs), tuple(notes))
        self.entries.append(entry)
        for note in entry.notes:
            if note not in self.notes:
                self.notes.append(note)
        return entry

    def for_keys(self, keys: Iterable[str]) -> list[Entry]:
        want = set(keys)
        return [e for e in self.entries if want & set(e.keys)]

    def failure_text(self, keys: Iterable[str]) -> str:
        """The top 3 growers per role of every entry explaining ``keys`` ('' when none)."""
        parts = []
        for e in self.for_keys(keys):
            body = render.top_text(e.diffs, 3) if e.diffs else ""
            parts.append("\n".join(x for x in (f"where the time went ({e.title}):", body, *e.notes) if x))
        return "\n".join(parts)

    def markdown(self) -> list[str]:
        lines: list[str] = []
        for e in self.entries:
            lines += render.markdown(e.diffs, e.title) if e.diffs else [f"### Differential profile: {e.title}", ""]
            lines += [f"- {n}" for n in e.notes]
            lines.append("")
        if not self.entries:
            lines += [f"- profile: {n}" for n in self.notes]
        return lines

    def figures(self) -> list[tuple[str, Figure]]:
        from engine_fixtures.profile.figure import figure  # matplotlib only when there is a report

        out = []
        for e in self.entries:
            fig = figure(e.diffs, e.title)
            if fig is not None:
                out.append((f"differential profile: {e.title}", fig))
        return out
