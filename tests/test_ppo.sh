#!/usr/bin/env bash
# PPO with a critic (-a PPO) end to end on the bundled arithmetic task:
# - the critic's figures on every step; step-N/critic/ is transformers' Qwen2ForSequenceClassification
#   layout (read with Python's json and the safetensors header) with the critic's AdamW state;
# - a run resumed from step-2 ends with the straight run's policy, critic and metrics, bit for bit;
# - -t 1 -i 1 under mpirun takes the colocated run's steps (the critic on the trainer rank), two
#   data-parallel trainers (-t 2 -i 2) train and save one critic, and under ZeRO-3 its shards are
#   checkpointed and resumed bit for bit; under --train-tp 2 (also with a LoRA policy and -zero 1)
#   the critic is split as the policy is,
#   checkpointed whole with its optimizer in shards, resumed bit for bit, and equals one trainer;
#   under --pp 2 (also with a LoRA policy and -zero 1) the critic takes the policy's stages, and the
#   same holds; --pp 2 with --train-tp 2, and --pp 2 with multi-turn episodes, equal one trainer;
# - the critic from a reward model (-rt model), the KL in the reward, LoRA on the policy; multi-turn
#   episodes with a tool, rollout servers, partial rollouts;
# - bad combinations refused by name before any work.
# Usage: test_ppo.sh RLCPP_BINARY SOURCE_DIR [MPIEXEC]
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_ppo.sh RLCPP_BINARY SOURCE_DIR [MPIEXEC]}")
src=$(realpath "${2:?usage: test_ppo.sh RLCPP_BINARY SOURCE_DIR [MPIEXEC]}")
mpiexec=${3:-mpirun}
source "$src/tests/lib.sh"
model="$src/models/arith-tiny" data="$src/examples/arith/train.jsonl"
common=(-m "$model" -d "$data" -a PPO -g 2 --mnt 24 -lr 1e-4 --critic-lr 1e-3 --seed 0 -sd runs)
ppo() {  # ppo PROJECT FLAGS...
  local project=$1; shift
  OMP_NUM_THREADS=1 "$rlcpp" train "${common[@]}" -tbs 4 -p "$project" "$@" > "$project.log" 2>&1 || { bad "PPO run $project:"; tail -20 "$project.log"; }
}

# 1. The critic trains beside the policy and is checkpointed whole.
ppo straight --max-steps 4 --si 2
python3 - runs/straight "$model" <<'PY' && ok "critic figures every step; step-N/critic/ is a sequence classifier with its optimizer" || bad "critic figures and layout"
import json, os, struct, sys
run, base = sys.argv[1], sys.argv[2]
rows = [r for r in map(json.loads, open(f"{run}/metrics.jsonl")) if "step" in r]
assert len(rows) == 4, len(rows)
for r in rows:
    for k in ("vf_loss", "vf_clip_frac", "grad_norm", "lr", "old_value_mean", "gae_return_mean", "gae_advantage_mean",
              "value_mean", "return_mean"):
        assert k in r["critic"], (k, sorted(r["critic"]))
    assert r["critic"]["grad_norm"] > 0 and r["critic"]["lr"] == 1e-3, r
