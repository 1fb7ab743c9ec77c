"""The differential icicle: one panel per role, callers above callees, colour = change of CPU per request.

Each box is a function on a call path (root at the top). Its width is the mean of its candidate and reference
CPU-s per request (so a function that vanished still shows at half its old width, and children never overflow
their parent), its colour the change of its total time: red grew, blue shrank, grey within 2 % of the role,
saturated at the role's largest change; a box wide enough is labelled with the function and its change in ms.
Frames (almost) every sample shares (the interpreter's ``<module>``, ``main``, the event loop) are folded into the
panel's title, so the rows start where the paths differ. Matplotlib ``Figure`` with the Agg canvas only.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

from matplotlib import colormaps
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from engine_fixtures.profile.diff import RoleDiff
from engine_fixtures.profile.model import FuncKey, Profile

MAX_DEPTH = 9
FOLD = 0.85  # descend past a frame whose one child holds this much of it


@dataclass
class _Node:
    key: FuncKey | None
    c: float = 0.0
    r: float = 0.0
    kids: dict[FuncKey, _Node] = field(default_factory=dict)


def _add(root: _Node, p: Profile, side: str) -> None:
    for stack, n in p.stacks.items():
        s = p.cpu_s(n)
        node = root
        setattr(node, side, getattr(node, side) + s)
        for frame in stack:
            node = node.kids.setdefault(frame.key, _Node(frame.key))
            setattr(node, side, getattr(node, side) + s)


def tree(d: RoleDiff) -> tuple[_Node, list[str]]:
    """The merged call tree, descended past the frames (almost) every sample shares; their names."""
    root = _Node(None)
    _add(root, d.candidate, "c")
    _add(root, d.reference, "r")
    folded: list[str] = []
    while len(root.kids) >= 1:
        big = max(root.kids.values(), key=lambda k: k.c + k.r)
        if big.c + big.r < FOLD * (root.c + root.r) or not big.kids:
            break
        folded.append(big.key[0] if big.key else "?")
        root = big
    return root, folded


def _draw(ax, root: _Node, scale: float, norm: TwoSlopeNorm) -> int:  # type: ignore[no-untyped-def]
    """Draw the boxes below ``root``; the number of rows drawn."""
    cmap = colormaps["coolwarm"]
    todo = [(root, 0.0, 0)]
    rows = 0
    while todo:
        node, x0, depth = todo.pop()
        x = x0
        for kid in sorted(node.kids.values(), key=lambda k: -(k.c + k.r)):
            w = (kid.c + kid.r) / 2
            if w <= 0:
                continue
            change = kid.c - kid.r
            colour = cmap(norm(change)) if abs(change) > 0.02 * scale else (0.82, 0.82, 0.82, 1.0)
            ax.barh(-depth, w, left=x, height=0.92, color=colour, edgecolor="white", linewidth=0.5)
            rows = max(rows, depth + 1)
            room = int(w / scale * 150)  # characters that fit at fontsize 6 across an 11-inch panel
            if room >= 6:
                name = kid.key[0] if kid.key else "?"
                label = f"{name} {change * 1000:+.1f}" if abs(change) > 0.02 * scale else name
                label = label if len(label) <= room else label[: room - 1] + "…"
                ax.text(x + w / 2, -depth, label, ha="center", va="center", fontsize=6, clip_on=True)
            if depth + 1 < MAX_DEPTH:
                todo.append((kid, x, depth + 1))
            x += w
    return rows


def figure(diffs: Sequence[RoleDiff], title: str) -> Figure | None:
    """The icicle of every role with samples on both sides, or None when there is none."""
    have = [d for d in diffs if not d.empty]
    if not have:
        return None
    fig = Figure(figsize=(11, 2.6 * len(have) + 0.6))
    fig.suptitle(textwrap.fill(title, 150), fontsize=8)
    axes = fig.subplots(len(have), 1, squeeze=False)[:, 0]
    for ax, d in zip(axes, have, strict=True):
        root, folded = tree(d)
        scale = (root.c + root.r) / 2 or 1.0
        biggest = max((abs(f.candidate_total_s - f.reference_total_s) for f in d.functions), default=0.0) or 1.0
        norm = TwoSlopeNorm(0.0, -biggest, biggest)
        rows = _draw(ax, root, scale, norm)
        ax.set_xlim(0, scale)
        ax.set_ylim(-max(rows, 3) + 0.5, 0.6)
        ax.set_yticks([])
        ax.set_xlabel("Python CPU ms per request (width: mean of candidate and reference; red grew, blue shrank; "
                      "labels: change in ms)", fontsize=7)
        ax.xaxis.set_major_formatter(lambda v, _pos: f"{v * 1000:.0f}")
        top = d.growers(1)
        lead = (f"; top grower {top[0].frame.function} ({top[0].frame.where}) {top[0].change_s * 1000:+.1f} ms, "
                f"{top[0].share:.0%} of the growth") if top else ""
        via = f"; below {' > '.join(folded[-2:])}" if folded else ""
        ax.set_title(f"{d.role}: net {d.change_s * 1000:+.1f} ms/req ({d.reference_s * 1000:.1f} -> "
                     f"{d.candidate_s * 1000:.1f}){lead}{via}", fontsize=7, loc="left")
    fig.tight_layout()
    return fig
