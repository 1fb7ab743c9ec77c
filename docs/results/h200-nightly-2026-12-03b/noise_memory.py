"""How long the host's noise remembers: per-window residuals (log value minus its arm's mean) of one live group,
correlated by the time between windows.

    python noise_memory.py RESULTS.json METRIC
"""
import json,glob,sys
import numpy as np
from collections import defaultdict
key=sys.argv[2]
d=json.load(open(sys.argv[1]))
rows=[]
for r in d['results']:
    m=r['metadata']; s=r['samples']
    if 'window_visit' not in m: continue
    arm=r['arm'].get('live_arm')
    for (v,w),val,req in zip(m['window_visit'],s[key],m['requests']):
        rows.append((req['origin_s']+req['t0_s'],arm,np.log(val)))
rows.sort()
t=np.array([x[0] for x in rows]); arms=[x[1] for x in rows]; y=np.array([x[2] for x in rows])
mu=defaultdict(list)
for a,v in zip(arms,y): mu[a].append(v)
res=np.array([v-np.mean(mu[a]) for a,v in zip(arms,y)])
print("resid sd %.1f%%, n=%d"%(100*res.std(),len(res)))
# correlation by time lag bins
bins=[(0,4),(4,8),(8,15),(15,25),(25,40),(40,70),(70,120),(120,400)]
for lo,hi in bins:
    a=[];b=[]
    for i in range(len(t)):
        for j in range(i+1,len(t)):
            if lo<=t[j]-t[i]<hi: a.append(res[i]); b.append(res[j])
    if len(a)>3:
        dd=np.array(a)-np.array(b)
        print(f"lag {lo:3d}-{hi:3d}s n={len(a):4d} corr={np.corrcoef(a,b)[0,1]:+.2f} sd(diff)/sqrt2={100*dd.std()/np.sqrt(2):.1f}%")
