#!/usr/bin/env bash
# The GPU tier on a GPU runner without network (the lent H200: SGLang 0.5.16 from the carried wheelhouse
# `.device/`, unpacked by `.device/setup.sh` into /tmp/site): one engine with many arms, and groups of engines.
# Run from the repository root:
#   BUDGET_S=560 bash scripts/gpu/h200_live.sh STEP [STEP ...]
# Steps (each starts only while its guard of seconds is left in the call's budget; state in $WORK carries over
# between calls of one warm lease):
#   default    the default GPU job as `tox -e perf-gpu` runs it (strict, --perf-require-gpu 1, the 4B shape), timed
#   separate   buffer vs torch copy under quota as separate engines and live on one engine, 10 blocks
#              (perf_tests/sglang/gpu_studies/test_live_vs_separate.py)
#   agree      scripts/gpu/live_vs_separate.py over the last separate run
#   gate       the live patch gate study (perf_tests/sglang/gpu_studies/test_live_gate.py)
#   (EXTRA_ARGS: more pytest arguments for the default step, e.g. a smaller block budget)
#   cv         the within-run CV of req/s, counted vs continuous, over the default run's windows
#   null       a null A/B (the installed build on both sides, --perf-reference installed): fresh engine pairs started
#              one at a time with equal KV pools; it adds its pairs to this host's A/A history ($WORK/baselines)
#   patch      the A/B of a candidate carrying the slow-scheduler patch sized to PATCH_PCT (15) % of the last null
#              run's reference TPOT p50
#   transport  the transport group: cpu (buffer copy) vs cuda_ipc (cache on), fresh pairs
#   (AB_ARGS: more pytest arguments for null, patch and transport, e.g. --perf-profile off; NULL_ARGS, PATCH_ARGS,
#   TRANSPORT_ARGS: for one of them, e.g. --perf-ab-instances 2 --perf-ab-max-instances 2)
# STATE: a folder whose baselines/ seeds $WORK/baselines on a fresh machine (this host's A/A history between calls)
# Everything lands in $OUT/live.tgz: logs, results JSON, summaries, reports. Pools are never written here.
set -uo pipefail
T0=$(date +%s); BUDGET_S=${BUDGET_S:-560}
ROOT=$(pwd); WORK=${WORK:-${TMPDIR:-/tmp}/perf-live}; mkdir -p "$WORK/logs"
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
pack() { [ -n "${OUT:-}" ] && tar czf "$OUT/live.tgz" -C "$WORK" --exclude='bt-*' . ; }
trap pack EXIT
SITE=${SITE:-/tmp/site}
if [ ! -f "$SITE/.done" ]; then bash .device/setup.sh > "$WORK/logs/setup.log" 2>&1 || { tail -20 "$WORK/logs/setup.log"; exit 1; }; fi
[ -f "$HOME/.cache/.perf-jit-restored" ] || { [ -f .device/jitcache.tgz ] && tar xzf .device/jitcache.tgz -C "$HOME" \
  && touch "$HOME/.cache/.perf-jit-restored"; }
# py-spy for the differential profiles, when the wheelhouse carries it (unzipped without its exec bit)
PYSPY=$(ls "$SITE"/py_spy-*.data/scripts/py-spy 2>/dev/null | head -1)
[ -n "$PYSPY" ] && chmod +x "$PYSPY" && export PERF_PY_SPY=$PYSPY
PLUG=$WORK/plugin-path
python3 -m engine_fixtures.sglang_plugin.distinfo "$PLUG" >/dev/null   # SGLang finds the arms plugin here
export PYTHONPATH=$PLUG:$SITE:$ROOT HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 PERF_STRICT=yes
{ nproc; nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader; uname -r; date -u; } \
  > "$WORK/logs/machine-$T0.txt" 2>&1
log "ready: $(tr '\n' ' ' < "$WORK/logs/machine-$T0.txt")"
# The device runs each command in a cgroup v2 leaf without the cpu controller: sandboxes go under the root,
# accepted explicitly with --perf-cgroup-parent.
PYTEST=(python3 -m pytest -p engine_fixtures.plugin -p engine_fixtures.fixtures -p no:cacheprovider -rA --perf-require-gpu 1 --perf-engine-timeout 420
        --perf-cgroup-parent "${PERF_CGROUP_PARENT:-/sys/fs/cgroup}" --perf-baseline-dir "$WORK/baselines")
