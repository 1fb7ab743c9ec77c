"""Does a visit's first window read like its second? Per live arm, over every visit with two windows: the mean
log ratio window 1 / window 2 of req/s, TTFT p50 and TPOT gmean, with its standard error (visits as the unit).

    python first_window.py RESULTS.json [...]
"""
import json
import math
import sys
from collections import defaultdict

import numpy as np

KEYS = ("requests_per_s", "ttft_p50_ms", "tpot_gmean_ms")
print("| run | arm | visits | " + " | ".join(f"{k}: w1/w2 (se)" for k in KEYS) + " |")
print("|---|---|---|" + "---|" * len(KEYS))
for path in sys.argv[1:]:
    data = json.load(open(path))
    for r in data["results"]:
        meta = r["metadata"]
        if "window_visit" not in meta:
            continue
        by_visit = defaultdict(dict)
        for i, (v, w) in enumerate(meta["window_visit"]):
            by_visit[v][w] = i
        pairs = [(d[0], d[1]) for d in by_visit.values() if 0 in d and 1 in d]
        cells = []
        for k in KEYS:
            x = r["samples"][k]
            lr = np.array([math.log(x[a] / x[b]) for a, b in pairs])
            se = lr.std(ddof=1) / math.sqrt(len(lr)) if len(lr) > 1 else math.nan
            cells.append(f"{math.exp(lr.mean()):.3f} ({100 * se:.1f} %)" if len(lr) else "-")
        print(f"| {path.split('/')[-2]} | {meta.get('live_arm')} | {len(pairs)} | "
              + " | ".join(cells) + " |")
