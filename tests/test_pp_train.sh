#!/usr/bin/env bash
# Pipeline parallelism in training runs under mpirun (also as root), on the toy task made 4 layers
# deep, fp64, distributed (-t T -i 1 --pp N):
#   - 2 stages (their layers balanced by times measured at start-up: --pp-balance time) and 3,
#     2 stages x 2 tensor-parallel ranks (also with ZeRO-1, its checkpoint resumed
#     without stages), and 2 data-parallel replicas of 2 stages
#     (also with ZeRO-1 over each stage's replicas) take the steps of one trainer rank: weights after 3 steps within 1e-12 per tensor, metrics
#     equal; the sync to the rollout worker hash-verified (whole weights streamed stage by stage);
#   - checkpoints: one whole Hugging Face model directory and an optimizer shard per stage; a
#     resume from step 2 equals the uninterrupted run at the same --pp, at 3 stages and on 2
#     ZeRO-1 trainers, and a one-trainer checkpoint resumes on 2 stages;
#   - LoRA on 2 stages equals one trainer, its adapters synced and resumed on one trainer;
#   - partial rollouts with the relay buffer, and multi-turn episodes with tool calls, on 2 stages
#     equal one trainer;
#   - colocated (mpirun -np N --pp P, no -i): the stages generate together (pipelined engine
#     steps), 2 stages and 2 stages x 2 tensor-parallel ranks take one process's steps (fp32: within
#     1e-6 over the whole model), also with LoRA and resumed from a checkpoint; every run
#     evaluates (-ed) with the stages generating together;
#   - layouts and combinations it does not support refused with the flags named; a killed stage
#     ends the job.
# Usage: test_pp_train.sh RLCPP_BINARY MPIEXEC
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_pp_train.sh RLCPP_BINARY MPIEXEC}")
mpiexec=${2:-mpirun}
source "$(dirname "$0")/lib.sh"

# The toy task, its model 4 decoder layers deep (so 3 stages split it).
"$here/make_chat_model.sh" "$fixtures/qwen2-tiny" chat
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["vocab_size"] = 259; c["num_hidden_layers"] = 4
json.dump(c, open("toy.json", "w"))' "$fixtures/qwen2-tiny/config.json"
"$rlcpp" init --config toy.json --tokenizer chat --out toy --seed 1 > /dev/null || bad toy-model
for k in 1 2 3 4 5 6 7 8; do
  echo "{\"messages\": [{\"role\": \"user\", \"content\": \"What is $k + $k?\"}], \"gt_answer\": \"$((k + k))\"}"
done > data.jsonl
# Old log-probs recomputed by the trainer (the sampler's fp32 ones differ in their last bits
# between layouts), several micro-batches per step (-tmbs 3 of 8 samples: 1F1B with a bubble).
# Every run evaluates at its end (-ed): under --pp the first replica's stages generate together.
base=(-m toy -d data.jsonl -g 8 -tmbs 3 --mnt 8 -lr 3e-3 --kl 0 --dtype float64 -sd runs --reuse-rollout-logprobs false
      --reward-cmd "python3 $here/data/digits_reward.py" --verify-sync true -ed '{"toy": "data.jsonl"}')
one=(-tbs 1 -tMbs 1 --max-steps 3)
same() {  # NAME A B: fp64 weights within 1e-12 per tensor
  weights_close "$2" "$3" 1e-12 && ok "$1" || bad "$1"
}
verified() {  # RUN: weight syncs hash-verified by the rollout workers, summed over the steps (0: none)
  python3 -c 'import json,sys; print(sum(r["weight_sync"]["verified_workers"] for r in map(json.loads, open(sys.argv[1])) if "step" in r))' \
    "runs/$1/metrics.jsonl" 2>/dev/null || echo 0
}

