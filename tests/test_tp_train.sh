#!/usr/bin/env bash
# Tensor parallelism in training runs under mpirun (also as root), on the toy task:
#   - colocated (mpirun -np N --train-tp N) at 2 and 3 ranks takes the steps of one process: fp64
#     weights after 3 steps within 1e-12 relative per tensor and metrics equal; fp32 within 1e-6
#     relative over the whole model;
#   - distributed, trainer replicas of 2 ranks equal one-rank trainers, also with rollout engines
#     of another tensor-parallel size (trainer 1 -> engines 2, trainer 2 -> engines 1 and 2);
#   - data-parallel replicas of tensor-parallel ranks at ZeRO stages 0-3 equal plain data parallelism;
#   - LoRA with rollout engines of 2 ranks, hash-verified syncs, evaluations and rollout ahead (-nb 1);
#   - checkpoints: a whole Hugging Face model directory and one optimizer shard per tensor-parallel
#     rank; resumed exactly with the same replicas and onto two replicas; a resume at another
#     --train-tp refused naming it;
#   - bad layouts refused with the flags named; a killed trainer ends the job.
# Usage: test_tp_train.sh RLCPP_BINARY MPIEXEC
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_tp_train.sh RLCPP_BINARY MPIEXEC}")
mpiexec=${2:-mpirun}
source "$(dirname "$0")/lib.sh"

"$here/make_toy_task.sh" "$rlcpp" "$fixtures" || bad toy-task
# Old log-probs recomputed by the trainer: the sampler's are fp32, whose last bits differ between
# layouts and would drive fp64 runs apart.
base=(-m toy -d data.jsonl -g 8 -tmbs 4 --mnt 8 -lr 3e-3 --kl 0 --dtype float64 -sd runs --reuse-rollout-logprobs false
      --reward-cmd "python3 $here/data/digits_reward.py")
same() {  # NAME A B: fp64 weights within 1e-12 per tensor
  weights_close "$2" "$3" 1e-12 && ok "$1" || bad "$1"
}
train() { "$rlcpp" train "$@"; }

# Colocated: one process against tensor-parallel groups of 2 and 3 ranks.
train "${base[@]}" -tbs 2 -tMbs 2 --max-steps 3 -p c1 > c1.log 2>&1 || { bad c1-run; tail -3 c1.log; }
weights_moved runs/c1/step-3/model.safetensors toy/model.safetensors && ok weights-moved || bad weights-moved
for tp in 2 3; do
  run_mpi "$tp" "${base[@]}" -tbs 2 -tMbs 2 --max-steps 3 --train-tp "$tp" -p "c$tp" > "c$tp.log" 2>&1 \
    || { bad "colocated-tp$tp-run"; tail -3 "c$tp.log"; }
  same "colocated-tp$tp-equals-one-process" runs/c1/step-3/model.safetensors "runs/c$tp/step-3/model.safetensors"
  # The sampler's log-probs are fp32, rounded apart by another engine: their distance from the
  # trainer's (mismatch_*) is not compared.
  metrics_close runs/c1/metrics.jsonl "runs/c$tp/metrics.jsonl" mismatch_abs_mean mismatch_abs_max mismatch_kl mismatch_by_versions \
    && ok "colocated-tp$tp-metrics" || bad "colocated-tp$tp-metrics"
done
# Right-padded micro-batches (--padding-free false) under tensor parallelism: the same steps.
run_mpi 2 "${base[@]}" -tbs 2 -tMbs 2 --max-steps 3 --train-tp 2 --padding-free false -p c2padded > c2padded.log 2>&1 \
  || { bad colocated-tp2-padded-run; tail -3 c2padded.log; }
same colocated-tp2-padded-equals-padding-free runs/c1/step-3/model.safetensors runs/c2padded/step-3/model.safetensors
grep -q "tensor parallelism: 3 ranks per replica; trainer 0 holds query heads \[0, 1)" c3.log && ok tp-startup-line \
  || { bad tp-startup-line; grep "tensor parallelism" c3.log; }
# fp32 with every default (the sampler's log-probs as the old ones), at a fine-tuning learning rate.
fp32=(-m toy -d data.jsonl -g 8 -tmbs 4 --mnt 8 -lr 1e-5 --kl 0 --dtype float32 -sd runs
      --reward-cmd "python3 $here/data/digits_reward.py")
