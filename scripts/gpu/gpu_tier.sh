#!/usr/bin/env bash
# The GPU tier on a self-hosted GPU runner, step by step, each step one pytest session, timed.
#
# Run from the repository root, on a runner where SGLang and the suite import (pip-installed, or an unpacked
# offline site dir given as SITE):
#   bash scripts/gpu/gpu_tier.sh STEP [STEP ...]
#
# Steps:
#   matrix     the nightly, as `tox -e perf-gpu` runs it: every contrast of the two live engines (one per transport),
#              the counters, each contrast arm against this host's pool, PP (skipped below its GPU count); strict;
#              prints the verdict table; results and report.html in $WORK/matrix-<n>/results
#   weekly     the weekly step, as `tox -e perf-gpu-weekly` runs it (`-m weekly`): the seed's figures as measured
#              rows (two groups of rows on the two launches) and the transport group
#   smoke      the per-pull-request subset (`-m smoke`): regressions 1 and 2 on two small live groups
#   pool       one independent run of the smoke subset that adds its arms to this host's pools
#              (--perf-update-baselines, given here and nowhere else): run it K >= 3 times, minutes apart, then
#              review `perf-baseline show --baseline-dir $BASELINES` and commit what it wrote
#   promote    keep the build under test as this runner's reference build (PROMOTE, default site:$SITE; a venv:DIR
#              or wheel:FILE.whl elsewhere), beside the pools: `perf-baseline reference promote` (run it after a
#              green nightly; the next `ab` judges the new build against it)
#   ab         the A/B of the installed build against the stored reference build (--perf-reference stored): an
#              instance group of two engines of each build alive together, mirrored blocks; its same-build pairs
#              are added to this host's A/A history
#   null       a null A/B (the installed build on both sides, --perf-reference installed): the same instance group;
#              it adds its pairs and its own units to this host's A/A history
#   patch      the A/B of a candidate carrying the named patch PATCH (slow-decode) sized to PATCH_PCT (10) % of the
#              last null or ab run's reference TPOT (its geometric mean, what TPOT gates on), against REF (stored)
#   transport  the transport group alone: cpu (buffer copy) vs cuda_ipc (cache on), fresh engine pairs
#   cv         the within-run CV of req/s (counted vs continuous) over the last matrix run's windows
#   components variance components of fresh engines of the installed build (issue 36): instance groups of one engine
#              per placement (PLACEMENTS, default off,on: per-role pinning), started one after another until the
#              step's budget is spent, then every components-* run of $WORK read together, less the first run's
#              first SKIP_GROUPS (1: the fresh host's warm-up) groups; windows in $WORK/components-<n>/ab_study.json
#
# Environment (all optional):
#   WORK       where every step writes (default: .perf-gpu under the repository root); steps of one machine share it
#   BASELINES  the pools judged against and written by `pool` (default: the repository's baselines/)
#   SITE       a directory of unpacked packages put first on PYTHONPATH (an offline runner); empty: none
#   BUDGET_S   seconds for all steps of this call (default 3600); a step starts only while its guard is left
#   PERF_CGROUP_PARENT  the cgroup v2 directory that gets the engines' CPU sandboxes (a runner whose job cgroup
#              lacks the cpu controller; the lent H200 needs /sys/fs/cgroup); empty: the suite's own choice
#   POOL_GUARD_S, AB_GUARD_S  seconds of BUDGET_S a pool step (default 300), or an A/B step (ab, null, patch;
#              default 360: one group of 2+2 engines took 309 s on the H200; 540 for patch: its patched engines'
#              CUDA-graph capture and a cold kept reference took 3.75 min of starts on an H100, 2026-12-07), needs
#              left to start; a step killed by the budget loses its results, so keep the guards above what it takes
#   ARGS       more pytest arguments for every step (e.g. --perf-profile off); MATRIX_ARGS, SMOKE_ARGS,
#              AB_ARGS (null, patch, transport) for some of them (split on spaces)
#   PATCH_MS   the patch step's milliseconds, given (no null or ab run needed first); unset: PATCH_PCT of the last
#              null or ab run's reference TPOT
#   PATCH      the named patch of the patch step (default slow-decode: GPU time before every decode step, which the
#              overlapped scheduler cannot hide, so it realises its size; slow-scheduler, a CPU spin in every
#              Scheduler.run_batch, stays selectable: the overlap hides much of it)
#   K          a pytest -k expression applied to every step: a part of a step (e.g. K="cpu-quota or 2x2")
#   AB_K       the A/B steps' -k (default build_ab: both A/B groups; build_ab_cpu or build_ab_cuda_ipc: one)
#   AB_BLOCKS  the ab, null and patch steps' --perf-ab-blocks (default 2, as tox's perf-gpu and perf-gpu-ab run it: the A/A history
#              pools only entries of equal blocks, so a step measured otherwise grows a history they never read)
#   OUT        if set, everything in $WORK is packed into $OUT/gpu-tier.tgz at the end (with $BASELINES)
# No step writes a pool unless it is `pool`. Exit status: the last failed step's pytest status, else 0.
set -uo pipefail
T0=$(date +%s); BUDGET_S=${BUDGET_S:-3600}
ROOT=$(pwd); WORK=${WORK:-$ROOT/.perf-gpu}; BASELINES=${BASELINES:-$ROOT/baselines}; mkdir -p "$WORK/logs"
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
pack() {
  [ -n "${OUT:-}" ] || return 0
  tar czf "$OUT/gpu-tier.tgz" -C "$WORK" --exclude='bt-*' . -C "$(dirname "$BASELINES")" "$(basename "$BASELINES")"
}
trap pack EXIT
# SGLang finds the suite's arms plugin (engine_fixtures.sglang_plugin) through this entry-point directory.
PLUG=$WORK/plugin-path
PYTHONPATH=${SITE:+$SITE:}$ROOT${PYTHONPATH:+:$PYTHONPATH} python3 -m engine_fixtures.sglang_plugin.distinfo "$PLUG" \
  >/dev/null || { log "the suite does not import here (SITE=${SITE:-unset})"; exit 2; }