losses = " ".join("%.4f" % r["critic"]["vf_loss"] for r in rows)
print("     critic value loss by step:", losses)
c = json.load(open(f"{run}/step-4/critic/config.json"))
assert c["architectures"] == ["Qwen2ForSequenceClassification"] and c["id2label"] == {"0": "LABEL_0"}, c
with open(f"{run}/step-4/critic/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
b = json.load(open(f"{base}/config.json"))
assert h["score.weight"]["shape"] == [1, b["hidden_size"]] and "lm_head.weight" not in h
assert os.path.getsize(f"{run}/step-4/critic/trainer_state/optimizer.pt") > 0
assert os.path.exists(f"{run}/step-4/critic/tokenizer.json")
s = json.load(open(f"{run}/step-4/trainer_state/state.json"))
assert s["critic_optimizer_steps"] == 4 and s["optimizer_steps"] == 4, s
PY

# 2. Exact resume: 2 steps, then 2 more from step-2, against the straight run (its steps 3 and 4 and
#    the status line both runs end with).
ppo halves --max-steps 2 --si 2
OMP_NUM_THREADS=1 "$rlcpp" train "${common[@]}" -tbs 4 -p resumed -cp runs/halves/step-2 --max-steps 4 --si 2 > resumed.log 2>&1 \
  || { bad "PPO resume:"; tail -10 resumed.log; }
if cmp -s runs/straight/step-4/model.safetensors runs/resumed/step-4/model.safetensors &&
   cmp -s runs/straight/step-4/critic/model.safetensors runs/resumed/step-4/critic/model.safetensors &&
   cmp -s <(metrics_of runs/straight/metrics.jsonl | tail -3) <(metrics_of runs/resumed/metrics.jsonl); then
  ok "resume from step-2 ends bit for bit where the straight run does (policy, critic, metrics)"
else
  bad "PPO resume from step-2 differs from the straight run"
fi
weights_moved runs/halves/step-2/critic/model.safetensors runs/straight/step-4/critic/model.safetensors \
  && ok "the critic's weights move" || bad "the critic's weights did not move"

# 3. Under mpirun: -t 1 -i 1 takes the colocated run's steps; two data-parallel trainers (-t 2 -i 2)
#    train one critic.
run_mpi 2 "${common[@]}" -tbs 4 -p t1i1 --max-steps 2 -t 1 -i 1 > t1i1.log 2>&1 || { bad "PPO -t 1 -i 1:"; tail -10 t1i1.log; }
if cmp -s <(metrics_of runs/halves/metrics.jsonl) <(metrics_of runs/t1i1/metrics.jsonl); then
  ok "PPO under -t 1 -i 1 takes the colocated run's steps"
else
  bad "PPO under -t 1 -i 1 differs from colocated"; diff <(metrics_of runs/halves/metrics.jsonl) <(metrics_of runs/t1i1/metrics.jsonl) | head -4
fi
dp=(-tbs 2 -tMbs 2 -tmbs 4 -t 2 -i 2)
run_mpi 4 "${common[@]}" "${dp[@]}" -p t2i2 --max-steps 2 > t2i2.log 2>&1 || { bad "PPO -t 2 -i 2:"; tail -10 t2i2.log; }
python3 - runs/t2i2 <<'PY' && ok "PPO with two data-parallel trainers" || bad "PPO with two data-parallel trainers"
import json, os, sys
rows = [r for r in map(json.loads, open(f"{sys.argv[1]}/metrics.jsonl")) if "step" in r]
assert len(rows) == 2 and all(r["critic"]["grad_norm"] > 0 for r in rows), rows
assert os.path.exists(f"{sys.argv[1]}/step-2/critic/trainer_state/optimizer.pt")
PY
# ZeRO-3: the critic's moments, gradients and parameters sharded like the policy's; its shards in
# critic/trainer_state; 2 steps then 2 more from step-2 end where 4 straight steps do, and where
# the unsharded trainers' 4 steps do (in fp64, to rounding: the sums run in another order).
run_mpi 4 "${common[@]}" "${dp[@]}" --dtype float64 --zero 3 -p z3 --max-steps 4 --si 2 > z3.log 2>&1 \
  || { bad "PPO --zero 3:"; tail -10 z3.log; }
run_mpi 4 "${common[@]}" "${dp[@]}" --dtype float64 --zero 3 -p z3-resumed -cp runs/z3/step-2 --max-steps 4 --si 2 \
  > z3r.log 2>&1 || { bad "PPO --zero 3 resume:"; tail -10 z3r.log; }
run_mpi 4 "${common[@]}" "${dp[@]}" --dtype float64 -p dp4 --max-steps 4 --si 4 > dp4.log 2>&1 \
  || { bad "PPO -t 2 -i 2, 4 steps:"; tail -10 dp4.log; }
if ls runs/z3/step-2/critic/trainer_state/optimizer-shard-*.safetensors > /dev/null 2>&1 &&
   cmp -s runs/z3/step-4/critic/model.safetensors runs/z3-resumed/step-4/critic/model.safetensors &&
   cmp -s runs/z3/step-4/model.safetensors runs/z3-resumed/step-4/model.safetensors &&
   weights_close runs/z3/step-4/critic/model.safetensors runs/dp4/step-4/critic/model.safetensors 1e-10 &&
   weights_close runs/z3/step-4/model.safetensors runs/dp4/step-4/model.safetensors 1e-10; then
  ok "PPO under ZeRO-3: the critic sharded, checkpointed in shards, resumed bit for bit, as the unsharded run"
else
  bad "PPO under ZeRO-3"
fi

# Tensor parallelism: the critic's layers split over the two ranks of one replica as the policy's
# (its value head whole on both); 2 steps then 2 more from step-2 (its optimizer in one shard per
# rank) end where 4 straight steps do, and where one trainer's 4 steps do (fp64, to rounding).
tp=(-tbs 4 -tMbs 4 -tmbs 4 -i 2 --dtype float64 --max-steps 4 --si 2)
run_mpi 4 "${common[@]}" "${tp[@]}" -t 2 --train-tp 2 -p tp2 > tp2.log 2>&1 || { bad "PPO --train-tp 2:"; tail -10 tp2.log; }
run_mpi 4 "${common[@]}" "${tp[@]}" -t 2 --train-tp 2 -p tp2-resumed -cp runs/tp2/step-2 > tp2r.log 2>&1 \
  || { bad "PPO --train-tp 2 resume:"; tail -10 tp2r.log; }
run_mpi 3 "${common[@]}" "${tp[@]}" -t 1 -p tp1 > tp1.log 2>&1 || { bad "PPO -t 1 -i 2:"; tail -10 tp1.log; }
if ls runs/tp2/step-2/critic/trainer_state/optimizer-shard-*.safetensors > /dev/null 2>&1 &&
   cmp -s runs/tp2/step-4/critic/model.safetensors runs/tp2-resumed/step-4/critic/model.safetensors &&
   cmp -s runs/tp2/step-4/model.safetensors runs/tp2-resumed/step-4/model.safetensors &&
   weights_close runs/tp2/step-4/critic/model.safetensors runs/tp1/step-4/critic/model.safetensors 1e-10 &&
   weights_close runs/tp2/step-4/model.safetensors runs/tp1/step-4/model.safetensors 1e-10 &&
   weights_moved runs/tp2/step-2/critic/model.safetensors runs/tp2/step-4/critic/model.safetensors; then
  ok "PPO under --train-tp 2: the critic split, checkpointed whole with its optimizer in shards, resumed bit for bit, as one trainer"
else
  bad "PPO under --train-tp 2"
fi

# The critic under tensor parallelism beside a LoRA policy and ZeRO-1: two replicas of two ranks
# take the steps of two one-rank replicas (policy adapters and critic, fp64, to rounding).
tp_lora=(-tbs 4 -tMbs 4 -tmbs 4 -i 2 --dtype float64 --max-steps 3 --si 3 --lora-rank 4)
run_mpi 4 "${common[@]}" "${tp_lora[@]}" -t 2 -p lora-dp2 > lora-dp2.log 2>&1 || { bad "PPO LoRA -t 2:"; tail -10 lora-dp2.log; }
run_mpi 6 "${common[@]}" "${tp_lora[@]}" -t 4 --train-tp 2 -zero 1 -p lora-tp2z1 > lora-tp2z1.log 2>&1 \
  || { bad "PPO LoRA --train-tp 2 -zero 1:"; tail -10 lora-tp2z1.log; }
weights_close runs/lora-tp2z1/step-3/adapter_model.safetensors runs/lora-dp2/step-3/adapter_model.safetensors 1e-10 &&
  weights_close runs/lora-tp2z1/step-3/critic/model.safetensors runs/lora-dp2/step-3/critic/model.safetensors 1e-10 \
  && ok "PPO with LoRA under --train-tp 2 -zero 1: the critic split and sharded, as plain data parallelism" \
  || bad "PPO with LoRA under --train-tp 2 -zero 1"

# Pipeline parallelism: the critic cut into the policy's two stages (its value head on the last);
# 2 steps then 2 more from step-2 end where 4 straight steps do, and where one trainer's do (fp64,
# to rounding); with a LoRA policy and ZeRO-1, two replicas of two stages take the steps of two
# one-rank replicas.
run_mpi 4 "${common[@]}" "${tp[@]}" -t 2 --pp 2 -p pp2 > pp2.log 2>&1 || { bad "PPO --pp 2:"; tail -10 pp2.log; }
run_mpi 4 "${common[@]}" "${tp[@]}" -t 2 --pp 2 -p pp2-resumed -cp runs/pp2/step-2 > pp2r.log 2>&1 \
  || { bad "PPO --pp 2 resume:"; tail -10 pp2r.log; }
run_mpi 6 "${common[@]}" "${tp_lora[@]}" -t 4 --pp 2 -zero 1 -p lora-pp2z1 > lora-pp2z1.log 2>&1 \
  || { bad "PPO LoRA --pp 2 -zero 1:"; tail -10 lora-pp2z1.log; }
if cmp -s runs/pp2/step-4/critic/model.safetensors runs/pp2-resumed/step-4/critic/model.safetensors &&
   cmp -s runs/pp2/step-4/model.safetensors runs/pp2-resumed/step-4/model.safetensors &&
   metrics_close <(step_lines runs/pp2/metrics.jsonl | tail -2) <(step_lines runs/pp2-resumed/metrics.jsonl) pp_bubble &&
   weights_close runs/pp2/step-4/critic/model.safetensors runs/tp1/step-4/critic/model.safetensors 1e-10 &&
   weights_close runs/pp2/step-4/model.safetensors runs/tp1/step-4/model.safetensors 1e-10 &&
   weights_close runs/lora-pp2z1/step-3/adapter_model.safetensors runs/lora-dp2/step-3/adapter_model.safetensors 1e-10 &&
   weights_close runs/lora-pp2z1/step-3/critic/model.safetensors runs/lora-dp2/step-3/critic/model.safetensors 1e-10 &&
   python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); assert c["architectures"] == ["Qwen2ForSequenceClassification"], c' \
     runs/pp2/step-4/critic/config.json; then
  ok "PPO under --pp 2: the critic in the policy's stages, checkpointed whole, resumed bit for bit, as one trainer; with LoRA and ZeRO-1 as plain data parallelism"