train "${fp32[@]}" -tbs 2 -tMbs 2 --max-steps 3 -p f1 > f1.log 2>&1 || bad f1-run
run_mpi 2 "${fp32[@]}" -tbs 2 -tMbs 2 --max-steps 3 --train-tp 2 -p f2 > f2.log 2>&1 || bad f2-run
weights_moved runs/f1/step-3/model.safetensors toy/model.safetensors \
  && weights_close runs/f2/step-3/model.safetensors runs/f1/step-3/model.safetensors 1e-6 overall \
  && ok fp32-colocated-tp2-equals-one-process || bad fp32-colocated-tp2-equals-one-process

# Distributed: one replica, two engines, at every pairing of tensor-parallel sizes.
one=(-tbs 1 -tMbs 1 --max-steps 3)
run_mpi 3 "${base[@]}" "${one[@]}" -t 1 -i 2 -p d11 > d11.log 2>&1 || bad d11-run
run_mpi 4 "${base[@]}" "${one[@]}" -t 2 -i 2 --train-tp 2 -p d21 > d21.log 2>&1 || { bad d21-run; tail -3 d21.log; }
run_mpi 5 "${base[@]}" "${one[@]}" -t 1 -i 4 --rollout-tp 2 -p d12 > d12.log 2>&1 || { bad d12-run; tail -3 d12.log; }
run_mpi 6 "${base[@]}" "${one[@]}" -t 2 -i 4 --train-tp 2 --rollout-tp 2 -p d22 > d22.log 2>&1 || { bad d22-run; tail -3 d22.log; }
same trainer-tp2-engines-tp1 runs/d11/step-3/model.safetensors runs/d21/step-3/model.safetensors
same trainer-tp1-engines-tp2 runs/d11/step-3/model.safetensors runs/d12/step-3/model.safetensors
same trainer-tp2-engines-tp2 runs/d11/step-3/model.safetensors runs/d22/step-3/model.safetensors
metrics_close runs/d11/metrics.jsonl runs/d21/metrics.jsonl && ok trainer-tp2-metrics || bad trainer-tp2-metrics

# Two data-parallel replicas of two tensor-parallel ranks, ZeRO sharding within each data-parallel group.
run_mpi 4 "${base[@]}" "${one[@]}" -t 2 -i 2 -p dp > dp.log 2>&1 || bad dp-run
for stage in 0 1 2 3; do
  run_mpi 6 "${base[@]}" "${one[@]}" -t 4 -i 2 --train-tp 2 -zero "$stage" -p "dptp$stage" > "dptp$stage.log" 2>&1 \
    || { bad "dp-tp-zero$stage-run"; tail -3 "dptp$stage.log"; }
  same "dp-tp-zero$stage-equals-dp" runs/dp/step-3/model.safetensors "runs/dptp$stage/step-3/model.safetensors"
done

# LoRA: the adapters synced to engines of 2 ranks (hash-verified), evaluations, rollout one round ahead.
lora=(--lora-rank 4 --lora-alpha 8 --verify-sync true -ed '{"toy": "data.jsonl"}' -ei 2 -nb 1)
run_mpi 4 "${base[@]}" "${one[@]}" "${lora[@]}" -t 2 -i 2 -p lora1 > lora1.log 2>&1 || bad lora1-run
run_mpi 8 "${base[@]}" "${one[@]}" "${lora[@]}" -t 4 -i 4 --train-tp 2 --rollout-tp 2 -p lora2 > lora2.log 2>&1 \
  || { bad lora-tp-run; tail -3 lora2.log; }
same lora-tp-equals-no-tp runs/lora1/step-3/adapter_model.safetensors runs/lora2/step-3/adapter_model.safetensors
verified=$(python3 -c 'import json,sys; print(sum(r["weight_sync"]["verified_workers"] for r in map(json.loads, open(sys.argv[1])) if "step" in r))' \
  runs/lora2/metrics.jsonl 2>/dev/null)
[ "${verified:-0}" -ge 2 ] && grep -q "eval toy at step 2" lora2.log && ok lora-tp-verified-and-evaluated \
  || { bad lora-tp-verified-and-evaluated; echo "verified: $verified"; }

