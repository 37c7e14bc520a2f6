#!/usr/bin/env bash
# Reward models end to end on the bundled arithmetic task:
# - rlcpp train-rm on examples/arith/pairs.jsonl raises the held-out pair accuracy above chance;
# - its checkpoint is transformers' ...ForSequenceClassification layout, read with Python's json and
#   the safetensors header alone: architectures, id2label of one label, pad_token_id, the score
#   head [1, hidden] and every decoder tensor of the base under its name, no LM head; and the
#   mean and std --normalize-reward reads;
# - a run resumed from step-2 ends with the straight run's weights and metrics, bit for bit;
# - rlcpp grade -rt model scores {"messages" | "prompt", "response"} records (chosen above
#   rejected), standardised and clipped on request;
# - GRPO trains with -rt model, and with the model beside the rule reward (--reward-weights);
# - train-rm and sft on two processes under mpirun take the one process's steps (and resume in one),
#   with the optimizer sharded too (-zero 2 for train-rm, resumed in one process from its shards;
#   -zero 1 for sft, -zero 2 for sft with LoRA (resumed in one process), -zero 3 for both (train-rm
#   scoring its held-out pairs on rank 0, resumed in one process), and under tensor parallelism
#   (--train-tp 2: train-rm on one replica and on two with -zero 3, sft whole, with -zero 1 and with
#   LoRA; resumed exactly at --train-tp 2, refused at another), and under pipeline parallelism
#   (--pp 2: train-rm with its held-out figures and calibration, resumed exactly, its checkpoint one
#   whole classifier, also with LoRA (the adapter and the merged classifier); sft with --train-tp 2
#   and with LoRA); -zero above 3, and -zero, --train-tp or --pp in one process refused);
# - GRPO with the reward model on ranks of its own (--reward-ranks) takes the steps of the run whose
#   rollout engines load it, bit for bit, with two engines per reward rank, with partial
#   rollouts, and with multi-turn episodes cut at checkpoints; --reward-ranks without workers, without a reward model, over the engine count or
#   with the wrong process count refused by name;
# - the shortened examples/arith/reward_model.sh runs; bad input is refused by name.
# Usage: test_reward_model.sh RLCPP_BINARY SOURCE_DIR
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_reward_model.sh RLCPP_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: test_reward_model.sh RLCPP_BINARY SOURCE_DIR}")
source "$src/tests/lib.sh"
model="$src/models/arith-tiny" pairs="$src/examples/arith/pairs.jsonl" pairs_test="$src/examples/arith/pairs_test.jsonl"
train_rm() {  # train_rm PROJECT [FLAGS...] (env LR: the learning rate, 1e-3)
  local project=$1; shift
  "$rlcpp" train-rm -m "$model" -d "$pairs" -ed "$pairs_test" -tbs 32 -lr "${LR:-1e-3}" --seed 0 -sd "$tmp/runs" -p "$project" "$@" \
    > "$tmp/$project.log" 2>&1 || { bad "train-rm $project:"; tail -20 "$tmp/$project.log"; }
}

# 1. Learning: held-out accuracy at the end, against the fresh head's at step 1.
train_rm learn --max-steps 16 -ei 16 --lr-schedule cosine --warmup-steps 2
python3 - "$tmp/runs/learn/metrics.jsonl" <<'PY' && ok "train-rm learns (held-out pair accuracy above)" || bad "train-rm learns"
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
acc = rows[-1]["eval"]["eval"]["accuracy"]
print(f"     train accuracy step 1 {rows[0]['accuracy']:.3f}, last {rows[-1]['accuracy']:.3f}; held-out {acc:.3f}")
# Chance is 0.5; the forgotten carry (half the mistakes) is learnt first, digit slips later.
assert len(rows) == 16 and acc >= 0.65, acc
PY

# 2. The layout transformers loads.
python3 - "$tmp/runs/learn/step-16" "$model" <<'PY' && ok "checkpoint layout: Qwen2ForSequenceClassification" || bad "checkpoint layout"
import json, struct, sys
def header(d):
    raw = open(f"{d}/model.safetensors", "rb").read(8)
    n = struct.unpack("<Q", raw)[0]
    with open(f"{d}/model.safetensors", "rb") as f:
        f.seek(8); h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h
rm, base = sys.argv[1], sys.argv[2]
c, b = json.load(open(f"{rm}/config.json")), json.load(open(f"{base}/config.json"))
assert c["architectures"] == ["Qwen2ForSequenceClassification"], c["architectures"]
assert c["id2label"] == {"0": "LABEL_0"} and c["label2id"] == {"LABEL_0": 0}, c.get("id2label")
assert "num_labels" not in c and c["pad_token_id"] == b["eos_token_id"]
assert isinstance(c["mean"], float) and c["std"] > 0
for k in ("hidden_size", "num_hidden_layers", "vocab_size", "model_type"):
    assert c[k] == b[k], k
h, hb = header(rm), header(base)
assert h["score.weight"]["shape"] == [1, b["hidden_size"]], h["score.weight"]
assert "lm_head.weight" not in h
assert set(h) == (set(hb) - {"lm_head.weight"}) | {"score.weight"}, set(h) ^ set(hb)
for k in hb:
    if k in h:
        assert h[k]["shape"] == hb[k]["shape"], k
PY

# 3. Exact resume: 4 steps straight, and 2 then 2 more from step-2.
train_rm straight --max-steps 4 --si 2
train_rm halves --max-steps 4 --si 2
rm -rf "$tmp/runs/halves/step-4"
"$rlcpp" train-rm -m "$model" -d "$pairs" -ed "$pairs_test" -tbs 32 -lr 1e-3 --seed 0 -sd "$tmp/runs" -p resumed \
  -cp "$tmp/runs/halves/step-2" --max-steps 4 --si 2 > "$tmp/resumed.log" 2>&1 || { bad "resume:"; tail -5 "$tmp/resumed.log"; }
