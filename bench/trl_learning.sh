#!/usr/bin/env bash
# bench/trl_learning.sh: does rlcpp's GRPO learn as TRL's does? The bundled arith task (`make demo`'s):
# GRPO from models/arith-tiny on examples/arith/train.jsonl for the same number of steps, with the
# same group size, batch, micro-batch, new tokens, learning rate, loss aggregation and KL, by
# `rlcpp train` and by TRL's GRPOTrainer (bench/anchors/trl_grpo_step.py learn, the pinned trl of
# bench/anchors/requirements.txt); then greedy held-out accuracy on the first EVAL_LIMIT problems of
# examples/arith/test.jsonl, before and after, each side with its own generator (`rlcpp eval
# --greedy`, transformers' generate). Also the mean time per step and each process's peak RSS.
#   bash bench/trl_learning.sh [RLCPP_BINARY]
# Env: LEARN_STEPS (60), LEARN_G (8), LEARN_TBS (16), LEARN_TMBS (128), LEARN_MNT (32), LEARN_LR (5e-5),
# LEARN_KL (0.01: the GRPO preset's), EVAL_LIMIT (100), EVAL_MNT (32), SEED (0): the demo's settings
# (scripts/demo.sh) by default, on every core.
# RATIOS=FILE appends bench/all.sh's rows. Exit 2 when something to run it with is missing.
# Both sides sample at temperature 1 and are seeded, but not alike: the accuracies of one run are
# one draw each; the before figures should agree (same weights, greedy), the after figures are
# what to compare.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
rlcpp=$(realpath "${1:-$src/build/rlcpp}")
steps=${LEARN_STEPS:-60} g=${LEARN_G:-8} tbs=${LEARN_TBS:-16} tmbs=${LEARN_TMBS:-128} mnt=${LEARN_MNT:-32}
lr=${LEARN_LR:-5e-5} kl=${LEARN_KL:-0.01}
limit=${EVAL_LIMIT:-100} eval_mnt=${EVAL_MNT:-32} seed=${SEED:-0}
[ "$tmbs" -gt $((g * tbs)) ] && tmbs=$((g * tbs))
model=$src/models/arith-tiny train=$src/examples/arith/train.jsonl test=$src/examples/arith/test.jsonl
[ -x "$rlcpp" ] || { echo "bench/trl_learning.sh: $rlcpp is missing: make build" >&2; exit 2; }
py=$(bash "$src/bench/anchors/install.sh") || exit 2
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
timer=(); [ -x /usr/bin/time ] && timer=(/usr/bin/time -v)
echo "arith GRPO from models/arith-tiny: $steps steps of $tbs prompts x $g samples, micro-batch $tmbs, max $mnt new" \
  "tokens, lr $lr, KL $kl, loss sample_level (TRL: grpo); held-out: first $limit of test.jsonl, greedy, $eval_mnt new tokens"

evaluate() {  # MODEL_DIR: rlcpp's greedy held-out summary (JSON)
  "$rlcpp" eval -m "$1" -d "$test" --greedy --mnt "$eval_mnt" --limit "$limit" --json 2>/dev/null
}
echo; echo "== rlcpp"
before=$(evaluate "$model"); echo "held-out before: $before"
"${timer[@]}" "$rlcpp" train -m "$model" -d "$train" -a GRPO -g "$g" -tbs "$tbs" -tMbs "$tbs" -tmbs "$tmbs" -temp 1.0 \
  --mnt "$mnt" -lr "$lr" -kl "$kl" --loss-variation sample_level --seed "$seed" --max-steps "$steps" --si "$steps" \
  -sd "$work/runs" -p learn 2> "$work/log" || { tail -20 "$work/log"; exit 1; }
grep -E "step [0-9]+/" "$work/log" | sed 's/^\[[^]]*\] //' | tail -3
after=$(evaluate "$work/runs/learn/$(cat "$work/runs/learn/latest")"); echo "held-out after:  $after"
rss=$(grep 'Maximum resident' "$work/log" | awk '{print $NF}' || true)

echo; echo "== TRL"
"$py" "$src/bench/anchors/trl_grpo_step.py" learn --model "$model" --prompts "$train" --test "$test" \
  --steps "$steps" --group "$g" --tbs "$tbs" --tmbs "$tmbs" --mnt "$mnt" --lr "$lr" --beta "$kl" --loss-type grpo \
  --seed "$seed" --eval-limit "$limit" --eval-mnt "$eval_mnt" --json "$work/trl.json" | grep -v '^{'

python3 - "$before" "$after" "$work/runs/learn/metrics.jsonl" "$work/trl.json" "${rss:-0}" "${RATIOS:-}" <<'PY'
import json, sys
before, after, trl = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.load(open(sys.argv[4]))
rows = [r for r in map(json.loads, open(sys.argv[3])) if "step" in r]
later = rows[1:] or rows
ours_step = sum(r["time"]["total"] for r in later) / len(later)
ours_rss, ratios = int(sys.argv[5]) / 1024, sys.argv[6]
theirs_step = trl["mean"]["total"]
curve = lambda values: "  ".join(f"{i + 1}:{v:.2f}" for i, v in enumerate(values) if i == 0 or (i + 1) % 10 == 0 or i + 1 == len(values))
print(f"\narith GRPO, {len(rows)} steps, held-out {after['prompts']} prompts (greedy)   {'rlcpp':>10} {'TRL':>10}")
print(f"  {'accuracy before':44s} {100 * before['accuracy']:9.1f}% {100 * trl['before']['accuracy']:9.1f}%")
print(f"  {'accuracy after':44s} {100 * after['accuracy']:9.1f}% {100 * trl['after']['accuracy']:9.1f}%")
print(f"  {'mean response length after':44s} {after['response_length_mean']:10.1f} {trl['after']['response_length_mean']:10.1f}")
print(f"  {'time per step (mean after the first)':44s} {ours_step:9.2f}s {theirs_step:9.2f}s")
if ours_rss:
    print(f"  {'peak RSS':44s} {ours_rss:7.0f} MiB {trl['peak_rss_mib']:6.0f} MiB")
print(f"  training reward rlcpp  {curve([r['reward_mean'] for r in rows])}")
print(f"  training reward TRL    {curve(trl['reward_curve'])}")
if ratios:  # bench/all.sh's rows: benchmark, measure, anchor, rlcpp, anchor figure, unit
    with open(ratios, "a") as f:
        f.write(f"arith GRPO vs TRL\taccuracy before (greedy)\tTRL {trl['trl']}\t{before['accuracy']}\t{trl['before']['accuracy']}\tacc\n")
        f.write(f"arith GRPO vs TRL\taccuracy after {len(rows)} steps\tTRL {trl['trl']}\t{after['accuracy']}\t{trl['after']['accuracy']}\tacc\n")
        f.write(f"arith GRPO vs TRL\ttime per step\tTRL {trl['trl']}\t{ours_step}\t{theirs_step}\ts\n")
        if ours_rss:
            f.write(f"arith GRPO vs TRL\tpeak RSS\tTRL {trl['trl']}\t{ours_rss}\t{trl['peak_rss_mib']}\tMiB\n")
PY
