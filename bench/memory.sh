#!/usr/bin/env bash
# bench/memory: peak RSS and seconds per step of `rlcpp train` runs that full fine-tuning cannot
# fit, on Qwen2.5-shaped random models (0.5B, 1.5B, 3B) with the real Qwen tokenizer and GSM8K
# prompts, next to the memory preflight's estimate (--dry-run) of each. The sft-* configurations
# time the training step alone on one long sequence (the table's long-response rows, whose
# generation takes hours on 2 cores).
#   bench/memory.sh [RLCPP_BINARY] [CONFIG ...]      CONFIG: a name below (default: all)
# Env: STEPS (2), MODELS (where the random models are kept between runs; default a temp dir).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
rlcpp=$(realpath "${1:-$src/build/rlcpp}"); shift || true
steps=${STEPS:-2}
tokenizer="$src/tests/data/tokenizers/qwen3"  # the real Qwen tokenizer
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
models=${MODELS:-$work/models}; mkdir -p "$models"

source "$src/bench/qwen_shape.sh"
shape() {  # NAME HIDDEN INTERMEDIATE LAYERS HEADS KV_HEADS
  local dir="$models/$1"
  [ -f "$dir/config.json" ] && return
  qwen_shape_model "$rlcpp" "$dir" "$tokenizer" "$2" "$3" "$4" "$5" "$6" > /dev/null
}

head -n 16 "$src/examples/gsm8k/train.jsonl" > "$work/data.jsonl"
common=(-d "$work/data.jsonl" -a GRPO -lr 1e-5 --max-steps "$steps" -sd "$work/runs" --log-interval 1)
table=(2 8 64)  # prompts, G, new tokens of the issue's table

run() {  # NAME MODEL PROMPTS G MNT TMBS FLAGS...
  local name=$1 model=$2 prompts=$3 g=$4 mnt=$5 tmbs=$6; shift 6
  local args=(-m "$models/$model" "${common[@]}" -g "$g" -tbs "$prompts" -tMbs "$prompts" -tmbs "$tmbs" --mnt "$mnt" \
              -p "$name" "$@")
  local estimate
  estimate=$("$rlcpp" train "${args[@]}" --dry-run | awk '/^  total \(peak/ {print $4}')
  if ! /usr/bin/time -v "$rlcpp" train "${args[@]}" --skip-memory-check > "$work/$name.log" 2>&1; then
    printf '%-34s FAILED (see below)\n' "$name"; tail -5 "$work/$name.log"; return
  fi
  local rss; rss=$(awk '/Maximum resident/ {print $NF}' "$work/$name.log")
  python3 - "$name" "$work/runs/$name/metrics.jsonl" "$rss" "$estimate" <<'PY'
import json, sys
name, path, rss, est = sys.argv[1], sys.argv[2], int(sys.argv[3]) / 1024**2, float(sys.argv[4])
rows = [r for r in map(json.loads, open(path)) if "step" in r]
later = rows[1:] or rows
step = sum(r["time"]["total"] for r in later) / len(later)
print(f"{name:34s} peak RSS {rss:6.2f} GiB   estimate {est:6.2f} GiB ({100 * (est - rss) / rss:+5.1f} %)   {step:7.1f} s/step")
PY
}

# The training step alone on one sequence of TOKENS: `rlcpp sft` on one chat whose answer is
# TOKENS words (" the" is one Qwen token), without the hours 2 cores need to generate that many.
run_sft() {  # NAME MODEL TOKENS FLAGS...
  local name=$1 model=$2 tokens=$3; shift 3
  python3 - "$tokens" > "$work/$name.jsonl" <<'PY'
import json, sys
n = int(sys.argv[1])
print(json.dumps({"messages": [{"role": "user", "content": "Count."}, {"role": "assistant", "content": "the" + " the" * (n - 1)}]}))
PY
  if ! /usr/bin/time -v "$rlcpp" sft -m "$models/$model" -d "$work/$name.jsonl" -tbs 1 --max-steps "$steps" -sd "$work/runs" \
       -p "$name" -lr 1e-5 "$@" > "$work/$name.log" 2>&1; then
    printf '%-34s FAILED (see below)\n' "$name"; tail -5 "$work/$name.log"; return
  fi
  local rss; rss=$(awk '/Maximum resident/ {print $NF}' "$work/$name.log")
  python3 - "$name" "$work/runs/$name/metrics.jsonl" "$rss" <<'PY'
import json, sys
name, path, rss = sys.argv[1], sys.argv[2], int(sys.argv[3]) / 1024**2
rows = [r for r in map(json.loads, open(path)) if "step" in r]
step = sum(r["time"]["total"] for r in rows) / len(rows)
print(f"{name:34s} peak RSS {rss:6.2f} GiB   {rows[0]['tokens']:.0f} learned tokens   {step:7.1f} s/step (sft)")
PY
}

