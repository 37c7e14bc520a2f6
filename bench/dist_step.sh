#!/usr/bin/env bash
# bench/dist_step: step time of the distributed mode against the colocated one on the demo's task
# (models/arith-tiny, examples/arith, GRPO, 16 prompts x 8 samples per step): colocated in one
# process, `-t 1 -i 1` (generation and training take turns) and `-t 1 -i 1 -nb 1` (the next round
# is generated while the trainer trains). Prints the mean step time over the steps after the first.
#   bench/dist_step.sh [RLCPP_BINARY]      Env: STEPS (8)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
rlcpp=$(realpath "${1:-$src/build/rlcpp}")
steps=${STEPS:-8}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(-m "$src/models/arith-tiny" -d "$src/examples/arith/train.jsonl" -a GRPO -g 8 -tbs 16 -tMbs 16 -tmbs 128
      -temp 1.0 --mnt 32 -lr 5e-5 --max-steps "$steps" -sd "$work/runs")
report() {  # report NAME: mean seconds per step (after the first) and its split, from metrics.jsonl
  python3 - "$1" "$work/runs/$1/metrics.jsonl" <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[2])) if "step" in r][1:]
mean = lambda k: sum(r["time"].get(k, 0.0) for r in rows) / len(rows)
split = "  ".join(f"{k} {mean(k):.2f}" for k in ("generate", "reward", "wait", "logprobs", "train", "sync") if k in rows[0]["time"])
print(f"{sys.argv[1]:22s} {mean('total'):6.2f} s/step   ({split})")
PY
}
echo "rlcpp train on the arith task: $steps steps of 16 prompts x 8 samples, max 32 new tokens, $(nproc) cores"
"$rlcpp" train "${args[@]}" -p colocated > "$work/colocated.log" 2>&1 && report colocated
mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$rlcpp" train "${args[@]}" -t 1 -i 1 -p t1i1 > "$work/t1i1.log" 2>&1 \
  && report t1i1
mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$rlcpp" train "${args[@]}" -t 1 -i 1 -nb 1 -p t1i1-nb1 \
  > "$work/nb1.log" 2>&1 && report t1i1-nb1
