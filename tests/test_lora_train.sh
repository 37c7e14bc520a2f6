#!/usr/bin/env bash
# LoRA, activation checkpointing and a frozen half-precision base, end to end: GRPO with LoRA
# learns on the bundled default; its checkpoints are PEFT adapter directories (and merged models
# with --save-merged) that `merge`, `generate` and `eval` load; a LoRA run killed and resumed ends
# equal to an uninterrupted one; the distributed weight sync sends the adapters only; inconsistent
# flags and the memory preflight are errors naming the flags; SFT with LoRA resumes exactly; bf16
# rollout weights follow the adapters (colocated and distributed) and resume exactly.
# Usage: test_lora_train.sh RLCPP_BINARY SOURCE_DIR
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_lora_train.sh RLCPP_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: test_lora_train.sh RLCPP_BINARY SOURCE_DIR}")
source "$(dirname "$0")/lib.sh"
model="$src/models/arith-tiny"
data="$src/examples/arith/train.jsonl"
base=(-m "$model" -d "$data" -g 8 -tbs 8 -tMbs 8 -temp 1.0 --mnt 32 --log-interval 10 -sd runs)
lora=(--lora-rank 8 --lora-alpha 16 -lr 2e-3)

# 1. GRPO with LoRA (KL on: the reference is the base with the adapters off) learns.
"$rlcpp" train "${base[@]}" "${lora[@]}" -tmbs 64 --kl 0.01 --max-steps 10 --si 5 --save-merged -p learn > learn.log 2>&1 \
  || { bad lora-run; tail -5 learn.log; }
python3 - runs/learn/metrics.jsonl <<'PY' && ok lora-learns || bad lora-learns
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
rewards = [r["reward_mean"] for r in rows]
first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
print(f"     LoRA r=8 GRPO reward first 3 {first:.3f} -> last 3 {last:.3f}   [{' '.join(f'{x:.2f}' for x in rewards)}]")
sys.exit(0 if len(rows) == 10 and last > first and all(r["kl"] >= 0 for r in rows) and rows[-1]["kl"] > 0 else 1)
PY

# 2. The checkpoint is PEFT's adapter directory, with the merged model beside it.
step=runs/learn/step-10
if [ -f $step/adapter_config.json ] && [ -f $step/adapter_model.safetensors ] && [ ! -f $step/model.safetensors ] \
   && [ -d $step/trainer_state ] && [ -f $step/merged/config.json ] && [ -f $step/merged/model.safetensors ] \
   && [ -f $step/merged/tokenizer.json ] && grep -q '"peft_type": "LORA"' $step/adapter_config.json; then
  ok checkpoint-layout
else
  bad checkpoint-layout; ls -R $step | head -20
fi

out=$("$rlcpp" info $step 2>&1) && grep -q "PEFT LoRA" <<<"$out" && grep -q "r 8, alpha 16" <<<"$out" \
  && grep -q "architecture     Qwen2ForCausalLM" <<<"$out" && ok info-describes-adapter || { bad info-describes-adapter; echo "$out" | head -5; }

# 3. merge writes a full model; the adapter directory, the merged one and --save-merged's generate alike.
"$rlcpp" merge "$model" $step merged-out > merge.log 2>&1 || { bad merge; cat merge.log; }
gen() { "$rlcpp" generate --model "$1" --prompt "What is 47 + 38?" --mnt 24 --temperature 0 2>/dev/null; }
a=$(gen $step); b=$(gen merged-out); c=$(gen $step/merged); d=$(gen "$model")
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ]; then ok "merged-generates-alike"; else bad merged-generates-alike; printf '%s\n---\n%s\n---\n%s\n' "$a" "$b" "$c"; fi
out=$("$rlcpp" merge "$model" $step merged-out 2>&1) && bad merge-refuses-overwrite \
  || { echo "$out" | grep -q -- "--force" && ok merge-refuses-overwrite || bad merge-refuses-overwrite; }
"$rlcpp" eval -m $step -d "$src/examples/arith/test.jsonl" --limit 8 --mnt 32 > eval.log 2>&1 \
  && grep -q accuracy eval.log && ok eval-loads-adapter || { bad eval-loads-adapter; tail -3 eval.log; }