export PYTHONPATH=$PLUG:${SITE:+$SITE:}$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PERF_STRICT=${PERF_STRICT:-yes}
# py-spy for the differential profiles, where the offline site carries it (unzipped without its exec bit)
if [ -n "${SITE:-}" ] && PYSPY=$(ls "$SITE"/py_spy-*.data/scripts/py-spy 2>/dev/null | head -1) && [ -n "$PYSPY" ]; then
  chmod +x "$PYSPY" && export PERF_PY_SPY=$PYSPY
fi
{ nproc; nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader; uname -r; date -u; } \
  > "$WORK/logs/machine-$T0.txt" 2>&1
log "ready: $(tr '\n' ' ' < "$WORK/logs/machine-$T0.txt")"
# The plugin is pytest11 entry points when the suite is pip-installed; from a checkout on PYTHONPATH, name it.
PLUGINS=()
python3 -c "import importlib.metadata as m, sys; sys.exit(not any(e.value == 'engine_fixtures.plugin' for e in \
  m.entry_points(group='pytest11')))" || PLUGINS=(-p engine_fixtures.plugin -p engine_fixtures.fixtures)
PYTEST=(python3 -m pytest "${PLUGINS[@]}" -p no:cacheprovider -rA --perf-require-gpu 1 --perf-engine-timeout 420
        --perf-baseline-dir "$BASELINES" ${PERF_CGROUP_PARENT:+--perf-cgroup-parent "$PERF_CGROUP_PARENT"})
STATUS=0
run() {  # run NAME GUARD_S PYTEST_ARGS...: one pytest session, timed, into $WORK/NAME-<n>
  local name=$1 guard=$2; shift 2
  [ "$(left)" -lt "$guard" ] && { log "skip $name: $(left) s left of BUDGET_S, it needs $guard"; return 0; }
  local n; n=$(ls -d "$WORK/$name"-* 2>/dev/null | wc -l); local d="$WORK/$name-$((n + 1))"; mkdir -p "$d"
  local s; s=$(date +%s)
  # --perf-history-url keeps every run of this runner (the trend plots, `perf-baseline update --from-runs`)
  timeout $(( $(left) - 5 )) "${PYTEST[@]}" --basetemp "$WORK/bt-$name" --perf-results-dir "$d/results" \
    --perf-history-url "sqlite:///$WORK/history.sqlite" ${K:+-k "$K"} ${ARGS:-} "$@" > "$d/pytest.log" 2>&1
  local rc=$?
  [ "$rc" -ne 0 ] && STATUS=$rc
  echo "rc=$rc wall_s=$(( $(date +%s) - s ))" > "$d/wall.txt"
  log "$name rc=$rc wall $(( $(date +%s) - s )) s: $(grep -E '^=+ .*(passed|failed|error|skipped).* in ' "$d/pytest.log" | tail -1)"
  for e in "$WORK/bt-$name"/engines*/*/; do   # engine logs and arm proofs, kept beside the results
    [ -d "$e" ] || continue; mkdir -p "$d/engines/$(basename "$e")"
    cp "$e/engine.log" "$d/engines/$(basename "$e")/" 2>/dev/null
    cp -r "$e/proof" "$d/engines/$(basename "$e")/" 2>/dev/null
    cp -r "$e/profiles" "$d/engines/$(basename "$e")/" 2>/dev/null  # py-spy raw stacks, to read a differential again
  done
  rm -rf "$WORK/bt-$name"
}
last() { ls -d "$WORK/$1"-* 2>/dev/null | sort -V | tail -1; }
TIER=perf_tests/sglang/gpu_tier
AB_K=${AB_K:-build_ab}  # the A/B steps' tests: both A/B groups (the cpu launch's arms, cuda_ipc); one: build_ab_cpu
ABB="--perf-ab-blocks ${AB_BLOCKS:-2}"  # before AB_ARGS, which may still name other blocks: pytest keeps the last
patch_ms() {  # PATCH_PCT % of the reference build's TPOT (geometric mean) in the newest null or ab run
  python3 - "$(ls -t "$WORK"/null-*/results/results-*.json "$WORK"/ab-*/results/results-*.json 2>/dev/null | head -1)" \
    "${PATCH_PCT:-10}" <<'PY'
