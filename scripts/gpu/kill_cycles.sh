#!/usr/bin/env bash
# Issue 15's real-engine check for a GPU runner: N times, start a pytest run whose engine (through the `engine`
# fixture) runs under a CPU quota, SIGKILL that run once the engine serves (a cancelled job), and start the next;
# every next run must print its sweep line, and the machine must end clean: no engine process, no perf-*
# cgroup, no SGLang /dev/shm segment of ours, no run record.
#   bash scripts/gpu/kill_cycles.sh [N] [pytest/--perf-* options...]
# ENGINE=stub runs the same cycles against the stub engine on a CPU box (how it was exercised so far: the H200
# had no device time left). On the H200 pass --perf-cgroup-parent /sys/fs/cgroup (its leaf has no cpu).
# Writes $OUT (default .perf-gpu/kill-cycles under the repository root): run<i>.log, final.log, summary.txt. Exit 0 iff all checks hold.
set -uo pipefail
N=${1:-10}; shift || true
OUT=${OUT:-$(pwd)/.perf-gpu/kill-cycles}; mkdir -p "$OUT"
WORK=$(mktemp -d -t perf-kill-XXXXXX); STATE=$WORK/state; RESULTS=$WORK/results
QUOTA=${QUOTA:-$([ "${ENGINE:-sglang}" = stub ] && echo 0.5 || echo 4)}
if [ "${ENGINE:-sglang}" = stub ]; then
  PARAM="{'launcher': ('-m', 'perf_tests.support.stub_engine'), 'name': 'stub', 'proof': False, 'cpu_quota': $QUOTA, 'extra_args': ('--stub-shm-mb', '1')}"
else
  PARAM="{'cpu_quota': $QUOTA}"
fi
cat > "$WORK/test_hold.py" <<EOF
import os, threading
from pathlib import Path
import pytest

@pytest.mark.parametrize("engine", [$PARAM], indirect=True)
def test_hold_until_killed(engine):
    Path(os.environ["KILL_READY"]).write_text(f"{engine.pid} {engine.quota.path if engine.quota else '-'}")
    threading.Event().wait()  # the job is cancelled here
EOF
echo "def test_after():" > "$WORK/test_after.py"; echo "    pass" >> "$WORK/test_after.py"
ARGS=(-p no:cacheprovider --perf-state-dir "$STATE" --perf-results-dir "$RESULTS" --perf-engine-timeout 900 "$@")
FAIL=0; : > "$OUT/summary.txt"; ENGINES=""
cgroups() { find /sys/fs/cgroup -maxdepth 5 -type d -name 'perf-*' 2>/dev/null | sort; }
segments() { ls /dev/shm | grep -E '^sgl_shm_' | sort; }
cgroups > "$WORK/cg.before"; segments > "$WORK/shm.before"
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
for i in $(seq 1 "$N"); do
  READY=$WORK/ready$i; rm -f "$READY"
  KILL_READY=$READY python3 -m pytest "$WORK/test_hold.py" "${ARGS[@]}" > "$OUT/run$i.log" 2>&1 &
  RUN=$!
  T0=$(date +%s)
  while [ ! -s "$READY" ]; do   # wait for the engine to serve (deadline 900 s), or for the run to fail
    if ! kill -0 "$RUN" 2>/dev/null || [ $(( $(date +%s) - T0 )) -gt 900 ]; then
      say "cycle $i: the run ended or timed out before its engine served; see $OUT/run$i.log"; FAIL=1; break 2
    fi
    sleep 1
  done
  read -r ENGINE_PID CGROUP < "$READY"; ENGINES="$ENGINES $ENGINE_PID"
  kill -9 "$RUN"; wait "$RUN" 2>/dev/null
  kill -0 "$ENGINE_PID" 2>/dev/null || { say "cycle $i: the engine died with its runner (nothing to recover)"; }
  if [ "$i" -gt 1 ]; then
    LINE=$(grep -m1 '^perf sweep:' "$OUT/run$i.log" || true)
    [ -n "$LINE" ] || { say "cycle $i: no sweep line"; FAIL=1; }
    say "cycle $i: ${LINE:-<none>}"
  fi
  say "cycle $i: killed run $RUN, engine $ENGINE_PID in ${CGROUP} after $(( $(date +%s) - T0 )) s"
done
python3 -m pytest "$WORK/test_after.py" "${ARGS[@]}" > "$OUT/final.log" 2>&1 || { say "final run failed"; FAIL=1; }
LINE=$(grep -m1 '^perf sweep:' "$OUT/final.log" || true); say "final: ${LINE:-<no sweep line>}"
[ -n "$LINE" ] || FAIL=1
LEFT_PROCS=0; for p in $ENGINES; do [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" && LEFT_PROCS=$((LEFT_PROCS + 1)); done
LEFT_CG=$(cgroups | comm -13 "$WORK/cg.before" - | wc -l)
LEFT_SHM=$(segments | comm -13 "$WORK/shm.before" - | wc -l)
LEFT_REC=$(ls "$STATE/runs" 2>/dev/null | wc -l)
say "left: processes=$LEFT_PROCS cgroups=$LEFT_CG sgl_shm=$LEFT_SHM run_records=$LEFT_REC"
[ "$LEFT_PROCS$LEFT_CG$LEFT_SHM$LEFT_REC" = "0000" ] || FAIL=1
rm -rf "$WORK"
exit $FAIL
