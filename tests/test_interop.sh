#!/usr/bin/env bash
# rlcpp against the libraries its users run, in both directions (rlcpp's Python environment:
# transformers, PEFT; scripts/python_env.sh):
#   1. every fixture loads in transformers as its own class (Qwen2ForCausalLM, Qwen3ForCausalLM,
#      LlamaForCausalLM) and gives the fixture's float64 reference logits, and rlcpp gives
#      transformers' logits, each within 1e-5 in fp32;
#   2. adapters PEFT writes (its default target modules, and all-linear) load into rlcpp and give
#      PEFT's logits;
#   3. what rlcpp writes loads with from_pretrained and gives rlcpp's logits: a model merged from an
#      adapter (untied and tied heads; fp32, bf16, and sharded with an index), a full-weight GRPO
#      checkpoint, and a LoRA GRPO checkpoint (an adapter PeftModel.from_pretrained loads, and the
#      merged model beside it);
#   4. a reward model from train-rm and a PPO critic load as AutoModelForSequenceClassification (their
#      own Qwen2ForSequenceClassification) and score as rlcpp scores, each row at its last token.
# Each check prints the largest difference it saw.
# Usage: test_interop.sh RLCPP_BINARY SOURCE_DIR
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_interop.sh RLCPP_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: test_interop.sh RLCPP_BINARY SOURCE_DIR}")
source "$(dirname "$0")/lib.sh"
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 PYTHONWARNINGS=ignore
tol=1e-5
# Models an adapter has moved far (logits up to ~30 here) round a few more fp32 ulps apart in the two
# libraries than the fixtures do: 1.05e-5 measured on the all-linear Qwen3 one, merged.
tol_moved=2e-5
if ! "$py" -c "import transformers, peft" 2>/dev/null; then
  bad "rlcpp's Python environment ($py) lacks transformers or PEFT: run bash scripts/deps.sh"; exit 1
fi

# hf NAME MODEL_DIR OUT ARGS...: transformers' (or PEFT's) outputs on MODEL_DIR into OUT (hf_logits.py).
hf() {
  local name=$1 dir=$2 out=$3; shift 3
  local report
  if report=$("$py" "$src/tests/py/hf_logits.py" "$dir" "$out" "$@" 2> "$out.err"); then
    ok "$name  $report"
  else
    bad "$name  $report"; tail -5 "$out.err"
  fi
}
# same_as NAME MODEL_DIR HF_OUT [TOLERANCE]: rlcpp's logits and log-probs on MODEL_DIR within TOLERANCE
# ($tol unless given) of HF_OUT's.
same_as() {
  local name=$1 dir=$2 ref=$3 limit=${4:-$tol}
  local out diff
  out=$("$rlcpp" parity "$dir" --reference "$ref" 2>&1) || { bad "$name: rlcpp parity failed"; echo "$out" | tail -5; return; }
  diff=$(grep -oE '= [0-9.e+-]+' <<<"$out" | tr -d '= ' | sort -g | tail -1)
  if [ -n "$diff" ] && python3 -c "import sys; sys.exit(0 if float('$diff') <= $limit else 1)"; then
    ok "$name  rlcpp vs transformers: max diff $diff"
  else
    bad "$name  rlcpp vs transformers: max diff ${diff:-?} (tolerance $limit)"; echo "$out"
  fi
}