else
  bad "PPO under --pp 2"
fi
# Both at once: two stages of two tensor-parallel ranks each hold the critic as they hold the
# policy, and take one trainer's steps; and multi-turn episodes (inserted runs masked in GAE) on two
# stages take one rank's.
run_mpi 6 "${common[@]}" "${tp[@]}" -t 4 --pp 2 --train-tp 2 -p pp2tp2 > pp2tp2.log 2>&1 || { bad "PPO --pp 2 --train-tp 2:"; tail -10 pp2tp2.log; }
weights_close runs/pp2tp2/step-4/critic/model.safetensors runs/tp1/step-4/critic/model.safetensors 1e-10 &&
  weights_close runs/pp2tp2/step-4/model.safetensors runs/tp1/step-4/model.safetensors 1e-10 \
  && ok "PPO under --pp 2 --train-tp 2: the critic in stages of split layers, as one trainer" || bad "PPO under --pp 2 --train-tp 2"
turns=(-m "$src/models/tools-tiny" -d "$src/examples/tools/train.jsonl" -a PPO --critic-lr 1e-3 -rt boxed --tools calculator
       --max-turns 3 -g 4 --mnt 64 -sd runs --seed 3 --dtype float64 -tbs 2 -tMbs 2 -tmbs 4 -lr 5e-5 --max-steps 2
       --reuse-rollout-logprobs false)
