"""The pooled components table of ../README.md: ab_rejudge.components over the four A/Bs of this lease, mean squares.

    PYTHONPATH=<repo> python analysis/components_pooled.py */results-*.json
"""

import math
import sys
from pathlib import Path

from tools.studies import ab_rejudge

runs = [ab_rejudge.load(Path(p))[1] for p in sys.argv[1:]]
for name in ("requests_per_s", "ttft_p50_ms", "tpot_gmean_ms"):
    cs = [ab_rejudge.components(w, name) for w in runs]
    off, blk, res = (math.sqrt(sum(c[k] ** 2 for c in cs) / len(cs)) for k in ("offset", "block", "residual"))
    for b in (4, 8):
        pair = math.sqrt(2 * off**2 + 2 * res**2 / b)
        print(f"{name} over {b} blocks: offset {off:.2%}, block {blk:.2%}, residual {res:.2%}; pair unit {pair:.2%}, "
              f"offsets' share {2 * off**2 / pair**2:.0%}")