# 1. The fixtures in transformers' own classes.
for f in qwen2-tiny:Qwen2ForCausalLM qwen3-tiny:Qwen3ForCausalLM llama-tiny:LlamaForCausalLM llama3-tiny:LlamaForCausalLM; do
  name=${f%%:*} arch=${f#*:}
  ref="$fixtures/$name/reference.safetensors"
  hf "fixture-$name-transformers-equals-float64" "$fixtures/$name" "$name.hf.safetensors" --input "$ref" --arch "$arch" \
    --compare "$ref" --tol $tol
  same_as "fixture-$name-rlcpp-equals-transformers" "$fixtures/$name" "$name.hf.safetensors"
done

# 2. Adapters PEFT writes, loaded by rlcpp: PEFT's default target modules on an untied head (Llama),
# all-linear (saved as each module's full name) on a tied one (Qwen3).
for f in llama-tiny:default qwen3-tiny:all-linear; do
  name=${f%%:*} targets=${f#*:}
  # B scaled so the adapter moves the logits by far more than the tolerance (10 on two modules a layer,
  # 1 on all seven: more, and the perturbed model's fp32 rounding alone passes 1e-5 in both libraries).
  targs=(--b-scale 10); [ "$targets" != default ] && targs=(--target-modules "$targets" --b-scale 1)
  "$py" "$src/tests/py/peft_adapter.py" "$fixtures/$name" "peft-$name" "${targs[@]}" > "peft-$name.log" 2>&1 \
    || { bad "peft-writes-$name"; tail -5 "peft-$name.log"; continue; }
  hf "peft-$name-$targets-logits" "$fixtures/$name" "peft-$name.safetensors" --input "$fixtures/$name/reference.safetensors" \
    --adapter "peft-$name"
  # The adapter matters: PEFT's logits are far from the base model's (so agreeing with them checks it).
  "$py" -c 'import sys; from safetensors.torch import load_file as f
d = (f(sys.argv[1])["logits"] - f(sys.argv[2])["logits"]).abs().max().item(); print(f"     adapter moves the logits by {d:.2f}")
sys.exit(0 if d > 0.1 else 1)' "peft-$name.safetensors" "$fixtures/$name/reference.safetensors" \
    && ok "peft-$name-$targets-adapter-changes-logits" || bad "peft-$name-$targets-adapter-changes-logits"
  same_as "peft-$name-$targets-adapter-in-rlcpp" "peft-$name" "peft-$name.safetensors" $tol_moved
  # 3a. rlcpp merges it and writes a model transformers loads: fp32, bf16, and sharded with an index.
  for form in fp32: bf16:--dtype=bfloat16 sharded:--max-shard-size=100KB; do
    kind=${form%%:*} opt=${form#*:}
    "$rlcpp" merge "$fixtures/$name" "peft-$name" "merged-$name-$kind" $opt > "merge-$name-$kind.log" 2>&1 \
      || { bad "merge-$name-$kind"; tail -3 "merge-$name-$kind.log"; continue; }
    if [ $kind = sharded ]; then
      shards=$(ls "merged-$name-$kind"/model-*-of-*.safetensors 2>/dev/null | wc -l)
      [ "$shards" -ge 2 ] && [ -f "merged-$name-$kind/model.safetensors.index.json" ] \
        && ok "merge-$name-sharded-layout ($shards shards and an index)" || { bad "merge-$name-sharded-layout"; ls "merged-$name-$kind"; }
    fi
    hf "rlcpp-merged-$name-$kind-loads-in-transformers" "merged-$name-$kind" "merged-$name-$kind.safetensors" \
      --input "$fixtures/$name/reference.safetensors" --arch "$(python3 -c "import json; print(json.load(open('$fixtures/$name/config.json'))['architectures'][0])")"
    same_as "rlcpp-merged-$name-$kind-rlcpp-equals-transformers" "merged-$name-$kind" "merged-$name-$kind.safetensors" $tol_moved
  done
  # The merged fp32 model is the adapter applied: PEFT's logits too.
  same_as "rlcpp-merged-$name-fp32-equals-peft" "merged-$name-fp32" "peft-$name.safetensors" $tol_moved
done

# 3b. GRPO checkpoints rlcpp writes on the bundled model (tied head): full weights, and LoRA on every
# linear layer with the merged model beside the adapter.
model="$src/models/arith-tiny"
data="$src/examples/arith/train.jsonl"
base=(-m "$model" -d "$data" -g 4 -tbs 4 -tMbs 4 -temp 1.0 --mnt 16 --max-steps 2 --si 2 -sd runs)
"$rlcpp" train "${base[@]}" -lr 1e-3 -p full > full.log 2>&1 || { bad grpo-full-run; tail -5 full.log; }
"$rlcpp" train "${base[@]}" -lr 2e-3 --lora-rank 4 --lora-alpha 8 --lora-target-modules all-linear --save-merged -p lora \
  > lora.log 2>&1 || { bad grpo-lora-run; tail -5 lora.log; }
hf grpo-full-checkpoint-loads-in-transformers runs/full/step-2 full.safetensors --random-input 2,20 --arch Qwen2ForCausalLM
same_as grpo-full-checkpoint-rlcpp-equals-transformers runs/full/step-2 full.safetensors
hf grpo-lora-adapter-loads-in-peft "$model" lora.safetensors --random-input 2,20 --adapter runs/lora/step-2
same_as grpo-lora-adapter-rlcpp-equals-peft runs/lora/step-2 lora.safetensors
hf grpo-lora-merged-loads-in-transformers runs/lora/step-2/merged lora-merged.safetensors --random-input 2,20 \
  --arch Qwen2ForCausalLM --compare lora.safetensors --tol $tol
same_as grpo-lora-merged-rlcpp-equals-transformers runs/lora/step-2/merged lora-merged.safetensors

# 4. The sequence classifiers rlcpp trains: a reward model (train-rm) and a PPO critic (step-N/critic).
"$rlcpp" train-rm -m "$model" -d "$src/examples/arith/pairs.jsonl" -ed "$src/examples/arith/pairs_test.jsonl" -tbs 8 \
  -lr 1e-3 --max-steps 2 --si 2 -sd runs -p rm > rm.log 2>&1 || { bad train-rm-run; tail -5 rm.log; }
"$rlcpp" train "${base[@]}" -a PPO -lr 1e-4 --critic-lr 1e-3 -p ppo > ppo.log 2>&1 || { bad ppo-run; tail -5 ppo.log; }
for c in rm:runs/rm/step-2 critic:runs/ppo/step-2/critic; do
  name=${c%%:*} dir=${c#*:}
  hf "$name-loads-as-sequence-classifier" "$dir" "$name.safetensors" --random-input 3,20 --arch Qwen2ForSequenceClassification
  same_as "$name-rlcpp-scores-equal-transformers" "$dir" "$name.safetensors"
done
exit $failed
