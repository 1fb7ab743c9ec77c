"""Resample the CPU tier smoke's measured rounds: how often both contrasts (buffer >= torch, stock SGLang >= buffer)
are decided, and after how many rounds, under the mean (t) or the 20 % trimmed mean (Yuen) and several budgets.

    python docs/results/cpu-tier-rounds-2026-12-06/resample.py

rounds.json: requests/s per arm per round of four fresh-clone CI runs (2-core Intel box, 2026-12-06, 10 rounds each)."""

import json
import math
from pathlib import Path

import numpy as np
from scipy import stats
from scipy.stats import mstats

runs = json.loads((Path(__file__).parent / "rounds.json").read_text())
rows = np.array([(math.log(b / t), math.log(b / s)) for arms in runs.values()
                 for t, b, s in zip(arms["copy=torch"], arms["copy=buffer"], arms["copy=sglang"])])


def decided(r: np.ndarray, alpha: float, trim: bool) -> bool:
    n = r.size
    if trim:
        m, se, df = stats.trim_mean(r, 0.2), float(mstats.trimmed_stde(r, (0.2, 0.2))), n - 2 * int(0.2 * n) - 1
    else:
        m, se, df = r.mean(), r.std(ddof=1) / math.sqrt(n), n - 1
    half = stats.t.ppf(1 - alpha, df) * se
    return m - half > 0 or m + half < 0


rng = np.random.default_rng(3)
for shift in (0.0, math.log(1.2 / 1.1)):  # as measured; both gaps moved to 1.10x
    data = rows - shift
    for trim in (False, True):
        for budget in ((5, 5, 15), (5, 5, 20), (5, 5, 25)):
            first, step, most = budget
            looks = list(range(first, most + 1, step))
            used, open_ = [], 0
            for _ in range(3000):
                r = data[rng.integers(0, len(data), most)]
                n = next((n for n in looks if all(decided(r[:n, k], 0.01 / len(looks), trim) for k in (0, 1))), None)
                used.append(n or most)
                open_ += n is None
            print(f"gaps {'as measured' if shift == 0 else '1.10x'}, {'trimmed' if trim else 'mean   '}, budget "
                  f"{budget}: {np.mean(used):.2f} rounds on average, undecided {100 * open_ / 3000:.1f} %")
