#!/usr/bin/env bash
# `make demo`: the most complete path rlcpp has so far. Until the training loop lands this loads
# each fixture model, describes it, and runs a forward pass against its float64 reference.
set -euo pipefail
rlcpp=${1:?usage: demo.sh RLCPP_BINARY FIXTURES_DIR}
fixtures=${2:-../shared/fixtures}
if [ ! -d "$fixtures" ]; then
  echo "demo: fixtures folder '$fixtures' not found (set RLCPP_FIXTURES)" >&2
  exit 2
fi
"$rlcpp" --version
for dir in "$fixtures"/*/; do
  [ -f "$dir/config.json" ] || continue
  echo
  "$rlcpp" info "$dir"
  for dtype in float32 bfloat16; do
    "$rlcpp" parity "$dir" --dtype "$dtype"
  done
done
