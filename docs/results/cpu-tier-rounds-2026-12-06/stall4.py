import time, sys, os
sys.path.insert(0,'/work/main')
from contextlib import ExitStack
import psutil
from engine_fixtures.cpu_tier.arms import CpuTierArm
from engine_fixtures.cpu_tier.rig import Rig
from engine_fixtures.isolation import owner
copies=sys.argv[1].split(','); n=int(sys.argv[2])
arms=[CpuTierArm(copy=c, threads="cpus", quota=0.5, resolution=1024, concurrency=4) for c in copies]
def snap():
    d={}
    for p in psutil.process_iter(['pid','name','cpu_times']):
        try: t=p.info['cpu_times']; d[(p.info['pid'],p.info['name'])]=t.user+t.system
        except Exception: pass
    return d
with owner.temp_dir("mech") as tmp, ExitStack() as st:
    rigs=[Rig.start(a, st, tmp, i, "stall") for i,a in enumerate(arms)]
    names={}
    for i,r in enumerate(rigs): names[r.producer.pid]=f'prod-{arms[i].copy}'; names[r.consumer.pid]=f'cons-{arms[i].copy}'
    for i in range(n):
        for j,r in enumerate(rigs):
            s0=snap(); c0=psutil.cpu_times(); t0=time.monotonic()
            m=r.window(48)
            dt=time.monotonic()-t0; s1=snap(); c1=psutil.cpu_times()
            top=sorted(((s1[k]-s0.get(k,s1[k]),k) for k in s1),reverse=True)[:5]
            print('%2d %-7s %5.1f rps | sys %.2f usr %.2f soft %.2f | '%(i,arms[j].copy,m['requests_per_s'],(c1.system-c0.system)/dt,(c1.user-c0.user)/dt,(c1.softirq-c0.softirq)/dt) + ' '.join('%s:%.2f'%(names.get(k[0],k[1][:12]),v/dt) for v,k in top if v>0.02), flush=True)
