"""Per live arm of a results file: the order each block served, the cgroup's throttled share of CFS periods, the
engine's CPU cores and the window-to-window spread of TTFT p50 and req/s (windows as the unit; report-only figures).

    python arms.py RESULTS.json [...]
"""
import json
import statistics
import sys

for path in sys.argv[1:]:
    data = json.load(open(path))
    first = data["results"][0]["metadata"]
    orders = [" ".join(o) for o in first["block_order"]]
    print(f"{path}: blocks served as " + "; ".join(f"{orders.count(o)} x [{o}]" for o in dict.fromkeys(orders)))
    print("| arm | windows | throttled share of periods (mean, max) | CPU cores | TTFT p50 ms (window sd) | req/s (window sd) |")
    print("|---|---|---|---|---|---|")
    for r in data["results"]:
        s = r["samples"]

        def show(key: str) -> str:
            v = s.get(key)
            if not v:
                return "-"
            mean = statistics.mean(v)
            return f"{mean:.3g} ({100 * statistics.pstdev(v) / mean:.0f} %)"

        t = s.get("throttled_ratio")
        throttled = f"{statistics.mean(t):.3f}, {max(t):.3f}" if t else "no quota"
        cores = statistics.mean(s["cpu_cores.total"])
        print(f"| {r['metadata']['live_arm']} | {len(s['requests_per_s'])} | {throttled} | {cores:.2f} | "
              f"{show('ttft_p50_ms')} | {show('requests_per_s')} |")
