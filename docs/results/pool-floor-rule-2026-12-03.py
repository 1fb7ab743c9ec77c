import math, numpy as np
import engine_fixtures.judge.simulate as S
from engine_fixtures.judge.sequential import Budget
orig = S.history_decisions
def new(pools, current, sign, floor, alpha=S.ALPHA, beta=S.BETA, max_detect=None):
    st = orig(pools, current, sign, floor, alpha, beta, max_detect)
    effect = sign * (current.mean(axis=1) - pools.level)
    return np.where((st == 0) & (effect > floor), 3, st)
GATE = Budget(5,5,15)
for k, g, b, w in [(3,6,0.08,0.05),(5,6,0.08,0.05),(5,10,0.08,0.05),(5,4,0.03,0.05),(5,4,0.01,0.02)]:
    S.history_decisions = orig
    r0 = S.whole_run_red_rate(np.random.default_rng([k,g]), 20000, k, GATE, g, b, w)
    S.history_decisions = new
    r1 = S.whole_run_red_rate(np.random.default_rng([k,g]), 20000, k, GATE, g, b, w)
    print(k,g,b,w,"before",r0,"after",r1)