if cmp -s "$tmp/runs/straight/step-4/model.safetensors" "$tmp/runs/resumed/step-4/model.safetensors" &&
   [ "$(step_lines "$tmp/runs/straight/metrics.jsonl" | sed -n 4p | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["loss"], r["eval"])')" = \
     "$(step_lines "$tmp/runs/resumed/metrics.jsonl" | tail -1 | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["loss"], r["eval"])')" ] &&
   ends_with_status "$tmp/runs/resumed/metrics.jsonl" finished 4; then
  ok "resume from step-2 ends bit for bit where the straight run does"
else
  bad "resume from step-2 differs from the straight run"
fi

# LoRA: the adapter beside the head trained whole (PEFT's SEQ_CLS, modules_to_save score), the merged
# classifier in merged/; resume exact; the adapter directory scores as its merged model does.
LR=5e-3 train_rm lora --max-steps 4 --si 2 --lora-rank 4
rm -rf "$tmp/runs/lora/step-4"
"$rlcpp" train-rm -m "$model" -d "$pairs" -ed "$pairs_test" -tbs 32 -lr 5e-3 --seed 0 -sd "$tmp/runs" -p lora-resumed \
  -cp "$tmp/runs/lora/step-2" --max-steps 4 --si 2 --lora-rank 4 > "$tmp/lora-resumed.log" 2>&1 || { bad "LoRA resume:"; tail -5 "$tmp/lora-resumed.log"; }
