#!/usr/bin/env bash
# The verdict evidence on the lent H200 (SGLang 0.5.16 unpacked offline by .device/setup.sh into /tmp/site).
#   bash scripts/gpu/h200_verdicts.sh noise FIRST LAST [ARM_IDS]      # fresh-engine runs FIRST..LAST (arms: a,b)
#   bash scripts/gpu/h200_verdicts.sh ab SIZES BLOCKS                  # the A/B detection study
# State lives in /tmp/perf-verdicts (kept while the machine stays warm); a run number already present is not
# repeated. Earlier calls' results carried in docs/results/h200-verdicts/results are restored first, so a cold
# machine continues the same series. Noise: runs 1-3 are pooled into the baseline (perf-baseline update
# --from-runs 3), every later run is judged against that pool with --perf-strict no, so each run completes and
# records its verdicts. A run starts only while at least GUARD_S seconds of the call's budget are left.
# Everything goes to $OUT/verdicts.tgz.
set -uo pipefail
MODE=$1; shift
T0=$(date +%s); BUDGET_S=${BUDGET_S:-570}; GUARD_S=${GUARD_S:-100}
ROOT=$(pwd); W=/tmp/perf-verdicts; mkdir -p "$W/results" "$W/baselines" "$W/logs"
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
if [ ! -f /tmp/site/.done ]; then bash .device/setup.sh > "$W/logs/setup.log" 2>&1 || { tail -20 "$W/logs/setup.log"; exit 1; }; fi
[ -f "$HOME/.cache/.perf-jit-restored" ] || { tar xzf .device/jitcache.tgz -C "$HOME" && touch "$HOME/.cache/.perf-jit-restored"; }
PLUG=/tmp/perf-plugin-path
python3 -m engine_fixtures.sglang_plugin.distinfo "$PLUG" >/dev/null   # SGLang finds the arms plugin here
export PYTHONPATH=$PLUG:/tmp/site:$ROOT HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
MODEL=/tmp/models/qwen-tiny
[ -f "$MODEL/config.json" ] || python3 -m engine_fixtures.model.modeldir --shape tiny "$MODEL" > /dev/null
cp -n docs/results/h200-verdicts/results/results-*.json "$W/results/" 2>/dev/null
{ nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; hostname; date -u; } > "$W/logs/machine-$T0.txt"
PYTEST=(python3 -m pytest -p engine_fixtures.plugin -p engine_fixtures.fixtures
        --perf-model "$MODEL" --perf-results-dir "$W/results" --perf-baseline-dir "$W/baselines"
        --perf-engine-timeout 300 --perf-strict no -q -rA -p no:cacheprovider)
case "$MODE" in
  noise)
    FIRST=$1; LAST=$2; IFS=, read -ra ARMS <<< "${3:-cpu-copy=buffer-quota}"
    NODES=(); for a in "${ARMS[@]}"; do NODES+=("perf_tests/engine/test_gpu_arms.py::test_engine_arm[$a]"); done
    for i in $(seq "$FIRST" "$LAST"); do
      [ -f "$W/logs/run-$i.log" ] && continue
      [ "$(left)" -lt "$GUARD_S" ] && { echo "stopping before run $i: $(left) s left"; break; }
      "${PYTEST[@]}" "${NODES[@]}" > "$W/logs/run-$i.log" 2>&1
      echo "run $i rc=$? $(grep -E '^(PASSED|FAILED|SKIPPED|ERROR)|passed|failed' "$W/logs/run-$i.log" | tail -1) at $(( $(date +%s) - T0 )) s"
      if [ "$i" -eq 3 ]; then
        python3 -m engine_fixtures.cli update --from-runs 3 --from "$W/results" --baseline-dir "$W/baselines" \
          > "$W/logs/pool.log" 2>&1; tail -5 "$W/logs/pool.log"
      fi
    done
    python3 -m engine_fixtures.cli validate "$W/results" --pool 3 > "$W/logs/validate.log" 2>&1; cat "$W/logs/validate.log"
    ;;
  ab)
    SIZES=${1:-0,10,20}; BLOCKS=${2:-12}
    timeout $(( $(left) - 20 )) python3 -m engine_fixtures.scenarios.ab_study --model "$MODEL" \
      --scenario cuda_ipc-cache=on --sizes "$SIZES" --blocks "$BLOCKS" --trial-blocks 4 --window-requests 32 \
      --out "$W/ab" > "$W/logs/ab.log" 2>&1; echo "ab rc=$?"; tail -25 "$W/logs/ab.log"
    ;;
esac
for d in "$W"/ab/engines/*/ /tmp/pytest-of-*/pytest-*/engines*/*/; do [ -d "$d" ] || continue   # engine logs
  n=$(basename "$d"); mkdir -p "$W/engine-logs/$n"; tail -200 "$d/engine.log" > "$W/engine-logs/$n/engine.log" 2>/dev/null; done
echo "leftover sgl_shm segments: $(ls /dev/shm | grep -c '^sgl_shm')" >> "$W/logs/machine-$T0.txt"
[ -n "${OUT:-}" ] && tar czf "$OUT/verdicts.tgz" -C /tmp perf-verdicts
echo "call took $(( $(date +%s) - T0 )) s"
