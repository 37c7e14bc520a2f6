#!/usr/bin/env bash
# `make demo-code`: GRPO with a code reward on the bundled code task, on CPU in a few minutes.
# The bundled model (models/code-tiny, made by examples/code/recipe.sh) was fine-tuned on one-line
# Python functions from a teacher that forgets parentheses; GRPO on the training split, rewarded
# only when the program passes its tests in the sandbox (-rt code), teaches it not to. The held-out
# split is evaluated before and after (pass@1, and pass@k over k samples per prompt).
# Env: DEMO_STEPS (40), DEMO_EVAL_LIMIT (0: all 400 prompts), DEMO_EVAL_K (4), DEMO_RUNS (runs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rlcpp=$(realpath "${1:?usage: demo_code.sh RLCPP_BINARY}")
steps=${DEMO_STEPS:-40} limit=${DEMO_EVAL_LIMIT:-0} k=${DEMO_EVAL_K:-4} runs=${DEMO_RUNS:-runs}
model="$root/models/code-tiny" train="$root/examples/code/train.jsonl" test="$root/examples/code/test.jsonl"
project="demo-code-$(date +%Y%m%d-%H%M%S)"
start=$(date +%s)
"$rlcpp" --version
"$rlcpp" info --system | grep sandbox
evaluate() {  # evaluate MODEL_DIR: held-out pass@1 and pass@k at temperature 0.6
  "$rlcpp" eval -m "$1" -d "$test" -rt code --temperature 0.6 --mnt 48 --eval-n "$k" --limit "$limit" --json 2>/dev/null
}
echo; echo "== before: the bundled model on the held-out split"
before=$(evaluate "$model"); echo "$before"
echo; echo "== GRPO with -rt code on $train ($steps steps of 16 prompts x 8 programs, each run against its tests)"
run_dir="$runs/$project"
"$rlcpp" train -m "$model" -d "$train" -rt code -a GRPO -g 8 -tbs 16 -tMbs 16 -tmbs 128 -temp 1.0 --mnt 48 -lr 5e-5 \
  --max-steps "$steps" --si 20 --log-interval 10 -sd "$runs" -p "$project" \
  -rsd "$run_dir/rollouts" --rollout-save-interval $(( steps >= 10 ? 5 : 1 )) 2>&1 | grep -E "step [0-9]+/|checkpoint|done" \
  | sed 's/^\[[^]]*\] //'

echo; echo "== after: the trained policy ($run_dir/$(cat "$run_dir/latest")) on the held-out split"
after=$(evaluate "$run_dir/$(cat "$run_dir/latest")"); echo "$after"
python3 - "$before" "$after" "$run_dir/metrics.jsonl" "$(( $(date +%s) - start ))" "$run_dir" "$k" <<'PY'
import json, sys
before, after = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rows = [r for r in map(json.loads, open(sys.argv[3])) if "step" in r]  # the run's status line aside
k = sys.argv[6]
print(f"\n{'held-out (' + str(before['prompts']) + ' prompts)':28s}{'before':>10s}{'after':>10s}")
print(f"{'pass@1':28s}{100 * before['accuracy']:9.1f}%{100 * after['accuracy']:9.1f}%")
print(f"{'pass@' + k:28s}{100 * before['pass_at_n']:9.1f}%{100 * after['pass_at_n']:9.1f}%")
print(f"{'mean response length':28s}{before['response_length_mean']:10.1f}{after['response_length_mean']:10.1f}")
curve = "  ".join(f"{r['step']}:{r['reward_mean']:.2f}" for r in rows if r["step"] == 1 or r["step"] % 5 == 0)
print(f"\ntraining reward (step:mean)  {curve}")
first, last = rows[0].get("reward_reasons", {}), rows[-1].get("reward_reasons", {})
print(f"reasons at step 1: {first}\nreasons at step {rows[-1]['step']}: {last}")
print(f"wall time {sys.argv[4]} s; run directory {sys.argv[5]} (metrics.jsonl, TensorBoard events, config.yaml, step-*/)")
PY
"$rlcpp" report "$run_dir" > /dev/null && echo "report of the run: $run_dir/report.html (open it in a browser)"