LR=5e-3 train_rm lora-straight --max-steps 4 --si 4 --lora-rank 4
python3 - "$tmp/runs/lora-straight/step-4" <<'PY' && ok "LoRA reward model: PEFT SEQ_CLS adapter with the score head, merged classifier" || bad "LoRA reward model layout"
import json, struct, sys
d = sys.argv[1]
a = json.load(open(f"{d}/adapter_config.json"))
assert a["task_type"] == "SEQ_CLS" and a["modules_to_save"] == ["score"], a
with open(f"{d}/adapter_model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
assert h["base_model.model.score.weight"]["shape"][0] == 1, list(h)[:5]
assert any(k.endswith("lora_A.weight") for k in h)
m = json.load(open(f"{d}/merged/config.json"))
assert m["architectures"] == ["Qwen2ForSequenceClassification"] and m["std"] > 0, m
PY
cmp -s "$tmp/runs/lora-straight/step-4/adapter_model.safetensors" "$tmp/runs/lora-resumed/step-4/adapter_model.safetensors" \
  && ok "LoRA resume from step-2 ends bit for bit where the straight run does" || bad "LoRA resume differs from the straight run"
printf '%s\n' '{"prompt": "What is 12 + 19?", "response": "2+9=11 1+1+1=3 \\boxed{31}"}' > "$tmp/one.jsonl"
a=$("$rlcpp" grade -rt model --reward-model "$tmp/runs/lora-straight/step-4" --input "$tmp/one.jsonl" 2>/dev/null)
m=$("$rlcpp" grade -rt model --reward-model "$tmp/runs/lora-straight/step-4/merged" --input "$tmp/one.jsonl" 2>/dev/null)
python3 -c 'import json,sys; a, m = (json.loads(x)["reward"] for x in sys.argv[1:]); assert abs(a - m) < 1e-4, (a, m); print(f"     {a:.6f} and {m:.6f}")' "$a" "$m" \
  && ok "a LoRA reward model's adapter directory scores as its merged model" || bad "LoRA adapter and merged scores differ: $a vs $m"

# 4. rlcpp grade -rt model: the chosen and the rejected reply of held-out pairs as records.
rm_dir="$tmp/runs/learn/step-16"
python3 - "$pairs_test" "$tmp/graded_in.jsonl" <<'PY'
import json, sys
out = open(sys.argv[2], "w")
# Pairs whose mistake is the forgotten carry or borrow (no "+1" or "-1" step): what a reward model
# learns first, so the ranking below is a firm check of grade's scores.
forgot = [p for p in map(json.loads, open(sys.argv[1])) if "+1" not in p["rejected"][0]["content"] and "-1" not in p["rejected"][0]["content"]]
for p in forgot[:20]:
    for side in ("chosen", "rejected"):
        out.write(json.dumps({"messages": p["prompt"], "response": p[side][0]["content"], "side": side}) + "\n")
PY
"$rlcpp" grade -rt model --reward-model "$rm_dir" --input "$tmp/graded_in.jsonl" -o "$tmp/graded.jsonl" 2> "$tmp/grade.log" \
  || { bad "grade -rt model:"; tail -5 "$tmp/grade.log"; }
python3 - "$tmp/graded.jsonl" <<'PY' && ok "grade -rt model scores chosen above rejected" || bad "grade -rt model"
import json, sys
r = [json.loads(l)["reward"] for l in open(sys.argv[1])]
wins = sum(r[k] > r[k + 1] for k in range(0, len(r), 2))
print(f"     {wins} of {len(r) // 2} held-out pairs (the forgotten carry) ranked right by rlcpp grade")
assert len(r) == 40 and wins >= 18, wins
PY
"$rlcpp" grade -rt model --reward-model "$rm_dir" --normalize-reward --reward-clip 0.5 --input "$tmp/graded_in.jsonl" \
  -o "$tmp/clipped.jsonl" 2> /dev/null
python3 - "$tmp/graded.jsonl" "$tmp/clipped.jsonl" "$rm_dir/config.json" <<'PY' && ok "--normalize-reward and --reward-clip" || bad "--normalize-reward and --reward-clip"
import json, sys
raw = [json.loads(l)["reward"] for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
c = json.load(open(sys.argv[3]))
for x, g in zip(raw, got):
    assert abs(g["parts"]["model/raw"] - x) < 1e-6
    assert abs(g["reward"] - max(-0.5, min(0.5, (x - c["mean"]) / c["std"]))) < 1e-6, (g, x)
PY
printf '%s\n' '{"prompt": "What is 12 + 19?", "response": "2+9=11 1+1+1=3 \\boxed{31}"}' > "$tmp/prompt_text.jsonl"
expect grade-prompt-text 0 '"reward":-?[0-9]' -- "$rlcpp" grade -rt model --reward-model "$rm_dir" --input "$tmp/prompt_text.jsonl"
printf '%s\n' '{"response": "x"}' > "$tmp/no_prompt.jsonl"
expect grade-no-prompt 2 'no_prompt.jsonl:1: .*give the prompt as "messages" or "prompt"' -- \
  "$rlcpp" grade -rt model --reward-model "$rm_dir" --input "$tmp/no_prompt.jsonl"
expect grade-no-model 2 '-rt model: give the reward model with --reward-model DIR' -- \
  "$rlcpp" grade -rt model --input "$tmp/prompt_text.jsonl"
expect grade-causal-lm 2 "is not a reward model.*train-rm" -- \
  "$rlcpp" grade -rt model --reward-model "$model" --input "$tmp/prompt_text.jsonl"

# 5. GRPO with the reward model: alone, and beside the rule reward.
grpo() {  # grpo PROJECT FLAGS...
  local project=$1; shift
  "$rlcpp" train -m "$model" -d "$src/examples/arith/train.jsonl" -g 4 -tbs 4 --mnt 24 --max-steps 2 --seed 0 \
    -sd "$tmp/runs" -p "$project" "$@" > "$tmp/$project.log" 2>&1
}
if grpo grpo-rm -rt model --reward-model "$rm_dir" && python3 - "$tmp/runs/grpo-rm/metrics.jsonl" <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
assert len(rows) == 2 and all(r["reward_mean"] != 0 for r in rows), rows
PY
then ok "GRPO with -rt model"; else bad "GRPO with -rt model:"; tail -5 "$tmp/grpo-rm.log"; fi
if grpo grpo-both -rt boxed --reward-model "$rm_dir" --reward-weights accuracy=1,model=0.5 -rsd "$tmp/rollouts" &&
   python3 - "$tmp/rollouts" <<'PY'
import glob, json, sys
rows = [json.loads(l) for f in sorted(glob.glob(sys.argv[1] + "/**/*.jsonl", recursive=True)) for l in open(f)]
samples = [s for r in rows for s in (r.get("samples") or [r])]
checked = 0
for s in samples:
    parts = s.get("reward_parts") or s.get("parts")
    if parts and "model" in parts and "accuracy" in parts:
        assert abs(s["reward"] - (parts["accuracy"] + 0.5 * parts["model"])) < 1e-5, s
        checked += 1
assert checked > 0, "no sample carries both parts"
print(f"     {checked} samples: reward = accuracy + 0.5 x model")
PY
then ok "GRPO with the rule reward and the reward model (--reward-weights)"; else bad "GRPO with both rewards:"; tail -5 "$tmp/grpo-both.log"; fi

# 6. Bad input, refused by name before any work.
expect rt-model-alone 2 '-rt model: .*--reward-model DIR' -- "$rlcpp" train -m "$model" -d "$src/examples/arith/train.jsonl" -rt model
expect weights-unknown 2 '--reward-weights: the run has no reward component "model"' -- \
  "$rlcpp" train -m "$model" -d "$src/examples/arith/train.jsonl" --reward-weights model=1
expect weights-malformed 2 "--reward-weights: 'accuracy' is not NAME=WEIGHT" -- \
  "$rlcpp" train -m "$model" -d "$src/examples/arith/train.jsonl" --reward-weights accuracy
expect rm-missing 2 '--reward-model .*none: no config.json' -- \
  "$rlcpp" train -m "$model" -d "$src/examples/arith/train.jsonl" -rt model --reward-model "$tmp/none"
expect rm-as-policy 2 'a sequence classifier .* the policy is a' -- \
  "$rlcpp" train -m "$rm_dir" -d "$src/examples/arith/train.jsonl"
printf '%s\n' '{"prompt": "Q", "chosen": "a"}' > "$tmp/bad_pairs.jsonl"
expect pairs-malformed 2 'bad_pairs.jsonl:1: missing "rejected"' -- "$rlcpp" train-rm -m "$model" -d "$tmp/bad_pairs.jsonl"
expect normalize-without-model 2 '--normalize-reward, --reward-clip and --reward-model-dtype are for a reward model' -- \
  "$rlcpp" train -m "$model" -d "$src/examples/arith/train.jsonl" --normalize-reward

# 6b. Data parallelism under mpirun: two processes take the one process's steps (fp64, to rounding:
#     the gradients are summed in another order), for train-rm and sft; a run of two resumes in one.
if command -v mpirun > /dev/null; then
  mpi2() { timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS=1 -np 2 "$rlcpp" "$@"; }
  # 24 held-out pairs, scored every step (so runs of different lengths log the same steps) and by
  # each checkpoint's calibration (the scores' mean and std), which would otherwise score 512
  # training pairs: that made this test's longest part.
  head -n 24 "$pairs_test" > "$tmp/held24.jsonl"
  rm_common=(-m "$model" -d "$pairs" -ed "$tmp/held24.jsonl" -ei 1 -tbs 8 -tmbs 2 -lr 1e-3 --dtype float64 --seed 0 -sd "$tmp/runs")
  OMP_NUM_THREADS=1 "$rlcpp" train-rm "${rm_common[@]}" -p rm-one --max-steps 3 --si 1 > "$tmp/rm-one.log" 2>&1 || bad "train-rm, one process"
  mpi2 train-rm "${rm_common[@]}" -p rm-two --max-steps 2 --si 2 > "$tmp/rm-two.log" 2>&1 || { bad "train-rm, two processes:"; tail -5 "$tmp/rm-two.log"; }
  OMP_NUM_THREADS=1 "$rlcpp" train-rm "${rm_common[@]}" -p rm-two-on -cp "$tmp/runs/rm-two/step-2" --max-steps 3 \
    > "$tmp/rm-two-on.log" 2>&1 || bad "train-rm resumed in one process"
  if weights_close "$tmp/runs/rm-two/step-2/model.safetensors" "$tmp/runs/rm-one/step-2/model.safetensors" 1e-10 &&
     metrics_close <(step_lines "$tmp/runs/rm-one/metrics.jsonl" | head -2) <(step_lines "$tmp/runs/rm-two/metrics.jsonl") &&
     ends_with_status "$tmp/runs/rm-two/metrics.jsonl" finished 2 &&
     weights_close "$tmp/runs/rm-two-on/step-3/model.safetensors" "$tmp/runs/rm-one/step-3/model.safetensors" 1e-10 &&
     weights_moved "$tmp/runs/rm-one/step-1/model.safetensors" "$tmp/runs/rm-one/step-3/model.safetensors"; then
    ok "train-rm on two processes takes the one process's steps, and resumes in one"
  else
    bad "train-rm on two processes"
  fi
  sft_common=(-m "$model" -d "$src/examples/arith/sft.jsonl" -tbs 6 -tmbs 2 -lr 1e-4 --dtype float64 --seed 0 -sd "$tmp/runs" --max-steps 2)
  OMP_NUM_THREADS=1 "$rlcpp" sft "${sft_common[@]}" -p sft-one > "$tmp/sft-one.log" 2>&1 || bad "sft, one process"
  mpi2 sft "${sft_common[@]}" -p sft-two > "$tmp/sft-two.log" 2>&1 || { bad "sft, two processes:"; tail -5 "$tmp/sft-two.log"; }
  weights_close "$tmp/runs/sft-two/step-2/model.safetensors" "$tmp/runs/sft-one/step-2/model.safetensors" 1e-10 &&
    metrics_close "$tmp/runs/sft-one/metrics.jsonl" "$tmp/runs/sft-two/metrics.jsonl" \
    && ok "sft on two processes takes the one process's steps" || bad "sft on two processes"
  # ZeRO over the two processes: train-rm at stage 2 (moments and gradients sharded; its checkpoint
  # holds one optimizer shard per process) resumed in one process, sft at stage 1.
  mpi2 train-rm "${rm_common[@]}" -zero 2 -p rm-zero2 --max-steps 2 --si 2 > "$tmp/rm-zero2.log" 2>&1 || { bad "train-rm -zero 2:"; tail -5 "$tmp/rm-zero2.log"; }
  OMP_NUM_THREADS=1 "$rlcpp" train-rm "${rm_common[@]}" -p rm-zero2-on -cp "$tmp/runs/rm-zero2/step-2" --max-steps 3 \
    > "$tmp/rm-zero2-on.log" 2>&1 || bad "train-rm -zero 2 resumed in one process"
  if [ "$(ls "$tmp/runs/rm-zero2/step-2/trainer_state" | grep -c '^optimizer-shard-')" -eq 2 ] &&
     weights_close "$tmp/runs/rm-zero2/step-2/model.safetensors" "$tmp/runs/rm-one/step-2/model.safetensors" 1e-10 &&
     weights_close "$tmp/runs/rm-zero2-on/step-3/model.safetensors" "$tmp/runs/rm-one/step-3/model.safetensors" 1e-10; then
    ok "train-rm -zero 2 on two processes takes the one process's steps, and resumes in one from its shards"
  else
    bad "train-rm -zero 2 on two processes"
  fi
  mpi2 sft "${sft_common[@]}" -zero 1 -p sft-zero1 > "$tmp/sft-zero1.log" 2>&1 || { bad "sft -zero 1:"; tail -5 "$tmp/sft-zero1.log"; }
  weights_close "$tmp/runs/sft-zero1/step-2/model.safetensors" "$tmp/runs/sft-one/step-2/model.safetensors" 1e-10 &&
    metrics_close "$tmp/runs/sft-one/metrics.jsonl" "$tmp/runs/sft-zero1/metrics.jsonl" \
    && ok "sft -zero 1 on two processes takes the one process's steps" || bad "sft -zero 1 on two processes"
  # LoRA under ZeRO-2 (the adapters' moments and gradients sharded): the one process's steps, and
  # resumed in one process from its two optimizer shards.
  sft_lora=(-m "$model" -d "$src/examples/arith/sft.jsonl" -tbs 6 -tmbs 2 -lr 1e-4 --dtype float64 --seed 0 -sd "$tmp/runs" --lora-rank 4)
  OMP_NUM_THREADS=1 "$rlcpp" sft "${sft_lora[@]}" --max-steps 3 --si 1 -p sft-lora-one > "$tmp/sft-lora-one.log" 2>&1 || bad "sft LoRA, one process"
  mpi2 sft "${sft_lora[@]}" -zero 2 --max-steps 2 --si 2 -p sft-lora-zero2 > "$tmp/sft-lora-zero2.log" 2>&1 \
    || { bad "sft LoRA -zero 2:"; tail -5 "$tmp/sft-lora-zero2.log"; }
  OMP_NUM_THREADS=1 "$rlcpp" sft "${sft_lora[@]}" --max-steps 3 -p sft-lora-zero2-on -cp "$tmp/runs/sft-lora-zero2/step-2" \
    > "$tmp/sft-lora-zero2-on.log" 2>&1 || bad "sft LoRA -zero 2 resumed in one process"
  if [ "$(ls "$tmp/runs/sft-lora-zero2/step-2/trainer_state" | grep -c '^optimizer-shard-')" -eq 2 ] &&
     weights_close "$tmp/runs/sft-lora-zero2/step-2/adapter_model.safetensors" "$tmp/runs/sft-lora-one/step-2/adapter_model.safetensors" 1e-10 &&
     weights_close "$tmp/runs/sft-lora-zero2-on/step-3/adapter_model.safetensors" "$tmp/runs/sft-lora-one/step-3/adapter_model.safetensors" 1e-10 &&
     weights_moved "$tmp/runs/sft-lora-one/step-1/adapter_model.safetensors" "$tmp/runs/sft-lora-one/step-3/adapter_model.safetensors"; then
    ok "sft LoRA -zero 2 on two processes takes the one process's steps, and resumes in one from its shards"
  else
    bad "sft LoRA -zero 2 on two processes"
  fi
  expect sft-zero-one-process 2 'one process has nothing to shard: leave -zero at 0' -- \
    "$rlcpp" sft "${sft_common[@]}" -zero 1 -p zero-alone
  # ZeRO-3 (the weights sharded too): train-rm, whose rank 0 gathers the model to score the
  # held-out pairs each step and calibrate the checkpoint's mean and std, and sft; each takes the
  # one process's steps (rm-one's), and the train-rm run resumes in one process from its shards.
  mpi2 train-rm "${rm_common[@]}" -zero 3 -p rm-zero3 --max-steps 2 --si 2 > "$tmp/rm-zero3.log" 2>&1 \
    || { bad "train-rm -zero 3:"; tail -5 "$tmp/rm-zero3.log"; }
  OMP_NUM_THREADS=1 "$rlcpp" train-rm "${rm_common[@]}" -p rm-zero3-on -cp "$tmp/runs/rm-zero3/step-2" --max-steps 3 \
    > "$tmp/rm-zero3-on.log" 2>&1 || bad "train-rm -zero 3 resumed in one process"
  calibrated() { python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print("%.10f %.10f" % (c["mean"], c["std"]))' "$1"; }
  if [ "$(ls "$tmp/runs/rm-zero3/step-2/trainer_state" | grep -c '^optimizer-shard-')" -eq 2 ] &&
     weights_close "$tmp/runs/rm-zero3/step-2/model.safetensors" "$tmp/runs/rm-one/step-2/model.safetensors" 1e-10 &&
     metrics_close <(step_lines "$tmp/runs/rm-one/metrics.jsonl" | head -2) <(step_lines "$tmp/runs/rm-zero3/metrics.jsonl") &&
     [ "$(step_lines "$tmp/runs/rm-zero3/metrics.jsonl" | grep -c '"eval"')" -eq 2 ] &&
     [ "$(calibrated "$tmp/runs/rm-zero3/step-2/config.json")" = "$(calibrated "$tmp/runs/rm-one/step-2/config.json")" ] &&
     weights_close "$tmp/runs/rm-zero3-on/step-3/model.safetensors" "$tmp/runs/rm-one/step-3/model.safetensors" 1e-10; then
    ok "train-rm -zero 3 on two processes takes the one process's steps and held-out figures, and resumes in one from its shards"
  else
    bad "train-rm -zero 3 on two processes"
  fi
  mpi2 sft "${sft_common[@]}" -zero 3 -p sft-zero3 > "$tmp/sft-zero3.log" 2>&1 || { bad "sft -zero 3:"; tail -5 "$tmp/sft-zero3.log"; }
  weights_close "$tmp/runs/sft-zero3/step-2/model.safetensors" "$tmp/runs/sft-one/step-2/model.safetensors" 1e-10 &&
    metrics_close "$tmp/runs/sft-one/metrics.jsonl" "$tmp/runs/sft-zero3/metrics.jsonl" \
    && ok "sft -zero 3 on two processes takes the one process's steps" || bad "sft -zero 3 on two processes"
  # Tensor parallelism (--train-tp): a replica's ranks split the model. train-rm on one replica of
  # two ranks (its held-out figures and calibration computed by both) and on two replicas of two
  # with ZeRO-3; sft whole and with LoRA; each takes the one process's steps, and resumes exactly.
  mpi4() { timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS=1 -np 4 "$rlcpp" "$@"; }
  mpi2 train-rm "${rm_common[@]}" --train-tp 2 -p rm-tp2 --max-steps 2 --si 2 > "$tmp/rm-tp2.log" 2>&1 \
    || { bad "train-rm --train-tp 2:"; tail -5 "$tmp/rm-tp2.log"; }
  mpi2 train-rm "${rm_common[@]}" --train-tp 2 -p rm-tp2-on -cp "$tmp/runs/rm-tp2/step-2" --max-steps 3 \
    > "$tmp/rm-tp2-on.log" 2>&1 || bad "train-rm --train-tp 2 resumed"
  mpi4 train-rm "${rm_common[@]}" --train-tp 2 -zero 3 -p rm-tp2z3 --max-steps 2 --si 2 > "$tmp/rm-tp2z3.log" 2>&1 \
    || { bad "train-rm --train-tp 2 -zero 3 on 4 processes:"; tail -5 "$tmp/rm-tp2z3.log"; }
  # Pipeline parallelism (--pp): each of the two ranks holds half the layers, the score head on
  # the last; the held-out figures and the calibration run through both stages.
  mpi2 train-rm "${rm_common[@]}" --pp 2 -p rm-pp2 --max-steps 2 --si 2 > "$tmp/rm-pp2.log" 2>&1 \
    || { bad "train-rm --pp 2:"; tail -5 "$tmp/rm-pp2.log"; }
  mpi2 train-rm "${rm_common[@]}" --pp 2 -p rm-pp2-on -cp "$tmp/runs/rm-pp2/step-2" --max-steps 3 \
    > "$tmp/rm-pp2-on.log" 2>&1 || bad "train-rm --pp 2 resumed"
  for run in rm-tp2 rm-tp2z3 rm-pp2; do
    if weights_close "$tmp/runs/$run/step-2/model.safetensors" "$tmp/runs/rm-one/step-2/model.safetensors" 1e-10 &&
       metrics_close <(step_lines "$tmp/runs/rm-one/metrics.jsonl" | head -2) <(step_lines "$tmp/runs/$run/metrics.jsonl") &&
       [ "$(step_lines "$tmp/runs/$run/metrics.jsonl" | grep -c '"eval"')" -eq 2 ] &&
       [ "$(calibrated "$tmp/runs/$run/step-2/config.json")" = "$(calibrated "$tmp/runs/rm-one/step-2/config.json")" ]; then
      ok "train-rm $run takes the one process's steps, held-out figures and calibration"
    else
      bad "train-rm $run"
    fi
  done
  for run in rm-tp2-on rm-pp2-on; do
    weights_close "$tmp/runs/$run/step-3/model.safetensors" "$tmp/runs/rm-one/step-3/model.safetensors" 1e-10 \
      && ok "train-rm $run resumes exactly" || bad "train-rm $run resumes exactly"
  done
  python3 - "$tmp/runs/rm-pp2/step-2" "$model" <<'PY' && ok "train-rm --pp 2 writes one whole sequence classifier" || bad "train-rm --pp 2 layout"
import json, struct, sys
d, base = sys.argv[1], json.load(open(sys.argv[2] + "/config.json"))
c = json.load(open(d + "/config.json"))
assert c["architectures"] == ["Qwen2ForSequenceClassification"] and c["num_hidden_layers"] == base["num_hidden_layers"], c
with open(d + "/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
layers = {int(k.split(".")[2]) for k in h if k.startswith("model.layers.")}
assert layers == set(range(base["num_hidden_layers"])), sorted(layers)
assert h["score.weight"]["shape"] == [1, base["hidden_size"]] and "model.embed_tokens.weight" in h and "lm_head.weight" not in h, sorted(h)
PY
  # As for `rlcpp train`, a checkpoint resumes at its own --train-tp (its optimizer parts are per rank).
  expect train-rm-tp-resume-elsewhere 2 'parallel.tensor_parallel_size: 2 -> 1' -- \
    "$rlcpp" train-rm "${rm_common[@]}" -p rm-tp2-one -cp "$tmp/runs/rm-tp2/step-2" --max-steps 3
  mpi2 sft "${sft_common[@]}" --train-tp 2 -p sft-tp2 > "$tmp/sft-tp2.log" 2>&1 || { bad "sft --train-tp 2:"; tail -5 "$tmp/sft-tp2.log"; }
  mpi4 sft "${sft_common[@]}" --train-tp 2 -zero 1 -p sft-tp2z1 > "$tmp/sft-tp2z1.log" 2>&1 || { bad "sft --train-tp 2 -zero 1:"; tail -5 "$tmp/sft-tp2z1.log"; }
  mpi4 sft "${sft_common[@]}" --train-tp 2 --pp 2 -p sft-tp2pp2 > "$tmp/sft-tp2pp2.log" 2>&1 || { bad "sft --train-tp 2 --pp 2:"; tail -5 "$tmp/sft-tp2pp2.log"; }
  mpi4 sft "${sft_common[@]}" --pp 2 -zero 1 -p sft-pp2z1 > "$tmp/sft-pp2z1.log" 2>&1 || { bad "sft --pp 2 -zero 1:"; tail -5 "$tmp/sft-pp2z1.log"; }
  for run in sft-tp2 sft-tp2z1 sft-tp2pp2 sft-pp2z1; do
    weights_close "$tmp/runs/$run/step-2/model.safetensors" "$tmp/runs/sft-one/step-2/model.safetensors" 1e-10 &&
      metrics_close "$tmp/runs/sft-one/metrics.jsonl" "$tmp/runs/$run/metrics.jsonl" \
      && ok "sft $run takes the one process's steps" || bad "sft $run"
  done
  mpi2 sft "${sft_lora[@]}" --train-tp 2 --max-steps 2 --si 2 -p sft-lora-tp2 > "$tmp/sft-lora-tp2.log" 2>&1 \
    || { bad "sft LoRA --train-tp 2:"; tail -5 "$tmp/sft-lora-tp2.log"; }
  mpi2 sft "${sft_lora[@]}" --train-tp 2 --max-steps 3 -p sft-lora-tp2-on -cp "$tmp/runs/sft-lora-tp2/step-2" \
    > "$tmp/sft-lora-tp2-on.log" 2>&1 || bad "sft LoRA --train-tp 2 resumed"
  weights_close "$tmp/runs/sft-lora-tp2/step-2/adapter_model.safetensors" "$tmp/runs/sft-lora-one/step-2/adapter_model.safetensors" 1e-10 &&
    weights_close "$tmp/runs/sft-lora-tp2-on/step-3/adapter_model.safetensors" "$tmp/runs/sft-lora-one/step-3/adapter_model.safetensors" 1e-10 \
    && ok "sft LoRA --train-tp 2 takes the one process's steps, and resumes exactly" || bad "sft LoRA --train-tp 2"
  mpi2 sft "${sft_lora[@]}" --pp 2 --max-steps 2 --si 2 -p sft-lora-pp2 > "$tmp/sft-lora-pp2.log" 2>&1 \
    || { bad "sft LoRA --pp 2:"; tail -5 "$tmp/sft-lora-pp2.log"; }
  weights_close "$tmp/runs/sft-lora-pp2/step-2/adapter_model.safetensors" "$tmp/runs/sft-lora-one/step-2/adapter_model.safetensors" 1e-10 \
    && ok "sft LoRA --pp 2 takes the one process's steps" || bad "sft LoRA --pp 2"
  expect sft-tp-one-process 2 'tensor parallelism splits the model over the processes of mpirun' -- \
    "$rlcpp" sft "${sft_common[@]}" --train-tp 2 -p tp-alone
  expect sft-pp-one-process 2 'pipeline parallelism splits the model.s layers over the processes of mpirun' -- \
    "$rlcpp" sft "${sft_common[@]}" --pp 2 -p pp-alone
  # A LoRA reward model on two stages: the adapter (PEFT's SEQ_CLS, the score head beside it) and the
  # merged classifier, each gathered from the stages, as one process writes them.
  OMP_NUM_THREADS=1 "$rlcpp" train-rm "${rm_common[@]}" --lora-rank 4 -p rm-lora-one --max-steps 2 --si 2 > "$tmp/rm-lora-one.log" 2>&1 \
    || { bad "train-rm LoRA, one process:"; tail -5 "$tmp/rm-lora-one.log"; }
  mpi2 train-rm "${rm_common[@]}" --lora-rank 4 --pp 2 -p rm-lora-pp2 --max-steps 2 --si 2 > "$tmp/rm-lora-pp2.log" 2>&1 \
    || { bad "train-rm LoRA --pp 2:"; tail -5 "$tmp/rm-lora-pp2.log"; }
  if weights_close "$tmp/runs/rm-lora-pp2/step-2/adapter_model.safetensors" "$tmp/runs/rm-lora-one/step-2/adapter_model.safetensors" 1e-10 &&
     weights_close "$tmp/runs/rm-lora-pp2/step-2/merged/model.safetensors" "$tmp/runs/rm-lora-one/step-2/merged/model.safetensors" 1e-10 &&
     cmp -s "$tmp/runs/rm-lora-pp2/step-2/adapter_config.json" "$tmp/runs/rm-lora-one/step-2/adapter_config.json" &&
     [ "$(calibrated "$tmp/runs/rm-lora-pp2/step-2/merged/config.json")" = "$(calibrated "$tmp/runs/rm-lora-one/step-2/merged/config.json")" ]; then
    ok "train-rm LoRA --pp 2: the adapter and the merged classifier as one process writes them"
  else
    bad "train-rm LoRA --pp 2"
  fi
  expect train-rm-tp-not-dividing 2 'give a process count that 2 divides' -- \
    timeout 120 mpirun --oversubscribe -x OMP_NUM_THREADS=1 -np 3 "$rlcpp" train-rm "${rm_common[@]}" --train-tp 2 --max-steps 1 -p tp3
  expect train-rm-zero4 2 'give 0 to 3' -- mpi2 train-rm "${rm_common[@]}" -zero 4 --max-steps 1 -p zero4
  expect train-rm-tbs-below-processes 2 '-tbs 1 gives some of them no example' -- \
    mpi2 train-rm -m "$model" -d "$pairs" -tbs 1 --max-steps 1 -sd "$tmp/runs" -p mpi-small

  # Reward ranks (--reward-ranks): the reward model on ranks of its own scores the engines'
  # responses. Each run equals the one whose engines load the model themselves (metrics and
  # weights, bit for bit): two engines sharing one reward rank, and partial rollouts (the round is
  # graded on a thread while the worker takes weights, the rows sent by the worker's own thread).
  mpin() { local n=$1; shift; timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS=1 -np "$n" "$rlcpp" "$@"; }
  # Evaluation too (-ed, at the last step): trainer 0 scores it on the first reward rank rather than
  # loading the model, with the same numbers.
  rr=(train -m "$model" -d "$src/examples/arith/train.jsonl" -rt model --reward-model "$rm_dir" -g 2 -tbs 2 -tMbs 2 -tmbs 4 --mnt 16
      --max-steps 3 --si 1 --seed 0 -sd "$tmp/runs" -t 1 -ed "{\"held\": \"$src/examples/arith/test.jsonl\"}" -ei 3 --eval-limit 4)
  mpin 3 "${rr[@]}" -i 2 -p rr-local > "$tmp/rr-local.log" 2>&1 || { bad "reward model on the engines:"; tail -5 "$tmp/rr-local.log"; }
  mpin 4 "${rr[@]}" -i 2 --reward-ranks 1 -p rr-ranks > "$tmp/rr-ranks.log" 2>&1 || { bad "--reward-ranks 1:"; tail -5 "$tmp/rr-ranks.log"; }
  partial=(-i 1 -nb 1 --partial-rollout --switch-interval 4)
  mpin 2 "${rr[@]}" "${partial[@]}" -p rr-partial-local > "$tmp/rr-partial-local.log" 2>&1 \
    || { bad "partial rollouts with the reward model on the engine:"; tail -5 "$tmp/rr-partial-local.log"; }
  mpin 3 "${rr[@]}" "${partial[@]}" --reward-ranks 1 -p rr-partial-ranks > "$tmp/rr-partial-ranks.log" 2>&1 \
    || { bad "partial rollouts with --reward-ranks 1:"; tail -5 "$tmp/rr-partial-ranks.log"; }
  # With the others: a tensor-parallel engine (--rollout-tp 2) and a LoRA policy; and a run resumed
  # from step 2 of the engines' own run with a reward rank (reward ranks hold no state).
  tp_lora=(-i 2 --rollout-tp 2 --lora-rank 4)
  mpin 3 "${rr[@]}" "${tp_lora[@]}" -p rr-tp-local > "$tmp/rr-tp-local.log" 2>&1 \
    || { bad "LoRA and --rollout-tp 2 with the reward model on the engine:"; tail -5 "$tmp/rr-tp-local.log"; }
  mpin 4 "${rr[@]}" "${tp_lora[@]}" --reward-ranks 1 -p rr-tp-ranks > "$tmp/rr-tp-ranks.log" 2>&1 \
    || { bad "LoRA and --rollout-tp 2 with --reward-ranks 1:"; tail -5 "$tmp/rr-tp-ranks.log"; }
  mpin 4 "${rr[@]}" -i 2 --reward-ranks 1 -cp "$tmp/runs/rr-local/step-2" -p rr-resumed > "$tmp/rr-resumed.log" 2>&1 \
    || { bad "resumed with --reward-ranks 1:"; tail -5 "$tmp/rr-resumed.log"; }
  if cmp -s "$tmp/runs/rr-local/step-3/model.safetensors" "$tmp/runs/rr-resumed/step-3/model.safetensors" &&
     cmp -s <(metrics_of "$tmp/runs/rr-local/metrics.jsonl" | tail -2) <(metrics_of "$tmp/runs/rr-resumed/metrics.jsonl"); then
    ok "a run resumed with a reward rank from the engines' own checkpoint ends bit for bit where they do"
  else
    bad "resumed with --reward-ranks 1 differs"
  fi
  for pair in "rr-local rr-ranks" "rr-partial-local rr-partial-ranks" "rr-tp-local rr-tp-ranks"; do
    set -- $pair
    if [ "$(step_count "$tmp/runs/$2/metrics.jsonl")" -eq 3 ] &&
       cmp -s <(metrics_of "$tmp/runs/$1/metrics.jsonl") <(metrics_of "$tmp/runs/$2/metrics.jsonl") &&
       cmp -s "$tmp/runs/$1/step-3/$(basename "$(ls "$tmp/runs/$1/step-3/"*.safetensors | head -1)")" \
         "$tmp/runs/$2/step-3/$(basename "$(ls "$tmp/runs/$1/step-3/"*.safetensors | head -1)")" &&
       grep -q 'reward 0\] scoring with the reward model.* and trainer 0.s evaluations' "$tmp/$2.log" &&
       grep -q '"held"' "$tmp/runs/$2/metrics.jsonl"; then
      ok "$2: the reward model on a rank of its own gives the engines' own run and evaluation, bit for bit"
    else
      bad "$2 differs from $1"; diff <(metrics_of "$tmp/runs/$1/metrics.jsonl") <(metrics_of "$tmp/runs/$2/metrics.jsonl") | head -4
    fi
  done
  # Multi-turn episodes (the tool-use model, graded on its final answers) under partial rollouts
  # with a checkpoint every step, episodes cut in flight: a reward rank gives the engine's own run.
  turns=(train -m "$src/models/tools-tiny" -d "$src/examples/tools/train.jsonl" --tools calculator --max-turns 3 -rt model
         --reward-model "$rm_dir" -g 4 -tbs 4 -tMbs 4 -tmbs 16 --mnt 64 --max-steps 4 --si 1 --seed 3 -sd "$tmp/runs" -t 1 -i 1
         -temp 1.0 -ibs 8 -nb 1 --partial-rollout --switch-interval 20)
  mpin 2 "${turns[@]}" -p rr-turns-local > "$tmp/rr-turns-local.log" 2>&1 || { bad "multi-turn with the reward model on the engine:"; tail -5 "$tmp/rr-turns-local.log"; }
  mpin 3 "${turns[@]}" --reward-ranks 1 -p rr-turns-ranks > "$tmp/rr-turns-ranks.log" 2>&1 || { bad "multi-turn with --reward-ranks 1:"; tail -5 "$tmp/rr-turns-ranks.log"; }
  if [ "$(step_count "$tmp/runs/rr-turns-ranks/metrics.jsonl")" -eq 4 ] &&
     cmp -s <(metrics_of "$tmp/runs/rr-turns-local/metrics.jsonl") <(metrics_of "$tmp/runs/rr-turns-ranks/metrics.jsonl") &&
     cmp -s "$tmp/runs/rr-turns-local/step-4/model.safetensors" "$tmp/runs/rr-turns-ranks/step-4/model.safetensors" &&
     python3 -c 'import json,sys; sys.exit(0 if sum(r["tool_calls"] for r in map(json.loads, open(sys.argv[1])) if "step" in r) > 0 else 1)' \
       "$tmp/runs/rr-turns-ranks/metrics.jsonl"; then
    ok "multi-turn episodes cut at checkpoints, graded on a reward rank: the engine's own run, bit for bit"
  else
    bad "multi-turn with --reward-ranks 1 differs"; diff <(metrics_of "$tmp/runs/rr-turns-local/metrics.jsonl") <(metrics_of "$tmp/runs/rr-turns-ranks/metrics.jsonl") | head -4
  fi
  expect reward-ranks-colocated 2 '--reward-ranks 1: reward ranks serve rollout workers' -- \
    "$rlcpp" train -m "$model" -d "$src/examples/arith/train.jsonl" -rt model --reward-model "$rm_dir" --reward-ranks 1
  expect reward-ranks-without-model 2 '--reward-ranks 1: reward ranks hold the reward model; give it with --reward-model' -- \
    "$rlcpp" train -m "$model" -d "$src/examples/arith/train.jsonl" -t 1 -i 1 --reward-ranks 1
  expect reward-ranks-over-engines 2 '--reward-ranks 3 with -i 2: each reward rank serves one engine or more; give at most 2' -- \
    "$rlcpp" "${rr[@]}" -i 2 --reward-ranks 3 -p rr-over
  expect reward-ranks-processes 2 '-t 1 -i 1 --reward-ranks 1 asks for 3 processes, but 2 were started' -- \
    mpin 2 "${rr[@]}" -i 1 --reward-ranks 1 -p rr-np
fi

# 7. The example, shortened.
out=$(RM_STEPS=6 STEPS=2 EVAL_LIMIT=16 bash "$src/examples/arith/reward_model.sh" "$rlcpp" "$tmp/example" 2>&1)
if [ $? -eq 0 ] && grep -qE '^GRPO, reward model \(-rt model\) +[0-9.]+%( [0-9.]+%)+$' <<<"$out" &&
   grep -qE '^PPO, reward model \(-rt model\) +[0-9.]+%( [0-9.]+%)+$' <<<"$out" && grep -q 'held-out pair accuracy' <<<"$out"; then
  ok "examples/arith/reward_model.sh (shortened)"
else
  bad "examples/arith/reward_model.sh (shortened):"; echo "$out" | tail -20
fi
exit $failed