# 4. Exact resume with LoRA (and dropout, and checkpointing): killed after a checkpoint, resumed, equal.
# The first part stops after step 3 as a run killed there would (its step-3 checkpoint written); the
# learning rate is constant, so the shorter --max-steps changes nothing before it. The first part's
# status line (finished after 3 steps) is set aside on resume; the file ends with the second's.
resume=("${base[@]}" "${lora[@]}" --lora-dropout 0.05 --gradient-checkpointing --kl 0.01 --si 1 -tmbs 16)
"$rlcpp" train "${resume[@]}" --max-steps 6 -p full > full.log 2>&1 || { bad resume-reference-run; tail -3 full.log; }
"$rlcpp" train "${resume[@]}" --max-steps 3 -p cut > cut.log 2>&1 || { bad resume-first-part; tail -3 cut.log; }
"$rlcpp" train "${resume[@]}" --max-steps 6 -p cut --resume auto > resumed.log 2>&1 || { bad resume-run; tail -3 resumed.log; }
if [ "$(metrics_of runs/full/metrics.jsonl)" = "$(metrics_of runs/cut/metrics.jsonl)" ] \
   && ends_with_status runs/cut/metrics.jsonl finished 6 && ends_with_status runs/cut/metrics.discarded.jsonl finished 3 \
   && cmp -s runs/full/step-6/adapter_model.safetensors runs/cut/step-6/adapter_model.safetensors; then
  ok lora-resume-exact
else
  bad lora-resume-exact; diff <(metrics_of runs/full/metrics.jsonl) <(metrics_of runs/cut/metrics.jsonl) | head -4
fi
out=$("$rlcpp" train "${base[@]}" -lr 2e-3 --kl 0.01 --max-steps 7 --si 1 -tmbs 16 -p cut --resume auto 2>&1) \
  && bad resume-without-lora-refused \
  || { echo "$out" | grep -q "lora_rank" && ok resume-without-lora-refused || { bad resume-without-lora-refused; echo "$out" | tail -3; }; }

# 5. Distributed: the weight sync sends the adapters only (and they verify on the worker).
mpirun=${MPIEXEC:-mpirun}
"$mpirun" --oversubscribe -np 2 "$rlcpp" train "${base[@]}" "${lora[@]}" -t 1 -i 1 --max-steps 3 --verify-sync \
  -p dist > dist.log 2>&1 || { bad dist-lora-run; tail -5 dist.log; }
"$mpirun" --oversubscribe -np 2 "$rlcpp" train "${base[@]}" -lr 1e-4 -t 1 -i 1 --max-steps 3 -p dist-full > dist-full.log 2>&1 \
  || { bad dist-full-run; tail -5 dist-full.log; }
python3 - runs/dist/metrics.jsonl runs/dist-full/metrics.jsonl <<'PY' && ok dist-sync-adapters-only || bad dist-sync-adapters-only
import json, sys
def sync_bytes(path):
    rows = [r for r in map(json.loads, open(path)) if "step" in r]
    syncs = sum(r["weight_sync"]["syncs"] for r in rows)
    return sum(r["weight_sync"]["bytes"] for r in rows) / max(1, syncs), rows
lora, rows = sync_bytes(sys.argv[1])
full, _ = sync_bytes(sys.argv[2])
print(f"     bytes per sync: LoRA {lora:.0f}, full weights {full:.0f} ({full / max(lora, 1):.1f}x)")
sys.exit(0 if len(rows) == 3 and 0 < lora < full / 4 else 1)
PY

# 6. Inconsistent flags, named.
expect_error() {  # NAME PATTERN ARGS...
  local name=$1 pattern=$2; shift 2
  local out; out=$("$rlcpp" train "$@" 2>&1) && { bad "$name (no error)"; return; }
  echo "$out" | grep -q -- "$pattern" && ok "$name" || { bad "$name"; echo "$out" | tail -3; }
}
expect_error alpha-without-rank "--lora-alpha" "${base[@]}" --lora-alpha 16 -p e1
expect_error frozen-without-frozen "--frozen-dtype" "${base[@]}" --kl 0 --frozen-dtype bf16 -p e2
expect_error bad-target "q_proj, k_proj" "${base[@]}" --lora-rank 4 --lora-target-modules qkv -p e3
expect_error save-merged-without-lora "--save-merged" "${base[@]}" --save-merged -p e5
# Activations of 8 sequences of 200,000 tokens: refused before anything runs, with the fixes named.
expect_error memory-refused "--gradient-checkpointing" -m "$model" -d "$data" -g 8 -tbs 8 -tMbs 8 --mnt 200000 -sd runs -p e4
# A KV budget past what the system will map: the KV cache's own error, naming the flag.
expect_error kv-cache-too-large "lower --kv-cache-mb" "${base[@]}" --kv-cache-mb 100000000 -p e6
"$rlcpp" train "${base[@]}" "${lora[@]}" --frozen-dtype bf16 --dry-run > dry.log 2>&1 \
  && grep -q "base weights (frozen)" dry.log && grep -q "total" dry.log && [ ! -d runs/learn-dry ] \
  && grep -q "tokens ([0-9]*: the dataset's longest prompt)" dry.log \
  && ok dry-run || { bad dry-run; cat dry.log | tail -5; }