run_mpi 2 "${turns[@]}" -t 1 -i 1 -p turns1 > turns1.log 2>&1 || { bad "PPO multi-turn -t 1 -i 1:"; tail -5 turns1.log; }
run_mpi 3 "${turns[@]}" -t 2 -i 1 --pp 2 -p turns-pp2 > turns-pp2.log 2>&1 || { bad "PPO multi-turn --pp 2:"; tail -5 turns-pp2.log; }
python3 -c 'import json,sys; sys.exit(0 if sum(r["tool_calls"] for r in map(json.loads, open(sys.argv[1])) if "step" in r) > 0 else 1)' \
    runs/turns-pp2/metrics.jsonl &&
  weights_close runs/turns-pp2/step-2/critic/model.safetensors runs/turns1/step-2/critic/model.safetensors 1e-10 &&
  weights_close runs/turns-pp2/step-2/model.safetensors runs/turns1/step-2/model.safetensors 1e-10 \
  && ok "PPO with multi-turn episodes under --pp 2, as one rank" || bad "PPO with multi-turn episodes under --pp 2"

# 4. With a reward model (the critic starts from it), the KL in the reward, LoRA on the policy.
"$rlcpp" train-rm -m "$model" -d "$src/examples/arith/pairs.jsonl" -tbs 16 -lr 1e-3 --max-steps 2 --seed 0 -sd runs -p rm \
  > rm.log 2>&1 || { bad "train-rm:"; tail -5 rm.log; }
