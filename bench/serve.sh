#!/usr/bin/env bash
# bench/serve: rlcpp serve's throughput at 1, 8 and 64 concurrent clients against the engine's own
# on the same workload, and the time of an adapter push and a full-weight reload while serving, on
# a Qwen2.5-0.5B-shaped random model (fp32) with the real Qwen tokenizer (bench_serve does the work).
#   bench/serve.sh [BUILD_DIR]
# Env: LAYERS (24), CLIENTS (1,8,64), PROMPT (64), NEW (32), ROUNDS (2), STREAM (0).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:-$src/build}")
layers=${LAYERS:-24}
tokenizer="$src/tests/data/tokenizers/qwen3"  # the real Qwen tokenizer
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$src/bench/qwen_shape.sh"
qwen_shape_model "$build/rlcpp" "$work/model" "$tokenizer" 896 4864 "$layers" 14 2 > /dev/null
stream=(); [ "${STREAM:-0}" = 1 ] && stream=(--stream)
"$build/bench/bench_serve" --model "$work/model" --clients "${CLIENTS:-1,8,64}" --prompt-tokens "${PROMPT:-64}" \
  --new-tokens "${NEW:-32}" --rounds "${ROUNDS:-2}" "${stream[@]}"