run() {  # run NAME GUARD_S PYTEST_ARGS...: one pytest session, timed, into $WORK/NAME-<n>
  local name=$1 guard=$2; shift 2
  [ "$(left)" -lt "$guard" ] && { log "skip $name: $(left) s left"; return 0; }
  local n; n=$(ls -d "$WORK/$name"-* 2>/dev/null | wc -l); local d="$WORK/$name-$((n + 1))"; mkdir -p "$d"
  local s; s=$(date +%s)
  timeout $(( $(left) - 5 )) "${PYTEST[@]}" --basetemp "$WORK/bt-$name" --perf-results-dir "$d/results" "$@" \
    > "$d/pytest.log" 2>&1
  local rc=$?
  echo "rc=$rc wall_s=$(( $(date +%s) - s ))" > "$d/wall.txt"
  log "$name rc=$rc wall $(( $(date +%s) - s )) s: $(grep -E '^=+ .*(passed|failed|error|skipped).* in ' "$d/pytest.log" | tail -1)"
  for e in "$WORK/bt-$name"/engines*/*/; do   # engine logs and arm proofs
    [ -d "$e" ] || continue; mkdir -p "$d/engines/$(basename "$e")"
    cp "$e/engine.log" "$d/engines/$(basename "$e")/" 2>/dev/null
    cp -r "$e/proof" "$d/engines/$(basename "$e")/" 2>/dev/null
  done
  rm -rf "$WORK/bt-$name"
}
last() { ls -d "$WORK/$1"-* 2>/dev/null | sort -V | tail -1; }
[ -n "${STATE:-}" ] && [ -d "$STATE/baselines" ] && [ ! -d "$WORK/baselines" ] && cp -r "$STATE/baselines" "$WORK/"
GROUPS_TEST=perf_tests/sglang/gpu_tier/test_groups.py
patch_ms() {  # PATCH_PCT % of the reference build's TPOT p50 in the last null run
  python3 - "$(ls "$(last null)"/results/results-*.json | tail -1)" "${PATCH_PCT:-15}" <<'PY'
import json, sys, statistics
data = json.load(open(sys.argv[1]))
ref = [r for r in data["results"] if r["scenario"].endswith("/build=reference")][0]
print(f"{statistics.mean(ref['samples']['tpot_p50_ms']) * float(sys.argv[2]) / 100:.3f}")
PY
}
for step in "$@"; do
  case "$step" in
    default) run default 300 perf_tests/sglang/gpu_tier -m "gpu_tier or gpu" ${EXTRA_ARGS:-} ;;
    separate) run separate 300 perf_tests/sglang/gpu_studies/test_live_vs_separate.py --perf-repeats 10 \
                --perf-max-repeats 10 ;;
    gate) run gate 300 perf_tests/sglang/gpu_studies/test_live_gate.py -s --perf-profile off ;;
    agree)
      python3 scripts/gpu/live_vs_separate.py "$(ls "$(last separate)"/results/results-*.json | tail -1)" \
        > "$WORK/logs/agree.md" 2>&1
      log "agree rc=$?"; cat "$WORK/logs/agree.md" ;;
    cv)
      python3 -m engine_fixtures.scenarios.rate_study "$(ls "$(last default)"/results/results-*.json | tail -1)" \
        > "$WORK/logs/cv.md" 2>&1
      log "cv rc=$?"; cat "$WORK/logs/cv.md" ;;
    null) run null 240 "$GROUPS_TEST" -k build_ab --perf-reference installed ${AB_ARGS:-} ${NULL_ARGS:-} ;;
    patch)
      ms=$(patch_ms) || { log "patch: no null run to size the patch from"; continue; }
      log "patch: slow-scheduler=$ms ms (${PATCH_PCT:-15} % of the reference TPOT p50)"
      run patch 200 "$GROUPS_TEST" -k build_ab --perf-reference installed --perf-candidate "patch:slow-scheduler=$ms" \
        ${AB_ARGS:-} ${PATCH_ARGS:-} ;;
    transport) run transport 200 "$GROUPS_TEST" -k transport_group ${AB_ARGS:-} ${TRANSPORT_ARGS:-} ;;
    *) log "unknown step $step"; exit 2 ;;
  esac
done
