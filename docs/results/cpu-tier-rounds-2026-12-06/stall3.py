import time, sys
sys.path.insert(0,'/work/main')
from contextlib import ExitStack
import psutil
from engine_fixtures.cpu_tier.arms import CpuTierArm
from engine_fixtures.cpu_tier.rig import Rig
from engine_fixtures.isolation import owner
copy=sys.argv[1]
arm=CpuTierArm(copy=copy, threads="cpus", quota=0.5, resolution=1024, concurrency=4)
def cpu(ps):
    s=0
    for p in ps:
        try:
            t=p.cpu_times(); s+=t.user+t.system
            s+=sum(c.cpu_times().user+c.cpu_times().system for c in p.children(recursive=True))
        except psutil.Error: pass
    return s
with owner.temp_dir("mech") as tmp, ExitStack() as st:
    r=Rig.start(arm, st, tmp, 0, "stall")
    ps=[psutil.Process(r.producer.pid), psutil.Process(r.consumer.pid)]
    for i in range(4):
        m=r.window(48)
        c0=cpu(ps); t0=time.monotonic()
        marks=[]
        for k in range(6):
            time.sleep(1.0); marks.append('%.2f'%(cpu(ps)-c0))
        print(i, '%.1f rps'%m['requests_per_s'], 'idle cpu-s after window, cumulative per s:', marks, 'threads', [p.num_threads() for p in ps], flush=True)
