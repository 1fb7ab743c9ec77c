"""Each engine's level in a null A/B: the geometric mean of its windows, per metric.

    PYTHONPATH=<repo> python analysis/engines.py RESULTS.json...   (the gunzipped results files)
"""
import sys, math
from pathlib import Path
import numpy as np
from tools.studies import ab_rejudge
for p in sys.argv[1:]:
    _, windows, _, _ = ab_rejudge.load(Path(p))
    print(Path(p).name)
    for name in ("tpot_gmean_ms", "requests_per_s", "ttft_p50_ms"):
        row = []
        for m in sorted(windows):
            v = [w[name] for _, w in windows[m] if name in w]
            row.append(f"{m}: {math.exp(np.mean(np.log(v))):.4g}")
        print(f"  {name}: " + ", ".join(row))
