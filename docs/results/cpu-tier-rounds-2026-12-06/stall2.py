import time, sys
sys.path.insert(0,'/work/main')
from contextlib import ExitStack
from engine_fixtures.cpu_tier.arms import CpuTierArm
from engine_fixtures.cpu_tier.rig import Rig
from engine_fixtures.isolation import owner
copies=sys.argv[1].split(','); n=int(sys.argv[2]); idle=float(sys.argv[3]) if len(sys.argv)>3 else 0
arms=[CpuTierArm(copy=c, threads="cpus", quota=0.5, resolution=1024, concurrency=4) for c in copies]
with owner.temp_dir("mech") as tmp, ExitStack() as st:
    rigs=[Rig.start(a, st, tmp, i, "stall") for i,a in enumerate(arms)]
    for i in range(n):
        line=[]
        for r in rigs:
            m=r.window(48); line.append('%5.1f'%m['requests_per_s'])
        print('%2d'%i, ' '.join(line), flush=True)