configs=("$@"); [ ${#configs[@]} -eq 0 ] && configs=(full-0.5b lora-0.5b lora-1.5b lora-3b-bf16 long-full-0.5b long-lora-0.5b)
echo "rlcpp train, $steps steps each, GSM8K prompts, $(nproc) cores; s/step is the mean after the first step"
for c in "${configs[@]}"; do
  case $c in
    full-0.5b)      shape q0.5b 896 4864 24 14 2;  run $c q0.5b "${table[@]}" 8 --kl 0.04 ;;
    lora-0.5b)      shape q0.5b 896 4864 24 14 2;  run $c q0.5b "${table[@]}" 8 --kl 0.04 --lora-rank 16 --lora-alpha 32 ;;
    lora-1.5b)      shape q1.5b 1536 8960 28 12 2; run $c q1.5b "${table[@]}" 8 --kl 0.04 --lora-rank 16 --lora-alpha 32 ;;
    lora-1.5b-ckpt) shape q1.5b 1536 8960 28 12 2; run $c q1.5b "${table[@]}" 2 --kl 0.04 --lora-rank 16 --lora-alpha 32 \
                      --gradient-checkpointing --kv-cache-mb 256 ;;
    lora-3b-bf16)   shape q3b 2048 11008 36 16 2;  run $c q3b "${table[@]}" 8 --kl 0.04 --lora-rank 16 --lora-alpha 32 --frozen-dtype bf16 ;;
    lora-3b-bf16-ckpt) shape q3b 2048 11008 36 16 2; run $c q3b "${table[@]}" 2 --kl 0.04 --lora-rank 16 --lora-alpha 32 \
                      --frozen-dtype bf16 --gradient-checkpointing --kv-cache-mb 256 ;;
    long-full-0.5b) shape q0.5b 896 4864 24 14 2;  run $c q0.5b 1 2 4096 1 --gradient-checkpointing ;;
    long-lora-0.5b) shape q0.5b 896 4864 24 14 2;  run $c q0.5b 1 2 8192 1 --lora-rank 16 --lora-alpha 32 --gradient-checkpointing ;;
    lora-0.5b-ckpt) shape q0.5b 896 4864 24 14 2;  run $c q0.5b "${table[@]}" 2 --kl 0.04 --lora-rank 16 --lora-alpha 32 \
                      --gradient-checkpointing --kv-cache-mb 256 ;;
    anchor)  # the PyTorch-eager GRPO step (bench/anchors/torch_grpo_step.py): full fine-tune, no reference model
      a="$src/bench/anchors/torch_grpo_step.py"
      py=$(bash "$src/scripts/python_env.sh" --python)
      if "$py" -c "import torch" 2>/dev/null; then
        /usr/bin/time -v "$py" "$a" --prompts 2 --group 8 --new 64 --prompt-len 128 --steps "$steps" > "$work/anchor.log" 2>&1 \
          || { echo "anchor FAILED"; tail -5 "$work/anchor.log"; continue; }
        printf '%-34s peak RSS %6.2f GiB   (PyTorch eager, full fine-tune, prompts of 128 tokens)\n' "anchor" \
          "$(awk '/Maximum resident/ {print $NF / 1024 / 1024}' "$work/anchor.log")"
        grep -v -e '^\s' -e '^Command' "$work/anchor.log" | head -8
      else
        echo "anchor: skipped (torch needed in rlcpp's Python environment: make deps)"
      fi ;;
    sft-4096-full-0.5b)  shape q0.5b 896 4864 24 14 2; run_sft $c q0.5b 4096 --gradient-checkpointing ;;
    sft-4096-nockpt-0.5b) shape q0.5b 896 4864 24 14 2; run_sft $c q0.5b 4096 ;;
    sft-8192-lora-0.5b)  shape q0.5b 896 4864 24 14 2; run_sft $c q0.5b 8192 --lora-rank 16 --lora-alpha 32 --gradient-checkpointing ;;
    *) echo "unknown configuration $c"; exit 2 ;;
  esac
done
