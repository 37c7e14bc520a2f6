#!/usr/bin/env bash
# bench/rollout_dtype: the demo's task (models/arith-tiny, examples/arith, GRPO, 16 prompts x 8
# samples a step) trained with each --rollout-dtype: the engine generating on fp32, bf16, int8 or
# fp8 weights (8-bit: a scale per output channel) while the trainer stays in fp32. Prints the
# training reward at equal steps, the held-out accuracy after, the rollout/trainer mismatch
# (|dlogp| per token, mean and max over the run) and the wall time. Then the same mismatch on the
# Qwen2.5-0.5B shape (random weights, bench_generate --mismatch) and on the bundled model.
#   bench/rollout_dtype.sh [BUILD_DIR]    Env: STEPS (30), EVAL_LIMIT (200), DTYPES ("float32 bfloat16 int8 fp8")
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:-$src/build}")
rlcpp=$build/rlcpp
steps=${STEPS:-30} limit=${EVAL_LIMIT:-200} dtypes=${DTYPES:-float32 bfloat16 int8 fp8}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
args=(-m "$src/models/arith-tiny" -d "$src/examples/arith/train.jsonl" -a GRPO -g 8 -tbs 16 -tMbs 16 -tmbs 128
      -temp 1.0 --mnt 32 -lr 5e-5 --max-steps "$steps" --si 0 -sd "$work/runs"
      -ed "{\"held-out\": \"$src/examples/arith/test.jsonl\"}" -ei "$steps" --eval-limit "$limit")
echo "GRPO on the arith task, $steps steps of 16 prompts x 8 samples, one process ($(nproc) cores); reward mean by step"
for dtype in $dtypes; do
  start=$(date +%s.%N)
  "$rlcpp" train "${args[@]}" --rollout-dtype "$dtype" -p "$dtype" > "$work/$dtype.log" 2>&1 \
    || { echo "$dtype failed:"; tail -3 "$work/$dtype.log"; continue; }
  python3 - "$dtype" "$work/runs/$dtype/metrics.jsonl" "$(echo "$(date +%s.%N) - $start" | bc)" <<'PY'
import json, sys
name, path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
rows = [r for r in map(json.loads, open(path)) if "step" in r]
every = max(1, len(rows) // 6)
curve = " ".join(f"{r['step']}:{r['reward_mean']:.2f}" for r in rows[every - 1::every])
last5 = sum(r["reward_mean"] for r in rows[-5:]) / min(5, len(rows))
ev = [r["eval"] for r in rows if "eval" in r]
acc = f"{100 * ev[-1]['held-out']['accuracy']:.1f}%" if ev else "-"
mean = sum(r["mismatch_abs_mean"] for r in rows) / len(rows)
top = max(r["mismatch_abs_max"] for r in rows)
print(f"{name:<9} {curve}  last-5 mean {last5:.3f}  held-out {acc}  |dlogp| mean {mean:.2e} max {top:.2e}  {seconds:.0f} s")
PY
done
echo
echo "rollout/trainer |dlogp| per token, 16 sequences of 64 sampled tokens:"
for model in "--shape 0.5b" "--model $src/models/arith-tiny"; do
  echo "  $model"
  for dtype in $dtypes; do
    # shellcheck disable=SC2086
    "$build/bench/bench_generate" $model --rollout-dtype "$dtype" --mismatch 16 --new-tokens 64 --prompt-len 16 | sed 's/^/    /'
  done
done
