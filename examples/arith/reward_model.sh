#!/usr/bin/env bash
# The classic RLHF pipeline on the bundled task, with nothing checkable at training time:
#   1. rlcpp train-rm learns a reward model from preference pairs (pairs.jsonl: the right worked
#      solution preferred over one with a mistake: the forgotten carry, a slipped digit, a wrong
#      boxed answer), from the bundled model with a fresh score head; its held-out pair accuracy is
#      printed (pairs_test.jsonl).
#   2. GRPO and PPO train the bundled model with that reward model as their only reward (-rt
#      model; PPO's critic starts from the reward model), and, in the same script for comparison,
#      GRPO with the rule reward (-rt boxed, the right answer), all with the KL penalty --kl (0.5):
#      the reward model is imperfect, and a policy let far from the reference finds what it misses
#      (at the preset's 0.01 it writes the carry over wrong digits).
#   3. The policies are evaluated on the held-out prompts (test.jsonl) by the rule grader, before
#      training and at every third of it: a learning curve of each on the same scale.
# Usage: examples/arith/reward_model.sh [RLCPP_BINARY] [RUNS_DIR]
# Env: RM_STEPS (250), STEPS (60), KL (0.5), CRITIC_LR (1e-4: PPO's critic), EVAL_LIMIT (0: all 400
# held-out prompts).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rlcpp=$(realpath "${1:-$here/../../build/rlcpp}")
runs=$(realpath -m "${2:-runs}")
rm_steps=${RM_STEPS:-250} steps=${STEPS:-60} kl=${KL:-0.5} critic_lr=${CRITIC_LR:-1e-4} limit=${EVAL_LIMIT:-0}
model="$here/../../models/arith-tiny"
echo "== 1. reward model: rlcpp train-rm on $here/pairs.jsonl ($rm_steps steps of 32 pairs)"
"$rlcpp" train-rm -m "$model" -d "$here/pairs.jsonl" -ed "$here/pairs_test.jsonl" -ei $(( rm_steps >= 50 ? rm_steps / 5 : rm_steps )) \
  -tbs 32 -lr 1e-3 --lr-schedule cosine --warmup-steps $(( rm_steps / 10 )) --max-steps "$rm_steps" --seed 0 \
  -sd "$runs" -p rm --log-interval $(( rm_steps >= 50 ? rm_steps / 5 : 1 )) 2>&1 | grep -E "step [0-9]+/|done" | sed 's/^\[[^]]*\] //'
rm_dir="$runs/rm/$(cat "$runs/rm/latest")"
python3 - "$runs/rm/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
evals = [(r["step"], r["eval"]["eval"]["accuracy"]) for r in rows if "eval" in r]
print("held-out pair accuracy (step:accuracy)  " + "  ".join(f"{s}:{a:.3f}" for s, a in evals))
PY
evaluate() {  # evaluate MODEL_DIR: held-out accuracy by the rule grader
  "$rlcpp" eval -m "$1" -d "$here/test.jsonl" --temperature 0.6 --mnt 32 --limit "$limit" --json 2>/dev/null \
    | python3 -c 'import json, sys; print("%.1f" % (100 * json.load(sys.stdin)["accuracy"]))'
}
echo; echo "== 2. GRPO and PPO on $here/train.jsonl ($steps steps of 16 prompts x 8 samples, --kl $kl), by reward"
si=$(( steps >= 3 ? steps / 3 : steps ))  # checkpoints for the held-out curve
declare -A curve
before=$(evaluate "$model")
for run in grpo-model ppo-model grpo-boxed; do
  algo=${run%%-*} reward=${run#*-}
  flags=(-rt boxed)
  [ "$reward" = model ] && flags=(-rt model --reward-model "$rm_dir")
  [ "$algo" = ppo ] && flags+=(--critic-lr "$critic_lr")
  "$rlcpp" train -m "$model" -d "$here/train.jsonl" -a "${algo^^}" "${flags[@]}" --kl "$kl" -g 8 -tbs 16 -tMbs 16 -tmbs 128 -temp 1.0 \
    --mnt 32 -lr 5e-5 --max-steps "$steps" --si "$si" --seed 0 -sd "$runs" -p "$run" --log-interval $(( steps >= 10 ? steps / 5 : 1 )) 2>&1 \
    | grep -E "step [0-9]+/" | sed 's/^\[[^]]*\] //'
  curve[$run]="$before%"
  for (( step = si; step <= steps; step += si )); do curve[$run]+=" $(evaluate "$runs/$run/step-$step")%"; done
done
echo; echo "== 3. held-out accuracy (rule grader, $( [ "$limit" -gt 0 ] && echo "$limit" || echo 400 ) prompts) by step"
header="step"
for (( step = 0; step <= steps; step += si )); do header+=" $step"; done
printf '%-34s%s\n' "" "$header" "GRPO, reward model (-rt model)" "${curve[grpo-model]}" \
  "PPO, reward model (-rt model)" "${curve[ppo-model]}" "GRPO, rule reward (-rt boxed)" "${curve[grpo-boxed]}"