run_mpi 2 "${base[@]}" "${one[@]}" -t 1 -i 1 -p d1 > d1.log 2>&1 || { bad d1-run; tail -3 d1.log; }
weights_moved runs/d1/step-3/model.safetensors toy/model.safetensors && ok weights-moved || bad weights-moved
# NP T I PP NAME [FLAGS]: two replicas need two engines (engines a multiple of replicas), and take
# a prompt each, against two one-rank replicas.
# Padded micro-batches and micro-batches by a token budget (padding-free) take the same steps.
for layout in "3 2 1 2 pp2 --pp-balance time" "4 3 1 3 pp3" "5 4 1 2 pp2tp2 --train-tp 2" "5 4 1 2 pp2tp2z1 --train-tp 2 -zero 1 --si 2" \
              "6 4 2 2 dp2pp2" "5 4 1 2 pp2tp2padded --train-tp 2 --padding-free false" \
              "3 2 1 2 pp2budget --max-tokens-per-micro-batch 24"; do
  read -r np t i pp name extra <<<"$layout"
  args=("${base[@]}" "${one[@]}" -t "$t" -i "$i" --pp "$pp" -p "$name")
  [ -n "${extra:-}" ] && args+=($extra)
  run_mpi "$np" "${args[@]}" > "$name.log" 2>&1 || { bad "$name-run"; tail -3 "$name.log"; }
  if [ "$name" != dp2pp2 ]; then
    same "$name-equals-one-rank" runs/d1/step-3/model.safetensors "runs/$name/step-3/model.safetensors"
    metrics_close runs/d1/metrics.jsonl "runs/$name/metrics.jsonl" pp_bubble && ok "$name-metrics" || bad "$name-metrics"
  fi
  [ "$(verified "$name")" -ge 3 ] && ok "$name-syncs-verified" || bad "$name-syncs-verified"
done
# The TP x PP x ZeRO-1 checkpoint of step 2 continued without stages (its parts taken by name).
run_mpi 3 "${base[@]}" "${one[@]}" -t 2 -i 1 --train-tp 2 -cp runs/pp2tp2z1/step-2 -p tp2-from-pp2tp2z1 \
  > tp2-from-pp2tp2z1.log 2>&1 || { bad tp2-from-pp2tp2z1-run; tail -3 tp2-from-pp2tp2z1.log; }
same resume-pp2tp2z1-onto-tp2 runs/d1/step-3/model.safetensors runs/tp2-from-pp2tp2z1/step-3/model.safetensors
run_mpi 4 "${base[@]}" "${one[@]}" -t 2 -i 2 -p dp2 > dp2.log 2>&1 || { bad dp2-run; tail -3 dp2.log; }
same dp2pp2-equals-dp2 runs/dp2/step-3/model.safetensors runs/dp2pp2/step-3/model.safetensors
# ZeRO-1 over each stage's two data-parallel trainers.
run_mpi 6 "${base[@]}" "${one[@]}" -t 4 -i 2 --pp 2 -zero 1 -p dp2pp2z1 > dp2pp2z1.log 2>&1 \
  || { bad dp2pp2-zero1-run; tail -3 dp2pp2z1.log; }
same dp2pp2-zero1-equals-dp2 runs/dp2/step-3/model.safetensors runs/dp2pp2z1/step-3/model.safetensors
metrics_close runs/dp2pp2/metrics.jsonl runs/dp2pp2z1/metrics.jsonl pp_bubble && ok dp2pp2-zero1-metrics || bad dp2pp2-zero1-metrics
python3 -c 'import json,sys; sys.exit(0 if "toy" in [r for r in map(json.loads, open(sys.argv[1])) if "step" in r][-1]["eval"] else 1)' \
  runs/pp3/metrics.jsonl && ok pp3-evaluates || bad pp3-evaluates
# Balanced by times trainer 0 measured (the split may differ from work's; the steps may not).
grep -q -- "--pp-balance time: over 3 x 72 tokens, a decoder layer takes" pp2.log && ok pp-balance-time-measured \
  || { bad pp-balance-time-measured; grep -- "--pp-balance" pp2.log; }
grep -q "pipeline parallelism: 3 stages per replica; trainer 0 holds decoder layers \[0, 1) of 4" pp3.log \
  && ok pp-startup-line || { bad pp-startup-line; grep "pipeline" pp3.log; }

# Colocated (no -i): the stages also generate, each running its layers of every engine step in
# turn over its own KV cache, the last stage's logits sampled on every rank. 2 stages, and 2 stages
# x 2 tensor-parallel ranks, take one process's steps, with an evaluation mid-run (-ei 2).
colocated=("${base[@]}" -tbs 2 -tMbs 2 --max-steps 3 -ei 2)
# One thread, as run_mpi's ranks have: the two-thread process's sums round differently, and Adam
# makes that 2e-12 after 3 steps (one thread: 1.6e-13 from the stages).
OMP_NUM_THREADS=1 "$rlcpp" train "${colocated[@]}" -p co1 > co1.log 2>&1 || { bad co1-run; tail -3 co1.log; }
# Tensor parallelism adds the all-reduces' own rounding: 1.2e-12 after Adam's 3 steps on an
# AVX-512 machine (OpenBLAS's Cooperlake kernels), hence 1e-11 there.
for layout in "2 co-pp2 1e-12 --pp 2" "4 co-pp2tp2 1e-11 --pp 2 --train-tp 2"; do
  read -r np name tolerance extra <<<"$layout"
  run_mpi "$np" "${colocated[@]}" $extra -p "$name" > "$name.log" 2>&1 || { bad "$name-run"; tail -3 "$name.log"; }
  weights_close runs/co1/step-3/model.safetensors "runs/$name/step-3/model.safetensors" "$tolerance" \
    && ok "$name-equals-one-process" || bad "$name-equals-one-process"
  # The sampler's log-probs are fp32, rounded apart by another engine: their distance from the
  # trainer's (mismatch_*) is not compared.
  metrics_close runs/co1/metrics.jsonl "runs/$name/metrics.jsonl" pp_bubble mismatch_abs_mean mismatch_abs_max mismatch_kl \
    mismatch_by_versions && ok "$name-metrics" || bad "$name-metrics"
