import time, sys, json
sys.path.insert(0,'/work/main')
from contextlib import ExitStack
from engine_fixtures.cpu_tier.arms import CpuTierArm
from engine_fixtures.cpu_tier.rig import Rig
from engine_fixtures.isolation import owner
import psutil
copy=sys.argv[1]; quota=None if sys.argv[2]=='none' else float(sys.argv[2]); n=int(sys.argv[3])
arm=CpuTierArm(copy=copy, threads="cpus", quota=quota, resolution=1024, concurrency=4)
with owner.temp_dir("mech") as tmp, ExitStack() as st:
    rig=Rig.start(arm, st, tmp, 0, "stall")
    for i in range(n):
        t=time.monotonic(); ct=psutil.cpu_times()
        m=rig.window(48)
        ct2=psutil.cpu_times(); d=time.monotonic()-t
        print('%2d rps %5.1f wall %.2f p50 %4.0f p99 %4.0f prodcores %.2f thr %.2f  box user %.2f sys %.2f iowait %.2f steal %.2f' % (i, m['requests_per_s'], d, m['latency_p50_ms'], m['latency_p99_ms'], m['producer_cpu_cores'], m.get('throttled_ratio',0), (ct2.user-ct.user)/d, (ct2.system-ct.system)/d, (ct2.iowait-ct.iowait)/d, (ct2.steal-ct.steal)/d), flush=True)
