"""Variance components of an A/B's pair unit, per arm: what separates engines of one build (the offset), what every
engine shared in a block, and each engine's block mean's own noise (ab_rejudge.components, engines nested in their
build, method of moments), then the offsets' share of a pair unit over 2 and 4 blocks. Each arm of an A/B that
serves several arms (test_build_ab_cpu) is read on its own, its members renamed to the one-arm form.

    PYTHONPATH=<repo> python analysis/components_arms.py RESULTS.json...   (the gunzipped results files)
"""

import math
import sys
from pathlib import Path

from engine_fixtures.store.results import ResultsFile
from tools.studies import ab_rejudge

METRICS = ("requests_per_s", "ttft_p50_ms", "tpot_gmean_ms")


def arm_windows(path: Path) -> dict[str, dict[str, list]]:
    """Per arm, its windows per member (``reference@1``...) as ``ab_rejudge.components`` reads them."""
    out: dict[str, dict[str, list]] = {}
    for r in ResultsFile.load(path).results:
        m = r.metadata
        side, _, arm = str(m.get("group_member", "")).partition(".")
        if side not in ("reference", "candidate") or not arm:
            continue
        for member, (block, values) in zip(m["window_replica"], r.block_windows(), strict=True):
            out.setdefault(arm, {}).setdefault(member.replace(f".{arm}", ""), []).append((block, values))
    return out


for p in sys.argv[1:]:
    print(f"## {Path(p).name}")
    for arm, windows in sorted(arm_windows(Path(p)).items()):
        blocks = len({b for w in windows.values() for b, _ in w})
        tp = {m: [v["tpot_gmean_ms"] for _, v in w if "tpot_gmean_ms" in v] for m, w in windows.items()}
        levels = {m: math.exp(sum(map(math.log, v)) / len(v)) for m, v in tp.items()}
        print(f"{arm} ({blocks} blocks; TPOT gmean per engine: "
              + ", ".join(f"{m} {v:.3f} ms" for m, v in sorted(levels.items())) + ")")
        for name in METRICS:
            c = ab_rejudge.components(windows, name)
            if not c:
                print(f"  {name}: too few windows")
                continue
            off, blk, res = c["offset"], c["block"], c["residual"]
            shares = []
            for b in (2, 4):
                pair = math.sqrt(2 * off**2 + 2 * res**2 / b)
                shares.append(f"over {b} blocks pair unit {pair:.2%}, offsets' share {2 * off**2 / pair**2:.0%}")
            print(f"  {name}: offset {off:.2%}, block {blk:.2%}, residual {res:.2%}; " + "; ".join(shares))
