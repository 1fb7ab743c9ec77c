#!/usr/bin/env bash
# One device call on the lent H200: unpack the offline SGLang bundle, report the cgroup facts, run the
# transport properties against real CUDA and SGLang's own classes, then the engine arms.
#   bash scripts/gpu/h200_call.sh SHAPE [PYTEST_K_EXPR]
# Needs `.device/` carried along: ../shared/device/build_wheelhouse.sh, then scripts/gpu/add_suite_wheels.sh
# (httptools for the load generator). Everything lands in $OUT.
set -uo pipefail
SHAPE=${1:-tiny}; KEXPR=${2:-}
T0=$(date +%s)
bash .device/setup.sh > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 1; }
export PYTHONPATH=/tmp/site:$(pwd) HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
{ echo "== cgroup"; cat /proc/self/cgroup; for f in cgroup.controllers cgroup.subtree_control; do
    echo "$f: $(cat /sys/fs/cgroup/$f 2>&1)"; done
  python3 -c 'from engine_fixtures.isolation.cgroups import probe_quota_support as p, effective_cpu_quota as q; print("probe:", p()); print("effective quota:", q())'
  nproc; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } > "$OUT/facts.txt" 2>&1
cat "$OUT/facts.txt"
if [ "${SKIP_TRANSPORT:-0}" != 1 ]; then
  timeout 180 python3 -m pytest -p engine_fixtures.plugin -p engine_fixtures.fixtures perf_tests/sglang/transport -q -rs \
    > "$OUT/transport.log" 2>&1; echo "transport tests rc=$? ($(tail -1 "$OUT/transport.log"))"
fi
echo "setup+transport took $(( $(date +%s) - T0 ))s"
bash scripts/gpu/run_h200.sh "$SHAPE" "$KEXPR" > /dev/null 2>&1; RC=$?
grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed" /tmp/perf-out/$SHAPE/pytest.log | tail -20
cat /tmp/perf-out/$SHAPE/results/summary.md 2>/dev/null | head -60
echo "total $(( $(date +%s) - T0 ))s rc=$RC"
