#!/usr/bin/env bash
# `make demo-tools`: multi-turn GRPO with a calculator on the bundled tool-use task, on CPU.
# The bundled model (models/tools-tiny, made by examples/tools/recipe.sh) was fine-tuned on
# products ("What is 417 * 86?") from a teacher that calls the calculator only sometimes and
# otherwise writes the product at once, which the tiny model cannot compute. GRPO on the training
# split (--tools calculator: each call's answer is inserted as a tool turn, never trained; -rt boxed
# grades the last turn) teaches it that calling pays. The held-out split is evaluated before and
# after: accuracy, the share of answers that called the tool, and the token-exactness check.
# Env: DEMO_STEPS (80), DEMO_EVAL_LIMIT (0: all 400 prompts), DEMO_RUNS (runs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rlcpp=$(realpath "${1:?usage: demo_tools.sh RLCPP_BINARY}")
steps=${DEMO_STEPS:-80} limit=${DEMO_EVAL_LIMIT:-0} runs=${DEMO_RUNS:-runs}
model="$root/models/tools-tiny" train="$root/examples/tools/train.jsonl" test="$root/examples/tools/test.jsonl"
project="demo-tools-$(date +%Y%m%d-%H%M%S)"
start=$(date +%s)
"$rlcpp" --version
evaluate() {  # evaluate MODEL_DIR: held-out accuracy and tool use at temperature 0.6
  "$rlcpp" eval -m "$1" -d "$test" -rt boxed --tools calculator --max-turns 3 --temperature 0.6 --mnt 64 \
    --limit "$limit" --json 2>/dev/null
}
echo; echo "== before: the bundled model on the held-out split"
before=$(evaluate "$model"); echo "$before"
echo; echo "== GRPO with --tools calculator -rt boxed on $train ($steps steps of 16 prompts x 8 episodes)"
run_dir="$runs/$project"
"$rlcpp" train -m "$model" -d "$train" -rt boxed --tools calculator --max-turns 3 -a GRPO -g 8 -tbs 16 -tMbs 16 \
  -tmbs 128 -temp 1.0 --mnt 64 -lr 1e-4 --max-steps "$steps" --si "$steps" --log-interval 5 -sd "$runs" -p "$project" \
  -rsd "$run_dir/rollouts" --rollout-save-interval 5 2>&1 | grep -E "step [0-9]+/|checkpoint|done" \
  | sed 's/^\[[^]]*\] //'

echo; echo "== after: the trained policy ($run_dir/$(cat "$run_dir/latest")) on the held-out split"
after=$(evaluate "$run_dir/$(cat "$run_dir/latest")"); echo "$after"
python3 - "$before" "$after" "$run_dir/metrics.jsonl" "$(( $(date +%s) - start ))" "$run_dir" <<'PY'
import json, sys
before, after = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rows = [r for r in map(json.loads, open(sys.argv[3])) if "step" in r]  # the run's status line aside
print(f"\n{'held-out (' + str(before['prompts']) + ' prompts)':28s}{'before':>10s}{'after':>10s}")
print(f"{'accuracy':28s}{100 * before['accuracy']:9.1f}%{100 * after['accuracy']:9.1f}%")
print(f"{'answers calling the tool':28s}{100 * before['tool_call_rate']:9.1f}%{100 * after['tool_call_rate']:9.1f}%")
print(f"{'turns per answer':28s}{before['turns_mean']:10.2f}{after['turns_mean']:10.2f}")
print(f"{'tito mismatches':28s}{before['tito_mismatch']:10d}{after['tito_mismatch']:10d}")
curve = "  ".join(f"{r['step']}:{r['reward_mean']:.2f}/{r['tool_calls']:.2f}" for r in rows if r["step"] == 1 or r["step"] % 5 == 0)
print(f"\ntraining (step:reward/tool calls per episode)  {curve}")
mismatch = sum(r.get("tito_mismatch", 0) for r in rows)
print(f"tito_mismatch over the training rollouts: {mismatch}")
print(f"wall time {sys.argv[4]} s; run directory {sys.argv[5]} (metrics.jsonl, TensorBoard events, rollouts/, step-*/)")
PY
"$rlcpp" report "$run_dir" > /dev/null && echo "report of the run: $run_dir/report.html (open it in a browser)"
