#!/usr/bin/env bash
# `make demo`: rlcpp's main job end to end on the bundled default, on CPU in a few minutes.
# The bundled model (models/arith-tiny, made by examples/arith/recipe.sh) was fine-tuned on worked
# solutions from a teacher that forgets carries and borrows; GRPO on the training split, rewarded
# only for the right \boxed{} answer, teaches it not to. The held-out split is evaluated before and
# after. Env: DEMO_STEPS (60), DEMO_EVAL_LIMIT (0: all 400 prompts), DEMO_RUNS (runs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rlcpp=$(realpath "${1:?usage: demo.sh RLCPP_BINARY}")
steps=${DEMO_STEPS:-60} limit=${DEMO_EVAL_LIMIT:-0} runs=${DEMO_RUNS:-runs}
model="$root/models/arith-tiny" train="$root/examples/arith/train.jsonl" test="$root/examples/arith/test.jsonl"
project="demo-arith-$(date +%Y%m%d-%H%M%S)"
start=$(date +%s)
"$rlcpp" --version
"$rlcpp" info "$model" | head -3
evaluate() {  # evaluate MODEL_DIR: held-out accuracy at the reference's eval temperature (0.6)
  "$rlcpp" eval -m "$1" -d "$test" --temperature 0.6 --mnt 32 --limit "$limit" --json 2>/dev/null
}
echo; echo "== before: the bundled model on the held-out split"
before=$(evaluate "$model"); echo "$before"
echo; echo "== GRPO on $train ($steps steps of 16 prompts x 8 samples)"
# While it trains: held-out accuracy on the first 100 test prompts every 20 steps (-ed, -ei) and
# the rollouts of every 5th step (-rsd), for the report's eval curve and sample rollouts.
run_dir="$runs/$project"
"$rlcpp" train -m "$model" -d "$train" -a GRPO -g 8 -tbs 16 -tMbs 16 -tmbs 128 -temp 1.0 --mnt 32 -lr 5e-5 \
  --max-steps "$steps" --si 20 --log-interval 10 -sd "$runs" -p "$project" \
  -ed "{\"held-out\": \"$test\"}" -ei 20 --eval-limit "$([ "$limit" -gt 0 ] && echo "$limit" || echo 100)" \
  -rsd "$run_dir/rollouts" --rollout-save-interval $(( steps >= 10 ? 5 : 1 )) 2>&1 | grep -E "step [0-9]+/|checkpoint|eval |done" \
  | sed 's/^\[[^]]*\] //'

echo; echo "== after: the trained policy ($run_dir/$(cat "$run_dir/latest")) on the held-out split"
after=$(evaluate "$run_dir/$(cat "$run_dir/latest")"); echo "$after"
python3 - "$before" "$after" "$run_dir/metrics.jsonl" "$(( $(date +%s) - start ))" "$run_dir" <<'PY'
import json, sys
before, after = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rows = [r for r in map(json.loads, open(sys.argv[3])) if "step" in r]  # the run's status line aside
print(f"\n{'held-out (' + str(before['prompts']) + ' prompts)':28s}{'before':>10s}{'after':>10s}")
print(f"{'accuracy':28s}{100 * before['accuracy']:9.1f}%{100 * after['accuracy']:9.1f}%")
print(f"{'format accuracy':28s}{100 * before['format_accuracy']:9.1f}%{100 * after['format_accuracy']:9.1f}%")
print(f"{'mean response length':28s}{before['response_length_mean']:10.1f}{after['response_length_mean']:10.1f}")
curve = "  ".join(f"{r['step']}:{r['reward_mean']:.2f}" for r in rows if r["step"] == 1 or r["step"] % 10 == 0)
print(f"\ntraining reward (step:mean)  {curve}")
print(f"wall time {sys.argv[4]} s; run directory {sys.argv[5]} (metrics.jsonl, TensorBoard events, config.yaml, step-*/)")
PY
"$rlcpp" report "$run_dir" > /dev/null && echo "report of the run: $run_dir/report.html (open it in a browser)"