done
python3 -c 'import json,sys; sys.exit(0 if [("eval" in r) for r in map(json.loads, open(sys.argv[1])) if "step" in r] == [False, True, True] else 1)' \
  runs/co-pp2/metrics.jsonl && ok colocated-pp2-evaluates || bad colocated-pp2-evaluates
# Colocated stages with LoRA (each stage's adapters in the engine's passes), checkpointed at step 2
# and resumed from it on 2 stages: one process's adapter after 3 steps.
co_lora=("${colocated[@]}" --lora-rank 4 --lora-alpha 8 --si 2)
OMP_NUM_THREADS=1 "$rlcpp" train "${co_lora[@]}" -p co-lora1 > co-lora1.log 2>&1 || { bad co-lora1-run; tail -3 co-lora1.log; }
run_mpi 2 "${co_lora[@]}" --pp 2 -p co-lora2 > co-lora2.log 2>&1 || { bad co-lora2-run; tail -3 co-lora2.log; }
run_mpi 2 "${co_lora[@]}" --pp 2 -cp runs/co-lora2/step-2 -p co-lora-again > co-lora-again.log 2>&1 \
  || { bad co-lora-again-run; tail -3 co-lora-again.log; }
weights_moved runs/co-lora1/step-3/adapter_model.safetensors runs/co-lora2/step-2/adapter_model.safetensors \
  && same colocated-lora-pp2-equals-one-process runs/co-lora1/step-3/adapter_model.safetensors \
    runs/co-lora2/step-3/adapter_model.safetensors || bad colocated-lora-pp2-equals-one-process
same colocated-lora-pp2-resumes runs/co-lora1/step-3/adapter_model.safetensors runs/co-lora-again/step-3/adapter_model.safetensors
# fp32 with every default (the sampler's log-probs as the old ones): within fp32's rounding of one
# process over the whole model (the stages sum the gradient norm and the tied embedding's two
# gradients in another order).
fp32=(-m toy -d data.jsonl -g 8 -tmbs 3 --mnt 8 -lr 1e-5 --kl 0 --dtype float32 -sd runs -tbs 2 -tMbs 2 --max-steps 3
      --reward-cmd "python3 $here/data/digits_reward.py")
OMP_NUM_THREADS=1 "$rlcpp" train "${fp32[@]}" -p f1 > f1.log 2>&1 || { bad f1-run; tail -3 f1.log; }
run_mpi 2 "${fp32[@]}" --pp 2 -p f2 > f2.log 2>&1 || { bad f2-run; tail -3 f2.log; }
weights_moved runs/f1/step-3/model.safetensors toy/model.safetensors \
  && weights_close runs/f2/step-3/model.safetensors runs/f1/step-3/model.safetensors 1e-6 overall \
  && ok fp32-colocated-pp2-equals-one-process || bad fp32-colocated-pp2-equals-one-process

# Checkpoints and resumes: 4 steps, uninterrupted and from step 2.
two=(-tbs 2 -tMbs 2 --max-steps 4 -t 2 -i 1 --pp 2)
run_mpi 3 "${base[@]}" "${two[@]}" -p whole > whole.log 2>&1 || bad whole-run
run_mpi 3 "${base[@]}" "${two[@]}" --si 2 -p first > first.log 2>&1 || bad first-run
python3 - runs/first/step-2/trainer_state toy/model.safetensors runs/first/step-2/model.safetensors <<'PY' \
  && ok checkpoint-layout || bad checkpoint-layout
import json, os, struct, sys
def header(path):
    with open(path, "rb") as f:
        return json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
