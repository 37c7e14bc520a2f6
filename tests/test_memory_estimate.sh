#!/usr/bin/env bash
# The memory preflight's estimate (--dry-run) against the measured peak RSS (/usr/bin/time) of one
# training step, on three configurations of a 4-layer Qwen2.5-0.5B-shaped random model (the bundled
# byte-level tokenizer, GSM8K prompts): a full fine-tune with a reference model, LoRA with KL, and
# LoRA with activation checkpointing and a bf16 frozen base. Each must be at most 15% below the
# measured peak (an estimate that errs low lets a run be killed for memory) and at most 25% above it
# (one that errs high refuses a run that would fit; with the torch 2.15 wheel the estimate is 18%
# above the full fine-tune's measured peak). Under --pp the estimate is a stage's,
# below the whole model's.
# Usage: test_memory_estimate.sh RLCPP_BINARY SOURCE_DIR
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_memory_estimate.sh RLCPP_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: test_memory_estimate.sh RLCPP_BINARY SOURCE_DIR}")
source "$(dirname "$0")/lib.sh"
[ -x /usr/bin/time ] || { echo "SKIP: /usr/bin/time (Debian's time package) is not installed"; exit 77; }
cat > shape.json <<'JSON'
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896,
 "intermediate_size": 4864, "num_hidden_layers": 4, "num_attention_heads": 14, "num_key_value_heads": 2,
 "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true,
 "hidden_act": "silu", "eos_token_id": 151645, "bos_token_id": 151643, "torch_dtype": "float32"}
JSON
"$rlcpp" init --config shape.json --tokenizer "$src/models/arith-tiny" --out model --seed 0 > /dev/null || bad init
head -n 8 "$src/examples/gsm8k/train.jsonl" > data.jsonl
# Two steps: AdamW's moments exist from the first update on, so the second step's backward is the
# steady-state peak the estimate is for.
common=(-m model -d data.jsonl -g 4 -tbs 2 -tMbs 2 -tmbs 8 --mnt 64 -mpt 256 --max-steps 2 -sd runs -lr 1e-5 --kv-cache-mb 256)
for cfg in "full-with-reference:--kl 0.04" "lora-kl:--kl 0.04 --lora-rank 16" \
           "lora-checkpointing-bf16:--kl 0 --lora-rank 16 --gradient-checkpointing --frozen-dtype bf16"; do
  name=${cfg%%:*}; read -r -a flags <<< "${cfg#*:}"
  estimate=$("$rlcpp" train "${common[@]}" "${flags[@]}" -p "$name" --dry-run | awk '/^  total \(peak/ {print $4}')
  if ! /usr/bin/time -v "$rlcpp" train "${common[@]}" "${flags[@]}" -p "$name" > "$name.log" 2>&1; then
    bad "$name: the run failed"; tail -3 "$name.log"; continue
  fi
  rss=$(awk '/Maximum resident/ {print $NF}' "$name.log")
  python3 - "$name" "$estimate" "$rss" <<'PY' && ok "$name" || bad "$name"
import sys
name, est, rss = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]) / 1024**2
err = (est - rss) / rss
print(f"     {name:26s} estimate {est:.2f} GiB, measured peak RSS {rss:.2f} GiB ({100 * err:+.1f} %)")
sys.exit(0 if -0.15 <= err <= 0.25 else 1)  # high refuses a run that would fit; low lets one be OOM-killed
PY
done
# Under --pp a trainer holds its stage: the estimate is of the stage with the most layers.
whole=$("$rlcpp" train "${common[@]}" --kl 0 -p pp1 --dry-run | awk '/^  total \(peak/ {print $4}')
staged=$("$rlcpp" train "${common[@]}" --kl 0 --pp 2 -p pp2 --dry-run | awk '/^  total \(peak/ {print $4}')
echo "     full fine-tune without a reference: estimate $whole GiB, at --pp 2 $staged GiB per stage"
python3 -c 'import sys; sys.exit(0 if 0 < float(sys.argv[2]) < float(sys.argv[1]) else 1)' "$whole" "$staged" \
  && ok pp-estimate-per-stage || bad pp-estimate-per-stage
exit $failed
