#!/usr/bin/env bash
# Issue 18's evidence on the lent H200 (SGLang 0.5.16 from the carried wheelhouse, `.device/`), in steps that fit
# one warm lease; state lives in /tmp/perf-fast and carries over between calls of the lease.
#   BUDGET_S=540 bash scripts/gpu/h200_fast.sh STEP [STEP ...]
# Steps (each starts only while its guard of seconds is left in the call's budget):
#   window                the window-length study: one 40 s segment pinned (auto) and one unpinned (off)
#   pool:N[:PIN]          fresh-engine runs of the buffer-quota arm until N runs exist for placement PIN (auto)
#   update                pool the pinned runs: perf-baseline update --from-runs K, then validate
#   ab:CANDIDATE          the default A/B (3 fresh instance pairs) of the buffer-quota arm, timed end to end
#   study:SIZES           the A/B detection study (trials of 3 fresh engine groups) until the budget
# Everything lands in $OUT/fast.tgz (logs, results, baselines, study JSON).
set -uo pipefail
T0=$(date +%s); BUDGET_S=${BUDGET_S:-540}
ROOT=$(pwd); W=/tmp/perf-fast; mkdir -p "$W/results-auto" "$W/results-off" "$W/baselines" "$W/logs" "$W/ab"
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
if [ ! -f /tmp/site/.done ]; then bash .device/setup.sh > "$W/logs/setup.log" 2>&1 || { tail -20 "$W/logs/setup.log"; exit 1; }; fi
[ -f "$HOME/.cache/.perf-jit-restored" ] || { tar xzf .device/jitcache.tgz -C "$HOME" && touch "$HOME/.cache/.perf-jit-restored"; }
PLUG=/tmp/perf-plugin-path
python3 -m engine_fixtures.sglang_plugin.distinfo "$PLUG" >/dev/null   # SGLang finds the arms plugin here
export PYTHONPATH=$PLUG:/tmp/site:$ROOT HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
MODEL=/tmp/models/qwen-tiny
[ -f "$MODEL/config.json" ] || python3 -m engine_fixtures.model.modeldir --shape tiny "$MODEL" > /dev/null
{ nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > "$W/logs/machine-$T0.txt"
log "ready: $(tr '\n' ' ' < "$W/logs/machine-$T0.txt")"
ARM="perf_tests/sglang/gpu_studies/test_live_vs_separate.py::test_separate_launch[separate-buffer-quota]"
PYTEST=(python3 -m pytest -p engine_fixtures.plugin -p engine_fixtures.fixtures --perf-model "$MODEL"
        --perf-baseline-dir "$W/baselines" --perf-engine-timeout 300 --perf-strict no -q -rA -p no:cacheprovider
        --perf-cgroup-parent /sys/fs/cgroup)
for step in "$@"; do
  name=${step%%:*}; arg=${step#*:}; [ "$arg" = "$step" ] && arg=""
  case "$name" in
    window)
      [ "$(left)" -lt 200 ] && { log "skip window: $(left) s left"; continue; }
      timeout $(( $(left) - 10 )) python3 -m engine_fixtures.scenarios.window_study --model "$MODEL" \
        --scenario cpu-copy=buffer-quota --seconds 40 --lengths 0.5,1,2,3,4,5 --pin auto,off \
        --cgroup-parent /sys/fs/cgroup --out "$W/window" > "$W/logs/window.log" 2>&1
      log "window rc=$?"; tail -16 "$W/logs/window.log" ;;
    pool)
      N=${arg%%:*}; PIN=${arg#*:}; [ "$PIN" = "$arg" ] && PIN=auto
      while :; do
        have=$(ls "$W/results-$PIN"/results-*.json 2>/dev/null | wc -l)
        [ "$have" -ge "$N" ] && break
        [ "$(left)" -lt 75 ] && { log "stop pool: $(left) s left, $have runs ($PIN)"; break; }
        i=$((have + 1))
        "${PYTEST[@]}" "$ARM" --perf-engine-cpus "$PIN" --perf-results-dir "$W/results-$PIN" \
          > "$W/logs/pool-$PIN-$i.log" 2>&1
        log "pool $PIN run $i rc=$? $(grep -E 'passed|failed|error' "$W/logs/pool-$PIN-$i.log" | tail -1)"
        grep -E "measured .* of the time after" "$W/logs/pool-$PIN-$i.log" | tail -1
      done ;;
    update)
      K=$(ls "$W/results-auto"/results-*.json | wc -l)
      python3 -m engine_fixtures.cli update --from-runs "$K" --from "$W/results-auto" --baseline-dir "$W/baselines" \
        > "$W/logs/update.log" 2>&1; log "update K=$K rc=$?"; tail -30 "$W/logs/update.log"
      python3 -m engine_fixtures.cli validate "$W/results-auto" --pool 3 > "$W/logs/validate.log" 2>&1
      tail -12 "$W/logs/validate.log" ;;
    ab)
      [ "$(left)" -lt 250 ] && { log "skip ab $arg: $(left) s left"; continue; }
      s=$(date +%s)
      timeout $(( $(left) - 10 )) "${PYTEST[@]}" "$ARM" --perf-reference installed --perf-candidate "$arg" \
        --perf-results-dir "$W/ab/$(echo "$arg" | tr -c 'a-z0-9' _)" > "$W/logs/ab-$s.log" 2>&1
      log "ab $arg rc=$? in $(( $(date +%s) - s )) s"; grep -E "tpot_p50_ms|requests_per_s |ttft_p50_ms|passed|failed" \
        "$W/logs/ab-$s.log" | tail -8 ;;
    inj)
      [ "$(left)" -lt 75 ] && { log "skip inj $arg: $(left) s left"; continue; }
      "${PYTEST[@]}" "$ARM" --perf-candidate "$arg" --perf-results-dir "$W/inj/$(echo "$arg" | tr -c 'a-z0-9' _)" \
        > "$W/logs/inj-$(date +%s).log" 2>&1; log "inj $arg rc=$?"
      grep -E "tpot_p50_ms|requests_per_s |ttft_p50_ms" "$W/logs/"inj-*.log | tail -3 ;;
    study)
      [ "$(left)" -lt 150 ] && { log "skip study: $(left) s left"; continue; }
      timeout $(( $(left) - 5 )) python3 -m engine_fixtures.scenarios.ab_study --model "$MODEL" \
        --scenario cpu-copy=buffer-quota --sizes "${arg:-0,10,20}" --pairs 3 --budget-s $(( $(left) - 20 )) \
        --cgroup-parent /sys/fs/cgroup --out "$W/study-$T0" > "$W/logs/study-$T0.log" 2>&1
      log "study rc=$?"; tail -12 "$W/logs/study-$T0.log" ;;
  esac
done
for d in /tmp/pytest-of-*/pytest-*/engines*/*/; do [ -d "$d" ] || continue   # engine logs (tails)
  n=$(basename "$d"); mkdir -p "$W/engine-logs/$n"; tail -60 "$d/engine.log" > "$W/engine-logs/$n/engine.log" 2>/dev/null; done
echo "leftover sgl_shm segments: $(ls /dev/shm | grep -c '^sgl_shm'); perf cgroups: $(find /sys/fs/cgroup -maxdepth 2 -name 'perf-*' | wc -l)" \
  >> "$W/logs/machine-$T0.txt"
[ -n "${OUT:-}" ] && tar czf "$OUT/fast.tgz" -C /tmp perf-fast
log "call done"
