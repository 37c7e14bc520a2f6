#!/usr/bin/env bash
# bench/zero: per-trainer peak RSS and step time of `mpirun -np T+I rlcpp train -t T -i I` at each
# ZeRO stage, full-parameter fp32, on a Qwen2.5-0.5B-shaped random model with the real Qwen
# tokenizer and GSM8K prompts. Step time is the mean over the steps after the first.
#   bench/zero.sh [RLCPP_BINARY]
# Env: STAGES ("0 1 2 3"), T (2), I (T), STEPS (3), G (4), MNT (32), TMBS (2), LAYERS (24), MPIEXEC (mpirun).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
rlcpp=$(realpath "${1:-$src/build/rlcpp}")
stages=${STAGES:-0 1 2 3} trainers=${T:-2} steps=${STEPS:-3} g=${G:-4} mnt=${MNT:-32} tmbs=${TMBS:-2} layers=${LAYERS:-24}
workers=${I:-$trainers}
mpiexec=${MPIEXEC:-mpirun}
tokenizer="$src/tests/data/tokenizers/qwen3"  # the real Qwen tokenizer
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$src/bench/qwen_shape.sh"
qwen_shape_model "$rlcpp" "$work/model" "$tokenizer" 896 4864 "$layers" 14 2 > /dev/null
head -n $((steps * trainers)) "$src/examples/gsm8k/train.jsonl" > "$work/data.jsonl"
echo "rlcpp train -t $trainers -i $workers: $layers layers, $steps steps of $trainers x 1 prompt x $g samples, max $mnt new tokens, micro-batch $tmbs, $(nproc) cores"
printf '%-6s %10s %14s %14s\n' stage "step s" "trainer RSS" "worker RSS"
for stage in $stages; do
  # Each rank's peak RSS into rss.<rank> (GNU time).
  "$mpiexec" --oversubscribe -np $((trainers + workers)) sh -c \
    'exec /usr/bin/time -f %M -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@"' "$work" \
    "$rlcpp" train -m "$work/model" -d "$work/data.jsonl" -t "$trainers" -i "$workers" -g "$g" -tbs 1 -tMbs 1 -tmbs "$tmbs" \
    --mnt "$mnt" --max-steps "$steps" --kv-cache-mb 256 --kl 0 -lr 1e-6 -zero "$stage" -sd "$work/runs" -p "zero$stage" \
    --skip-memory-check > "$work/log.$stage" 2>&1 || {
      echo "stage $stage failed:"; grep -E "error|Error|Killed|signal" "$work/log.$stage" | head -5 || true; continue; }
  python3 - "$work" "$stage" "$trainers" "$workers" <<'PY'
import json, sys
work, stage, trainers, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [r for r in map(json.loads, open(f"{work}/runs/zero{stage}/metrics.jsonl")) if "step" in r]
later = rows[1:] or rows
step = sum(r["time"]["total"] for r in later) / len(later)
rss = [int(open(f"{work}/rss.{r}").read().split()[-1]) / 1024 for r in range(trainers + workers)]
print(f"{stage:<6} {step:10.1f} {max(rss[:trainers]):11.0f} MiB {max(rss[trainers:]):11.0f} MiB")
PY
  rm -rf "$work/runs/zero$stage"  # a 0.5B checkpoint with its optimizer shards is 6 GB
done