# 7. A frozen bf16 base trains too.
"$rlcpp" train "${base[@]}" "${lora[@]}" --frozen-dtype bf16 --max-steps 2 -p bf16 > bf16.log 2>&1 \
  && [ -f runs/bf16/step-2/adapter_model.safetensors ] && ok frozen-bf16-run || { bad frozen-bf16-run; tail -3 bf16.log; }

# 8. SFT with LoRA (dropout, checkpointing): adapter checkpoints, and a cut run resumed ends equal.
sft=(-m "$model" -d "$src/examples/arith/sft.jsonl" -tbs 4 -lr 2e-3 --lora-rank 8 --lora-dropout 0.1 \
     --gradient-checkpointing --si 2 -sd runs)
"$rlcpp" sft "${sft[@]}" --max-steps 4 -p sft-full > sft-full.log 2>&1 || { bad sft-lora-run; tail -3 sft-full.log; }
"$rlcpp" sft "${sft[@]}" --max-steps 2 -p sft-cut > sft-cut.log 2>&1 \
  && "$rlcpp" sft "${sft[@]}" --max-steps 4 -p sft-cut --resume auto > sft-resumed.log 2>&1 \
  || { bad sft-lora-resume-run; tail -3 sft-cut.log sft-resumed.log; }
if [ -f runs/sft-full/step-4/adapter_config.json ] && [ ! -f runs/sft-full/step-4/model.safetensors ] \
   && cmp -s runs/sft-full/step-4/adapter_model.safetensors runs/sft-cut/step-4/adapter_model.safetensors \
   && [ "$(metrics_of runs/sft-full/metrics.jsonl)" = "$(metrics_of runs/sft-cut/metrics.jsonl)" ]; then
  ok sft-lora-resume-exact
else
  bad sft-lora-resume-exact; ls runs/sft-full/step-4 2>&1 | head -5
fi

# 9. bf16 rollout weights (--rollout-dtype): the engine's copy, adapters merged in, refreshed after
# each step. Its log-probs differ from the trainer's by the rounding (fp32's agree to 1e-5); a cut
# run resumes exactly; distributed workers refresh theirs after each sync. Prompts are prefilled in
# 8-token chunks mixed into the decode steps, so chunked prefill composes with all of that too.
chunks=(--max-num-batched-tokens 8)
rb=("${base[@]}" "${lora[@]}" --kl 0.01 --si 2 -tmbs 16 --rollout-dtype bfloat16 "${chunks[@]}")
"$rlcpp" train "${rb[@]}" --max-steps 4 -p rb-full > rb-full.log 2>&1 || { bad rollout-bf16-run; tail -3 rb-full.log; }
"$rlcpp" train "${base[@]}" "${lora[@]}" --kl 0.01 --si 2 -tmbs 16 "${chunks[@]}" --max-steps 4 -p rb-fp32 > rb-fp32.log 2>&1 \
  || { bad rollout-fp32-run; tail -3 rb-fp32.log; }
python3 - runs/rb-full/metrics.jsonl runs/rb-fp32/metrics.jsonl <<'PY' && ok rollout-bf16-mismatch || bad rollout-bf16-mismatch
import json, sys
half = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
full = [r for r in map(json.loads, open(sys.argv[2])) if "step" in r]
print("     |dlogp| trainer vs engine, bf16 rollout weights: mean " + " ".join(f"{r['mismatch_abs_mean']:.2e}" for r in half)
      + "  max " + " ".join(f"{r['mismatch_abs_max']:.2e}" for r in half))
