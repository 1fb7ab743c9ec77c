#!/usr/bin/env bash
# One device call of the issue-46 session: unpack the offline SGLang once per host, then for each STEP@K argument
# `K=K bash scripts/gpu/gpu_tier.sh STEP` (K: a pytest -k expression; empty: every test of the step).
# Usage: bash .device/go46.sh NAME STEP@K [STEP@K ...]   (env: BUDGET_S)
set -u
T0=$(date +%s)
cd "$(dirname "$0")/.."
NAME=$1; shift
# The wheelhouse travels in two halves (whlA, whlB: the tracked tree leaves room for one a call); each call unpacks
# what it carries, once.
python3 - <<'PY'
import glob, os, zipfile
from concurrent.futures import ThreadPoolExecutor
done = "/tmp/site/.unpacked"
os.makedirs(done, exist_ok=True)
todo = [w for w in glob.glob(".device/whl*/*.whl") if not os.path.exists(f"{done}/{os.path.basename(w)}")]
def unpack(w):
    zipfile.ZipFile(w).extractall("/tmp/site")
    open(f"{done}/{os.path.basename(w)}", "w").close()
list(ThreadPoolExecutor(8).map(unpack, todo))
want = set(open(".device/wheels.txt").read().split())
print(f"{len(todo)} wheels unpacked now; {len(want - set(os.listdir(done)))} of {len(want)} still to come")
PY
if [ "$(comm -23 .device/wheels.txt <(ls /tmp/site/.unpacked | sort) | wc -l)" != 0 ]; then
  echo "the wheelhouse is not complete yet: carry the other half (.device/whlB) in the next call"; exit 0
fi
if [ ! -f /tmp/site/.done ]; then
  tar xzf .device/jitcache.tgz -C ~ 2>/dev/null && echo "jit cache restored"
  PYTHONPATH=/tmp/site python3 -c 'import torch, sglang, sgl_kernel, flashinfer, transformers, sqlalchemy, alembic; print("imports ok", torch.__version__, sglang.__version__, torch.cuda.get_device_name())' || exit 3
  touch /tmp/site/.done
fi
export SITE=/tmp/site PERF_CGROUP_PARENT=/sys/fs/cgroup WORK=/tmp/perf-gpu BASELINES=/tmp/perf-baselines
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$WORK/logs" "$BASELINES"
{ echo "call $NAME at $(date -u +%FT%TZ), uptime_s $(cut -d' ' -f1 /proc/uptime), setup+ $(( $(date +%s) - T0 )) s";
  nvidia-smi --query-gpu=name,uuid,memory.total --format=csv,noheader; nproc; } | tee -a "$WORK/logs/calls.txt"
rc=0
for spec in "$@"; do
  step=${spec%%@*}; k=${spec#*@}
  echo "step $step, K=$k, at +$(( $(date +%s) - T0 )) s" | tee -a "$WORK/logs/calls.txt"
  BUDGET_S=$(( ${BUDGET_S:-570} - ($(date +%s) - T0) )) K="$k" OUT= bash scripts/gpu/gpu_tier.sh "$step" || rc=$?
done
export PYTHONPATH=$SITE:$(pwd)
python3 -m engine_fixtures.cli show --baseline-dir "$BASELINES" > "$WORK/logs/pools-$NAME.txt" 2>&1
python3 -m engine_fixtures.cli reference show --baseline-dir "$BASELINES" > "$WORK/logs/reference-$NAME.txt" 2>&1
echo "call $NAME rc=$rc wall $(( $(date +%s) - T0 )) s, uptime_s $(cut -d' ' -f1 /proc/uptime)" | tee -a "$WORK/logs/calls.txt"
tar czf "$OUT/$NAME.tgz" -C "$WORK" --exclude='bt-*' --exclude='plugin-path' . -C "$(dirname "$BASELINES")" \
  --exclude='reference-build' "$(basename "$BASELINES")"
ls -la "$OUT"
exit $rc
