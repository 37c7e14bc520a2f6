#!/usr/bin/env bash
# bench/async_learning: the demo's task (models/arith-tiny, examples/arith, GRPO, 16 prompts x 8
# samples a step) trained synchronously (-t 1 -i 1 -nb 0), with the next round generated ahead
# (-nb 1), with partial rollouts (-nb 1 --partial-rollout), and with partial rollouts held to
# --max-staleness 2 both ways (--stale-policy drop: the round ahead starts a version later;
# finish: tokens over the bound kept as context only): the training reward at equal samples
# trained, the held-out accuracy after, the versions behind per token (and the share of tokens
# kept as context only), and the wall time; also streamed prompts (--stream-prompts) and groups
# taken in completion order (--group-order completion).
#   bench/async_learning.sh [RLCPP_BINARY]      Env: STEPS (40), EVAL_LIMIT (200),
#                                               MODES (default "sync nb1 partial k2-drop k2-finish stream complete")
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
rlcpp=$(realpath "${1:-$src/build/rlcpp}")
steps=${STEPS:-40}
limit=${EVAL_LIMIT:-200}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Rounds of 2 steps (-ibs 32 = 2 x -tbs 16): -nb 1 overlaps a round with the two steps before it.
args=(-m "$src/models/arith-tiny" -d "$src/examples/arith/train.jsonl" -a GRPO -g 8 -tbs 16 -ibs 32 -tMbs 16 -tmbs 128
      -temp 1.0 --mnt 32 -lr 5e-5 --max-steps "$steps" --si 0 -sd "$work/runs" -t 1 -i 1
      -ed "{\"held-out\": \"$src/examples/arith/test.jsonl\"}" -ei "$steps" --eval-limit "$limit")
echo "GRPO on the arith task, $steps steps of 16 prompts x 8 samples (-t 1 -i 1, $(nproc) cores); reward mean by step"
declare -A flags_of=([sync]="-nb 0" [nb1]="-nb 1" [partial]="-nb 1 --partial-rollout"
                     [k2-drop]="-nb 1 --partial-rollout --max-staleness 2 --stale-policy drop"
                     [k2-finish]="-nb 1 --partial-rollout --max-staleness 2 --stale-policy finish"
                     [stream]="-nb 1 --partial-rollout --stream-prompts"
                     [complete]="-nb 1 --partial-rollout --stream-prompts --group-order completion")
for name in ${MODES:-sync nb1 partial k2-drop k2-finish stream complete}; do
  flags=${flags_of[$name]:?"unknown mode $name (MODES: ${!flags_of[*]})"}
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$rlcpp" train "${args[@]}" $flags -p "$name" > "$work/$name.log" 2>&1 \
    || { echo "$name failed:"; tail -3 "$work/$name.log"; continue; }
  python3 - "$name" "$work/runs/$name/metrics.jsonl" "$(echo "$(date +%s.%N) - $start" | bc)" <<'PY'
import json, sys
name, path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
rows = [r for r in map(json.loads, open(path)) if "step" in r]
every = max(1, len(rows) // 8)
curve = " ".join(f"{r['step']}:{r['reward_mean']:.2f}" for r in rows[every - 1::every])
last5 = sum(r["reward_mean"] for r in rows[-5:]) / 5
ev = [r["eval"] for r in rows if "eval" in r]
acc = f"  held-out accuracy after {100 * ev[-1]['held-out']['accuracy']:.1f}%" if ev else ""
stale = sum(r["staleness"]["per_token"]["mean"] for r in rows) / len(rows)
masked = sum(r["staleness"].get("masked_tokens", 0) for r in rows)
trained = sum(r["staleness"]["per_token"]["tokens"] for r in rows)
share = f"  context only {100 * masked / (masked + trained):.1f}% of sampled tokens" if masked else ""
print(f"{name:9s} {seconds:6.1f} s  versions behind/token {stale:4.2f}  last-5 reward {last5:.3f}{acc}{share}\n          {curve}")
PY
done