ppo with-rm --max-steps 2 -rt model --reward-model runs/rm/step-2 --kl 0.05 --kl-in-reward --lora-rank 4
python3 - runs/with-rm with-rm.log <<'PY' && ok "PPO with -rt model, the critic from the reward model, --kl-in-reward, LoRA" || bad "PPO with a reward model"
import json, sys
rows = [r for r in map(json.loads, open(f"{sys.argv[1]}/metrics.jsonl")) if "step" in r]
assert len(rows) == 2 and all(r["critic"]["grad_norm"] > 0 for r in rows)
# The KL is in the rewards, not the loss.
assert all(r.get("kl", 0) == 0 for r in rows), [r.get("kl") for r in rows]
log = open(sys.argv[2]).read()
assert "critic: runs/rm/step-2," in log, log[-2000:]
PY

# 4b. With the other rollout paths: multi-turn episodes with a tool (GAE passes over the inserted
#     tokens), rollout servers (-b openai against rlcpp serve) with LoRA, and partial rollouts that
#     take new weights mid-sequence under a staleness bound.
pids=()
cleanup_extra() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
OMP_NUM_THREADS=1 timeout 300 "$rlcpp" train -m "$src/models/tools-tiny" -d "$src/examples/tools/train.jsonl" -a PPO -rt boxed \
  --tools calculator --max-turns 3 -g 4 -tbs 4 -tMbs 4 -tmbs 16 -temp 1.0 --mnt 64 --seed 3 -sd runs -p tools -rsd rollouts \
  --max-steps 2 > tools.log 2>&1 || { bad "PPO with a tool:"; tail -5 tools.log; }
start_server serve.log --model "$model" && pids+=("$server_pid") || { bad "rlcpp serve starts"; cat serve.log; }
ppo remote --max-steps 2 -b openai --rollout-url "$server_url" --lora-rank 4
run_mpi 2 "${common[@]}" -tbs 4 -p partial --max-steps 3 -t 1 -i 1 -nb 1 --partial-rollout --max-staleness 1 --tis-cap 2 \
  --lora-rank 4 > partial.log 2>&1 || { bad "PPO with partial rollouts:"; tail -10 partial.log; }
python3 - runs rollouts/tools <<'PY' && ok "PPO with a tool (multi-turn), with rollout servers and LoRA, with partial rollouts" || bad "PPO with the other rollout paths"
import glob, json, sys
for run, steps in (("tools", 2), ("remote", 2), ("partial", 3)):
    rows = [r for r in map(json.loads, open(f"{sys.argv[1]}/{run}/metrics.jsonl")) if "step" in r]
    assert len(rows) == steps and all(r["critic"]["grad_norm"] > 0 for r in rows), (run, rows)
rows = [json.loads(l) for f in glob.glob(sys.argv[2] + "/**/*.jsonl", recursive=True) for l in open(f)]
episodes = [s.get("episode") or {} for r in rows for s in (r.get("samples") or [r])]
assert any(e.get("inserted_tokens", 0) > 0 for e in episodes), "no sample called the tool"
PY

# 5. Refused by name before any work.
expect ppo-pp-critic-depth 2 '-a PPO with --pp 2: the critic .* has 2 decoder layers and the policy .* 4' -- \
  "$rlcpp" train "${common[@]}" -tbs 4 -p r1 --pp 2 -t 2 -i 2 --critic-model "$src/tests/fixtures/qwen2-tiny"
expect critic-without-ppo 2 '--gamma 0.9, --critic-lr 0.001: settings of a critic, which -a GRPO' -- \
  "$rlcpp" train -m "$model" -d "$data" --gamma 0.9 --critic-lr 1e-3
expect kl-in-reward-without-kl 2 '--kl-in-reward with --kl-coeff 0' -- "$rlcpp" train "${common[@]}" -tbs 4 -p r2 --kl-in-reward
expect critic-missing 2 '--critic-model .*nowhere: no config.json there' -- \
  "$rlcpp" train "${common[@]}" -tbs 4 -p r3 --critic-model "$tmp/nowhere"
expect resume-grpo-as-ppo 2 'algo' -- "$rlcpp" train -m "$model" -d "$data" -a GRPO -g 2 -tbs 4 --mnt 24 --seed 0 -sd runs \
  -p r4 -cp runs/halves/step-2 --max-steps 3
exit "$failed"
