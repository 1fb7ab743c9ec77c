#!/usr/bin/env bash
# One call of the lent GPU (docs/CONTRIBUTING.md, "The GPU tier offline"): unpack the offline SGLang
# (.device/site.tar.xz) and any wheels in .device/extra (py-spy) once per host, then
# `bash scripts/gpu/gpu_tier.sh STEP...` with the env given (AB_ARGS, REF, PATCH_PCT, BUDGET_S, K), and pack what the
# steps wrote into $OUT/NAME.tgz. Each session reuses this script rather than copying one of its own.
# Usage (on the device, from the repository root): bash scripts/gpu/device_call.sh NAME STEP [STEP ...]
# (issue 52's calls ran these lines as .device/go52.sh, from .device instead of scripts/gpu)
set -u
T0=$(date +%s)
cd "$(dirname "$0")/../.."
NAME=$1; shift
if [ ! -f /tmp/site/.done ]; then
  mkdir -p /tmp/site
  xz -d -T4 < .device/site.tar.xz | tar -xf - -C /tmp/site || exit 3
  python3 -c "import zipfile, glob; [zipfile.ZipFile(w).extractall('/tmp/site') for w in glob.glob('.device/extra/*.whl')]"
  tar xzf .device/jitcache.tgz -C ~ 2>/dev/null && echo "jit cache restored"
  PYTHONPATH=/tmp/site python3 -c 'import torch, sglang, sgl_kernel, flashinfer, transformers, sqlalchemy, alembic; print("imports ok", torch.__version__, sglang.__version__, torch.cuda.get_device_name())' || exit 3
  touch /tmp/site/.done
fi
export SITE=/tmp/site PERF_CGROUP_PARENT=/sys/fs/cgroup WORK=/tmp/perf-gpu BASELINES=/tmp/perf-baselines
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$WORK/logs" "$BASELINES"
[ -f "$WORK/logs/lscpu.txt" ] || { lscpu; nvidia-smi -q -d CLOCK,PERFORMANCE; } > "$WORK/logs/lscpu.txt" 2>&1
{ echo "call $NAME at $(date -u +%FT%TZ), uptime_s $(cut -d' ' -f1 /proc/uptime), setup+ $(( $(date +%s) - T0 )) s, AB_ARGS=${AB_ARGS:-}";
  nvidia-smi --query-gpu=name,uuid,memory.total --format=csv,noheader; nproc; } | tee -a "$WORK/logs/calls.txt"
BUDGET_S=$(( ${BUDGET_S:-570} - ($(date +%s) - T0) )) OUT= bash scripts/gpu/gpu_tier.sh "$@"
rc=$?
export PYTHONPATH=$SITE:$(pwd)
python3 -m engine_fixtures.cli reference show --baseline-dir "$BASELINES" > "$WORK/logs/reference-$NAME.txt" 2>&1
echo "call $NAME rc=$rc wall $(( $(date +%s) - T0 )) s, uptime_s $(cut -d' ' -f1 /proc/uptime)" | tee -a "$WORK/logs/calls.txt"
tar czf "$OUT/$NAME.tgz" -C "$WORK" --exclude='bt-*' --exclude='plugin-path' . -C "$(dirname "$BASELINES")" \
  --exclude='reference-build' "$(basename "$BASELINES")"
ls -la "$OUT"
exit $rc
