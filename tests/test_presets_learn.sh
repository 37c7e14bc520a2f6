#!/usr/bin/env bash
# Every algorithm preset learns on the bundled default (models/arith-tiny on examples/arith): 10
# steps of 8 prompts x 8 samples each, and the mean training reward of the last 3 steps must exceed
# that of the first 3. Prints each preset's reward curve. Usage: test_presets_learn.sh RLCPP_BINARY SOURCE_DIR
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_presets_learn.sh RLCPP_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: test_presets_learn.sh RLCPP_BINARY SOURCE_DIR}")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failed=0
for algo in ${PRESETS:-GRPO DAPO DR_GRPO RLOO REINFORCE_PPB GSPO}; do
  "$rlcpp" train -m "$src/models/arith-tiny" -d "$src/examples/arith/train.jsonl" -a "$algo" -g 8 -tbs 8 -tMbs 8 \
    -tmbs 64 -temp 1.0 --mnt 32 -lr 1e-4 --max-steps 10 --log-interval 10 -sd "$tmp/runs" -p "$algo" \
    > "$tmp/$algo.log" 2>&1 || { echo "FAIL $algo: the run failed"; tail -5 "$tmp/$algo.log"; failed=1; continue; }
  python3 - "$algo" "$tmp/runs/$algo/metrics.jsonl" <<'PY' || failed=1
import json, sys
algo, rows = sys.argv[1], [r for r in map(json.loads, open(sys.argv[2])) if "step" in r]  # the status line aside
rewards = [r["reward_mean"] for r in rows]
first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
curve = " ".join(f"{x:.2f}" for x in rewards)
ok = len(rows) == 10 and last > first
print(f"{'ok  ' if ok else 'FAIL'} {algo:14s} reward first 3 {first:.3f} -> last 3 {last:.3f}   [{curve}]")
sys.exit(0 if ok else 1)
PY
done
exit $failed
