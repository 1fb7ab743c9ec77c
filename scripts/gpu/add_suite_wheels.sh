#!/usr/bin/env bash
# Run HERE (with PyPI access) after ../shared/device/build_wheelhouse.sh: adds the suite's own dependencies that
# the H200 image lacks to the carried wheelhouse (.device/whlA), so `.device/setup.sh` unpacks them too.
# Without it the load generator stops with "http_client='fast' needs httptools".
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .device/whlA 'httptools>=0.6,<1'
ls -la .device/whlA | grep -i httptools