import json, sys, statistics
data = json.load(open(sys.argv[1]))
refs = [r for r in data["results"] if r["scenario"].endswith("/build=reference")]
ref = ([r for r in refs if "copy=buffer" in r["scenario"]] or refs)[0]  # the buffer arm: no quota, no fan-out
print(f"{statistics.mean(ref['samples']['tpot_gmean_ms']) * float(sys.argv[2]) / 100:.3f}")
PY
}
for step in "$@"; do
  case "$step" in
    matrix) run matrix 300 "$TIER" -m "(gpu_tier or gpu) and not smoke and not weekly" ${MATRIX_ARGS:-} ;;
    weekly) run weekly 300 "$TIER" -m weekly ${MATRIX_ARGS:-} ;;
    smoke) run smoke 300 "$TIER" -m smoke ${SMOKE_ARGS:-} ;;
    pool) run pool "${POOL_GUARD_S:-300}" "$TIER" -m smoke --perf-update-baselines ${SMOKE_ARGS:-} ;;
    promote)
      python3 -m engine_fixtures.cli reference promote \
        "${PROMOTE:-site:${SITE:?promote needs PROMOTE=venv:DIR|site:DIR|wheel:FILE or SITE}}" --baseline-dir "$BASELINES" --reason "gpu_tier.sh promote $(date -u +%FT%TZ)" 2>&1 | tee "$WORK/logs/promote.log"
      log "promote rc=${PIPESTATUS[0]}" ;;
    ab) run ab "${AB_GUARD_S:-360}" "$TIER/test_groups.py" -k "$AB_K" --perf-reference stored $ABB ${AB_ARGS:-} ;;
    null) run null "${AB_GUARD_S:-360}" "$TIER/test_groups.py" -k "$AB_K" --perf-reference installed $ABB ${AB_ARGS:-} ;;
    patch)
      ms=${PATCH_MS:-$(patch_ms)} || { log "patch: no null or ab run to size the patch from (or give PATCH_MS)"; continue; }
      log "patch: ${PATCH:-slow-decode}=$ms ms (${PATCH_PCT:-10} % of the reference TPOT) against ${REF:-stored}"
      run patch "${AB_GUARD_S:-540}" "$TIER/test_groups.py" -k "$AB_K" --perf-reference "${REF:-stored}" \
        --perf-candidate "patch:${PATCH:-slow-decode}=$ms" $ABB ${AB_ARGS:-} ;;
    transport) run transport 200 "$TIER/test_groups.py" -k transport_group ${AB_ARGS:-} ;;
    cv)
      python3 -m tools.studies.rate_study "$(ls "$(last matrix)"/results/results-*.json | tail -1)" \
        > "$WORK/logs/cv.md" 2>&1
      log "cv rc=$?"; cat "$WORK/logs/cv.md" ;;
    components)
      n=$(ls -d "$WORK"/components-* 2>/dev/null | wc -l); d="$WORK/components-$((n + 1))"
      timeout $(( $(left) - 5 )) python3 -m tools.studies.ab_study --model "${MODEL:?components needs \
MODEL, a model directory (python3 -m engine_fixtures.model.modeldir DIR --shape qwen3-vl-4b)}" --sizes '' \
        --placements "${PLACEMENTS:-off,on}" --pairs 1 --blocks "${BLOCKS:-3}" --budget-s $(( $(left) - 120 )) \
        ${PERF_CGROUP_PARENT:+--cgroup-parent "$PERF_CGROUP_PARENT"} --out "$d" > "$WORK/logs/components-$((n + 1)).log" 2>&1
      log "components rc=$?"
      python3 -m tools.studies.components $(ls -v "$WORK"/components-*/ab_study.json) \
        --skip-first-groups "${SKIP_GROUPS:-1}" --out "$WORK" 2>&1 | tee "$WORK/logs/components.md" ;;
    *) log "unknown step $step (steps: matrix weekly smoke pool promote ab null patch transport cv components)"; exit 2 ;;
  esac
done
exit "$STATUS"