state, init, saved = sys.argv[1:]
shards = sorted(f for f in os.listdir(state) if f.startswith("optimizer-shard-"))
assert len(shards) == 2 and not os.path.exists(os.path.join(state, "optimizer.pt")), shards
meta = [header(os.path.join(state, s))["__metadata__"] for s in shards]
assert sorted(m["stage"] for m in meta) == ["0", "1"] and all(m["tp_rank"] == "0" for m in meta), meta
# Each shard names its stage's tensors: the decoder layers split between them, each once.
layers = [{n.split(".")[2] for n, _ in json.loads(m["layout"]) if n.startswith("model.layers.")} for m in meta]
assert not layers[0] & layers[1] and layers[0] | layers[1] == {"0", "1", "2", "3"}, layers
a, b = header(init), header(saved)  # the whole model, Hugging Face's names and shapes
assert {k: v["shape"] for k, v in a.items() if k != "__metadata__"} == {k: v["shape"] for k, v in b.items() if k != "__metadata__"}
PY
run_mpi 3 "${base[@]}" "${two[@]}" -cp runs/first/step-2 -p again > again.log 2>&1 || { bad resume-run; tail -3 again.log; }
same resume-exact runs/whole/step-4/model.safetensors runs/again/step-4/model.safetensors
# A checkpoint whose shards predate named stages (tp_size counting tp x pp parts, no layout)
# still resumes at its own --pp.
cp -r runs/first/step-2 legacy
python3 - legacy/trainer_state <<'PY' || bad legacy-shards-rewritten
import json, os, struct, sys
for name in os.listdir(sys.argv[1]):
    if not name.startswith("optimizer-shard-"): continue
    path = os.path.join(sys.argv[1], name)
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header["__metadata__"]
    meta["tp_rank"], meta["tp_size"] = meta.pop("stage"), meta.pop("stages")
    del meta["layout"]
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
PY
run_mpi 3 "${base[@]}" "${two[@]}" -cp legacy -p from-legacy > from-legacy.log 2>&1 || { bad legacy-resume-run; tail -3 from-legacy.log; }
same resume-from-unnamed-shards runs/whole/step-4/model.safetensors runs/from-legacy/step-4/model.safetensors

# Resumes at another layout re-shard the optimizer state by tensor name: the 2-stage checkpoint
# onto 3 stages and onto 2 data-parallel trainers with ZeRO-1 (the global batch kept: -tbs is per
# replica); a one-trainer checkpoint onto 2 stages (and below, LoRA's 2 stages onto one trainer).
resume_at() {  # NAME FROM NP ARGS...: resumed from FROM to step 4, equal to the uninterrupted run
  local name=$1 from=$2 np=$3; shift 3
  run_mpi "$np" "${base[@]}" --max-steps 4 -cp "$from" -p "$name" "$@" > "$name.log" 2>&1 \
    || { bad "$name-run"; tail -3 "$name.log"; }
  same "$name" runs/whole/step-4/model.safetensors "runs/$name/step-4/model.safetensors"
}
resume_at resume-pp2-onto-pp3 runs/first/step-2 4 -tbs 2 -tMbs 2 -t 3 -i 1 --pp 3
resume_at resume-pp2-onto-dp2-zero1 runs/first/step-2 4 -tbs 1 -tMbs 1 -t 2 -i 2 -zero 1
run_mpi 2 "${base[@]}" -tbs 2 -tMbs 2 --max-steps 2 -t 1 -i 1 -p first1 > first1.log 2>&1 || bad first1-run
resume_at resume-one-rank-onto-pp2 runs/first1/step-2 3 -tbs 2 -tMbs 2 -t 2 -i 1 --pp 2

# LoRA on stages: 2 stages' adapters (each layer's A drawn as in the whole model) take one
# trainer's steps, sync their adapters to the worker, and resume from a 2-stage checkpoint on one.
lora=(-tbs 1 -tMbs 1 --max-steps 3 --lora-rank 4 --lora-alpha 8 --save-merged)
run_mpi 2 "${base[@]}" "${lora[@]}" -t 1 -i 1 -p lora1 > lora1.log 2>&1 || { bad lora1-run; tail -3 lora1.log; }
run_mpi 3 "${base[@]}" "${lora[@]}" -t 2 -i 1 --pp 2 --si 2 -p lora2 > lora2.log 2>&1 || { bad lora2-run; tail -3 lora2.log; }
weights_moved runs/lora1/step-3/adapter_model.safetensors runs/lora2/step-2/adapter_model.safetensors \
  && same lora-pp2-equals-one-rank runs/lora1/step-3/adapter_model.safetensors runs/lora2/step-3/adapter_model.safetensors \
  || bad lora-pp2-equals-one-rank