# Checkpoints and resumes: 4 steps of 2 prompts, uninterrupted and from step 2.
two=(-tbs 2 -tMbs 2 --max-steps 4)
run_mpi 3 "${base[@]}" "${two[@]}" -t 2 -i 1 --train-tp 2 -p whole > whole.log 2>&1 || bad whole-run
run_mpi 3 "${base[@]}" "${two[@]}" -t 2 -i 1 --train-tp 2 --si 2 -p first > first.log 2>&1 || bad first-run
state=runs/first/step-2/trainer_state
python3 - "$state" toy/model.safetensors runs/first/step-2/model.safetensors <<'PY' && ok checkpoint-layout || bad checkpoint-layout
import json, os, struct, sys
def header(path):
    with open(path, "rb") as f:
        return json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
state, init, saved = sys.argv[1:]
shards = sorted(f for f in os.listdir(state) if f.startswith("optimizer-shard-"))
assert shards == ["optimizer-shard-000-of-002-000.safetensors", "optimizer-shard-001-of-002-000.safetensors"], shards
assert not os.path.exists(os.path.join(state, "optimizer.pt"))
meta = [header(os.path.join(state, s))["__metadata__"] for s in shards]
assert [m["tp_rank"] for m in meta] == ["0", "1"] and all(m["tp_size"] == "2" for m in meta), meta
a, b = header(init), header(saved)  # the whole model, Hugging Face's names and shapes
assert {k: v["shape"] for k, v in a.items() if k != "__metadata__"} == {k: v["shape"] for k, v in b.items() if k != "__metadata__"}
PY
run_mpi 3 "${base[@]}" "${two[@]}" -t 2 -i 1 --train-tp 2 -cp runs/first/step-2 -p again > again.log 2>&1 \
  || { bad resume-run; tail -3 again.log; }
same resume-exact runs/whole/step-4/model.safetensors runs/again/step-4/model.safetensors
run_mpi 6 "${base[@]}" -tbs 1 -tMbs 1 --max-steps 4 -t 4 -i 2 --train-tp 2 -zero 2 -cp runs/first/step-2 -p onto2 > onto2.log 2>&1 \
  || { bad resume-onto-two-replicas-run; tail -3 onto2.log; }
same resume-onto-two-replicas runs/whole/step-4/model.safetensors runs/onto2/step-4/model.safetensors
run_mpi 2 "${base[@]}" "${two[@]}" -t 1 -i 1 -cp runs/first/step-2 -p other > other.log 2>&1
[ $? -ne 0 ] && grep -q "parallel.tensor_parallel_size: 2 -> 1" other.log && ok resume-other-tp-refused \
  || { bad resume-other-tp-refused; tail -5 other.log; }

# Layouts refused with the flags and numbers named (exit code 2, before any work).
expect_error() {  # NAME NP PATTERN ARGS...
  local name=$1 np=$2 pattern=$3; shift 3
  if [ "$np" = 1 ]; then train "${base[@]}" --max-steps 1 -p "$name" "$@" > "$name.log" 2>&1
  else run_mpi "$np" "${base[@]}" --max-steps 1 -p "$name" "$@" > "$name.log" 2>&1; fi
  local rc=$?
  [ $rc -eq 2 ] && grep -q -- "$pattern" "$name.log" && ok "$name" || { bad "$name"; echo "rc $rc"; tail -3 "$name.log"; }
}
expect_error tp-not-dividing-t 5 "make -t a multiple of --train-tp" -t 3 -i 2 --train-tp 2
expect_error tp-over-heads 1 "--train-tp 5: the model has 4 attention heads" --train-tp 5 -t 5 -i 1
expect_error tp-without-mpirun 1 "run \`mpirun -np 2 rlcpp train --train-tp 2" --train-tp 2
expect_error colocated-world-mismatch 2 "or --train-tp and --pp whose product is 2 for the colocated mode"
expect_error colocated-rollout-tp 2 "--rollout-tp 3 with --train-tp 2 in the colocated mode" --train-tp 2 --rollout-tp 3
expect_error engines-per-replica 4 "-i 2 / --rollout-tp 2 = 1 engines is not a multiple of -t 2" -t 2 -i 2 --rollout-tp 2

# kill -9 of a trainer of a tensor-parallel replica mid-run: the job ends non-zero by itself.
killed_rank_ends_job 4 1 "${base[@]}" -t 2 -i 2 --train-tp 2 -tbs 1 -tMbs 1 --max-steps 40 --si 1

exit $failed
