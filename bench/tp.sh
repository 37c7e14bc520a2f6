#!/usr/bin/env bash
# bench/tp: per-rank peak RSS, step time (with its generate / train split) and the communication
# volume per step of GRPO steps at tensor-parallel sizes 1 and 2, colocated (one process, or
# `mpirun -np 2 rlcpp train --train-tp 2`: both ranks generate and train), full-parameter fp32, on
# a Qwen2.5-0.5B-shaped random model with the real Qwen tokenizer and GSM8K prompts. Every layout
# gets the same cores: one process with all of them, or each rank an equal share.
#   bench/tp.sh [RLCPP_BINARY]
# Env: SIZES ("1 2"), STEPS (3), G (4), TBS (2), MNT (32), TMBS (4), LAYERS (24), MPIEXEC (mpirun).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
rlcpp=$(realpath "${1:-$src/build/rlcpp}")
sizes=${SIZES:-1 2} steps=${STEPS:-3} g=${G:-4} tbs=${TBS:-2} mnt=${MNT:-32} tmbs=${TMBS:-4} layers=${LAYERS:-24}
mpiexec=${MPIEXEC:-mpirun}
tokenizer="$src/tests/data/tokenizers/qwen3"  # the real Qwen tokenizer
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$src/bench/qwen_shape.sh"
qwen_shape_model "$rlcpp" "$work/model" "$tokenizer" 896 4864 "$layers" 14 2 > /dev/null
head -n $((steps * tbs)) "$src/examples/gsm8k/train.jsonl" > "$work/data.jsonl"
cores=$(nproc)
echo "rlcpp train --train-tp N (colocated): $layers layers, $steps steps of $tbs prompts x $g samples, max $mnt new tokens," \
     "micro-batch $tmbs, $cores cores"
printf '%-4s %9s %10s %8s %22s %16s\n' tp "step s" "generate s" "train s" "peak RSS rank 0 / rest" "MB moved/step"
for tp in $sizes; do
  threads=$(( cores / tp > 0 ? cores / tp : 1 ))
  args=(train -m "$work/model" -d "$work/data.jsonl" -g "$g" -tbs "$tbs" -tMbs "$tbs" -tmbs "$tmbs" --mnt "$mnt"
        --max-steps "$steps" --kv-cache-mb 256 --kl 0 -lr 1e-6 -sd "$work/runs" -p "tp$tp" --skip-memory-check)
  if [ "$tp" = 1 ]; then
    /usr/bin/time -f %M -o "$work/rss.0" "$rlcpp" "${args[@]}" > "$work/log.$tp" 2>&1 || { echo "tp $tp failed"; tail -3 "$work/log.$tp"; continue; }
  else
    # Each rank's peak RSS into rss.<rank> (GNU time).
    "$mpiexec" --oversubscribe -np "$tp" -x OMP_NUM_THREADS="$threads" -x RLCPP_KERNEL_THREADS="$threads" sh -c \
      'exec /usr/bin/time -f %M -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@"' "$work" "$rlcpp" "${args[@]}" --train-tp "$tp" \
      > "$work/log.$tp" 2>&1 || { echo "tp $tp failed:"; grep -E "error|Killed|signal" "$work/log.$tp" | head -5 || true; continue; }
  fi
  python3 - "$work" "$tp" <<'PY'
import json, sys
work, tp = sys.argv[1], int(sys.argv[2])
rows = [r for r in map(json.loads, open(f"{work}/runs/tp{tp}/metrics.jsonl")) if "step" in r]
later = rows[1:] or rows
mean = lambda key: sum(r["time"][key] for r in later) / len(later)
moved = sum(r.get("communication", {}).get("bytes", 0) for r in later) / len(later) / 1e6
rss = [int(open(f"{work}/rss.{r}").read().split()[-1]) / 1024 for r in range(tp)]
rest = f"{max(rss[1:]):6.0f}" if tp > 1 else "     -"
print(f"{tp:<4} {mean('total'):9.1f} {mean('generate'):10.1f} {mean('train'):8.1f} {rss[0]:9.0f} / {rest} MiB {moved:16.1f}")
if tp > 1:
    kinds = {k: sum(r["communication"].get(k, 0) for r in later) / len(later) / 1e6 for k in later[0]["communication"] if k != "bytes"}
    print("     rank 0 per step: " + ", ".join(f"{k} {v:.1f} MB" for k, v in kinds.items() if v > 0))
PY
  rm -rf "$work/runs/tp$tp" "$work"/rss.*  # a 0.5B checkpoint with its optimizer state is 6 GB
done