print("     fp32 rollout weights: max " + " ".join(f"{r['mismatch_abs_max']:.1e}" for r in full))
ok = len(half) == 4 and len(full) == 4
ok = ok and all(1e-5 < r["mismatch_abs_mean"] < 0.1 for r in half) and all(r["mismatch_abs_max"] < 1e-4 for r in full)
sys.exit(0 if ok else 1)
PY
# 8-bit rollout weights (int8, fp8 e4m3, a scale per output channel): the copy quantized again
# after each step, adapters merged in; its mismatch is the quantization's, above bf16's rounding.
for d in int8 fp8; do
  "$rlcpp" train "${base[@]}" "${lora[@]}" --kl 0.01 --si 2 -tmbs 16 --rollout-dtype $d "${chunks[@]}" --max-steps 2 \
    -p r8-$d > r8-$d.log 2>&1 || { bad rollout-$d-run; tail -3 r8-$d.log; continue; }
  python3 - runs/r8-$d/metrics.jsonl runs/rb-full/metrics.jsonl $d <<'PY' && ok rollout-$d-mismatch || bad rollout-$d-mismatch
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
half = [r for r in map(json.loads, open(sys.argv[2])) if "step" in r][:2]
mean = lambda rs: sum(r["mismatch_abs_mean"] for r in rs) / max(1, len(rs))
print(f"     |dlogp| trainer vs engine, {sys.argv[3]} rollout weights: mean " + " ".join(f"{r['mismatch_abs_mean']:.2e}" for r in rows)
      + "  max " + " ".join(f"{r['mismatch_abs_max']:.2e}" for r in rows) + f"  (bf16's mean {mean(half):.2e})")
ok = len(rows) == 2 and all(1e-4 < r["mismatch_abs_mean"] < 0.5 for r in rows) and mean(rows) > mean(half)
sys.exit(0 if ok else 1)
PY
done
# int8 with a resume (the copy made again from the checkpoint's weights: the same rollouts) and with
# distributed workers (their copies quantized again after each sync).
r8=("${base[@]}" "${lora[@]}" --kl 0.01 --si 1 -tmbs 16 --rollout-dtype int8 "${chunks[@]}")
"$rlcpp" train "${r8[@]}" --max-steps 1 -p r8-cut > r8-cut.log 2>&1 \
  && "$rlcpp" train "${r8[@]}" --max-steps 2 -p r8-cut --resume auto > r8-resumed.log 2>&1 \
  && "$rlcpp" train "${r8[@]}" --max-steps 2 -p r8-whole > r8-whole.log 2>&1 || { bad rollout-int8-resume-run; tail -3 r8-*.log; }
if [ "$(metrics_of runs/r8-whole/metrics.jsonl)" = "$(metrics_of runs/r8-cut/metrics.jsonl)" ] \
   && cmp -s runs/r8-whole/step-2/adapter_model.safetensors runs/r8-cut/step-2/adapter_model.safetensors; then
  ok rollout-int8-resume-exact
else
  bad rollout-int8-resume-exact; diff <(metrics_of runs/r8-whole/metrics.jsonl) <(metrics_of runs/r8-cut/metrics.jsonl) | head -4
fi
"$mpirun" --oversubscribe -np 2 "$rlcpp" train "${r8[@]}" -t 1 -i 1 --max-steps 2 --verify-sync -p r8-dist > r8-dist.log 2>&1 \
  && python3 -c 'import json,sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
sys.exit(0 if len(rows) == 2 and all(1e-4 < r["mismatch_abs_mean"] < 0.5 for r in rows) else 1)' runs/r8-dist/metrics.jsonl \
  && ok rollout-int8-distributed || { bad rollout-int8-distributed; tail -3 r8-dist.log; }
"$rlcpp" train "${rb[@]}" --max-steps 2 -p rb-cut > rb-cut.log 2>&1 \
  && "$rlcpp" train "${rb[@]}" --max-steps 4 -p rb-cut --resume auto > rb-resumed.log 2>&1 \
  || { bad rollout-bf16-resume-run; tail -3 rb-cut.log rb-resumed.log; }
if [ "$(metrics_of runs/rb-full/metrics.jsonl)" = "$(metrics_of runs/rb-cut/metrics.jsonl)" ] \
   && cmp -s runs/rb-full/step-4/adapter_model.safetensors runs/rb-cut/step-4/adapter_model.safetensors; then
  ok rollout-bf16-resume-exact
else
  bad rollout-bf16-resume-exact; diff <(metrics_of runs/rb-full/metrics.jsonl) <(metrics_of runs/rb-cut/metrics.jsonl) | head -4
fi
"$mpirun" --oversubscribe -np 2 "$rlcpp" train "${rb[@]}" -t 1 -i 1 --max-steps 3 --verify-sync -p rb-dist > rb-dist.log 2>&1 \
  && python3 -c 'import json,sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
sys.exit(0 if len(rows) == 3 and all(1e-5 < r["mismatch_abs_mean"] < 0.1 for r in rows) else 1)' runs/rb-dist/metrics.jsonl \
  && ok rollout-bf16-distributed || { bad rollout-bf16-distributed; tail -3 rb-dist.log; }
expect_error bad-rollout-dtype "--rollout-dtype" "${base[@]}" --rollout-dtype float64 -p e6
exit $failed
