"""Differential profiles as text: the top 3 for a failure message, the top 10 per role for summary.md.

Each line names a function with its file and hottest line, its self CPU per request on both sides, the change
and its share of the role's growth, and the caller it was reached from, e.g.::

    producer: +56.22 ms/request of Python CPU (candidate 113.00 over 80 requests vs reference 56.78 over 152; ...)
      1. _copy_torch (engine_fixtures/transport/shm.py:65)  +38.25 ms/req (0.00 -> 38.25), 68% of the growth
         <- ShmTensor.create (engine_fixtures/transport/shm.py:138)

``share``: of the role's gross growth (``diff``).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine_fixtures.profile.diff import FunctionDiff, RoleDiff


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def role_line(d: RoleDiff, title: str = "") -> str:
    c, r = d.candidate, d.reference
    head = f"{title + ' ' if title else ''}{d.role}"
    if d.empty:
        why = c.note or r.note or f"no samples ({c.samples} candidate, {r.samples} reference)"
        return f"{head}: no differential profile: {why}"
    return (f"{head}: {d.change_s * 1000:+.2f} ms/request of Python CPU (candidate {_ms(d.candidate_s)} over "
            f"{c.requests} requests vs reference {_ms(d.reference_s)} over {r.requests}; py-spy {c.rate_hz:g} Hz, "
            f"{c.samples}/{r.samples} samples)")


def function_line(i: int, f: FunctionDiff) -> str:
    caller = f"  <- {f.caller.function} ({f.caller.where})" if f.caller is not None else ""
    noise = "" if f.significant else "  (within sampling noise)"
    return (f"  {i}. {f.frame}  {f.change_s * 1000:+.2f} ms/req ({_ms(f.reference_s)} -> {_ms(f.candidate_s)}), "
            f"{f.share:.0%} of the growth{caller}{noise}")


def top_text(diffs: Sequence[RoleDiff], n: int = 3, title: str = "") -> str:
    """The roles' top ``n`` growers, one line each (roles that grew most first)."""
    lines: list[str] = []
    for d in sorted(diffs, key=lambda d: -d.change_s):
        lines.append(role_line(d, title))
        if not d.empty:
            grown = d.growers(n)
            lines += [function_line(i, f) for i, f in enumerate(grown, 1)] or ["  (no function grew)"]
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(diffs: Sequence[RoleDiff], title: str, n: int = 10) -> list[str]:
    """summary.md lines: per role its change and a table of the top ``n`` growers."""
    lines = [f"### Differential profile: {_md(title)}", ""]
    for d in diffs:
        lines.append(f"- {_md(role_line(d))}")
        if d.empty:
            continue
        lines += ["", "| # | function | file:line | reference ms/req | candidate ms/req | change | share of growth "
                  "| called from |", "|---|---|---|---|---|---|---|---|"]
        for i, f in enumerate(d.growers(n), 1):
            caller = f"`{_md(f.caller.function)}` ({_md(f.caller.where)})" if f.caller else ""
            sig = "" if f.significant else " (noise)"
            lines.append(f"| {i} | `{_md(f.frame.function)}` | {_md(f.frame.where)} | {_ms(f.reference_s)} | "
                         f"{_ms(f.candidate_s)} | {f.change_s * 1000:+.2f}{sig} | {f.share:.0%} | {caller} |")
        lines.append("")
    return lines