[ "$(verified lora2)" -ge 3 ] && ok lora-pp2-syncs-verified || bad lora-pp2-syncs-verified
same lora-pp2-merged-equals-one-rank runs/lora1/step-3/merged/model.safetensors runs/lora2/step-3/merged/model.safetensors
run_mpi 2 "${base[@]}" "${lora[@]}" -t 1 -i 1 -cp runs/lora2/step-2 -p lora-again > lora-again.log 2>&1 \
  || { bad lora-resume-run; tail -3 lora-again.log; }
same lora-pp2-resumed-on-one-rank runs/lora1/step-3/adapter_model.safetensors runs/lora-again/step-3/adapter_model.safetensors

# With the rest of the step loop: a round generated ahead with partial rollouts and the relay
# buffer on the toy task, and multi-turn episodes with tool calls (their inserted runs masked) on
# the bundled tool-use model: 2 stages take one trainer's steps.
async=(-tbs 1 -tMbs 1 --max-steps 4 -ibs 2 -nb 1 --partial-rollout --max-relay-episode 2)
run_mpi 2 "${base[@]}" "${async[@]}" -t 1 -i 1 -p async1 > async1.log 2>&1 || { bad async1-run; tail -3 async1.log; }
run_mpi 3 "${base[@]}" "${async[@]}" -t 2 -i 1 --pp 2 -p async2 > async2.log 2>&1 || { bad async2-run; tail -3 async2.log; }
same partial-relay-pp2-equals-one-rank runs/async1/step-4/model.safetensors runs/async2/step-4/model.safetensors
turns=(-m "$here/../models/tools-tiny" -d "$here/../examples/tools/train.jsonl" -rt boxed --tools calculator --max-turns 3
       -g 4 --mnt 64 -sd runs --seed 3 --dtype float64 -tbs 2 -tMbs 2 -tmbs 4 -lr 5e-5 --max-steps 2
       --reuse-rollout-logprobs false)
run_mpi 2 "${turns[@]}" -t 1 -i 1 -p turns1 > turns1.log 2>&1 || { bad turns1-run; tail -3 turns1.log; }
run_mpi 3 "${turns[@]}" -t 2 -i 1 --pp 2 -p turns2 > turns2.log 2>&1 || { bad turns2-run; tail -3 turns2.log; }
python3 -c 'import json,sys; sys.exit(0 if sum(r["tool_calls"] for r in map(json.loads, open(sys.argv[1])) if "step" in r) > 0 else 1)' \
  runs/turns2/metrics.jsonl && metrics_close runs/turns1/metrics.jsonl runs/turns2/metrics.jsonl pp_bubble \
  && ok multi-turn-pp2-equals-one-rank || bad multi-turn-pp2-equals-one-rank

# Refused with the flags and numbers named (exit code 2, before any work).
expect_error() {  # NAME NP PATTERN ARGS...
  local name=$1 np=$2 pattern=$3; shift 3
  if [ "$np" = 1 ]; then "$rlcpp" train "${base[@]}" --max-steps 1 -p "$name" "$@" > "$name.log" 2>&1
  else run_mpi "$np" "${base[@]}" --max-steps 1 -p "$name" "$@" > "$name.log" 2>&1; fi
  local rc=$?
  [ $rc -eq 2 ] && grep -q -- "$pattern" "$name.log" && ok "$name" || { bad "$name"; echo "rc $rc"; tail -3 "$name.log"; }
}
expect_error pp-without-mpirun 1 "run \`mpirun -np 2 rlcpp train --train-tp 1 --pp 2" --pp 2
expect_error pp-colocated-world 3 "mpirun started 3 processes but -i is not set and --train-tp 1 x --pp 2 is 2" --pp 2
expect_error pp-not-dividing-t 4 "make -t a multiple of 2" -t 3 -i 1 --pp 2
expect_error pp-over-layers 6 "--pp 5: toy has 4 decoder layers" -t 5 -i 1 --pp 5
expect_error pp-zero2 3 "pipeline stages take ZeRO stage 1 only" -t 2 -i 1 --pp 2 -zero 2
expect_error pp-remote 1 "-b openai with --train-tp 1 --pp 2: a trainer over several processes" --pp 2 -b openai \
  --rollout-url http://127.0.0.1:9

# kill -9 of the second stage mid-run: the job ends non-zero by itself.
killed_rank_ends_job 3 1 "${base[@]}" -t 2 -i 1 --pp 2 -tbs 1 -tMbs 1 --max-steps 40 --si 1

exit $failed
