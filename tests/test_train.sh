#!/usr/bin/env bash
# `rlcpp train` end to end on a tiny model: every algorithm preset with loadable checkpoints, an
# exact resume after kill -9, an incompatible resume refused, --max-checkpoints, a run file with
# ChatLearn's names, and a toy task whose reward must rise. Usage: test_train.sh RLCPP_BINARY
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_train.sh RLCPP_BINARY}")
source "$(dirname "$0")/lib.sh"

# A random model over a byte vocabulary (toy/) and 8 prompts (data.jsonl).
"$here/make_toy_task.sh" "$rlcpp" "$fixtures" || bad toy-task
reward=(--reward-cmd "python3 $here/data/digits_reward.py")
base=(-m toy -d data.jsonl -g 4 -tbs 2 -tMbs 1 -tmbs 4 --mnt 12 -lr 3e-3 -sd runs "${reward[@]}")

# Every preset: 3 steps, checkpoints at 2 and 3 that `info` and the model loader accept.
for algo in GRPO DAPO DR_GRPO RLOO REINFORCE_PPB REINFORCE_PP GSPO; do
  extra=(); [ "$algo" = DAPO ] && extra=(--filter-range none)  # the toy reward has no "correct" answers to filter on
  if "$rlcpp" train "${base[@]}" -a "$algo" "${extra[@]}" --max-steps 3 --si 2 -p "$algo" > "$algo.log" 2>&1 \
     && [ "$(step_count "runs/$algo/metrics.jsonl")" -eq 3 ] && ends_with_status "runs/$algo/metrics.jsonl" finished 3 \
     && [ "$(cat "runs/$algo/latest")" = step-3 ] \
     && [ -d "runs/$algo/step-2/trainer_state" ] && grep -q '"optimizer_steps":6' "runs/$algo/metrics.jsonl" \
     && "$rlcpp" info "runs/$algo/step-3" | grep -q Qwen2ForCausalLM \
     && "$rlcpp" generate --model "runs/$algo/step-3" --prompt hi --mnt 2 > /dev/null 2>&1; then
    ok "preset-$algo"
  else
    bad "preset-$algo"; tail -5 "$algo.log"
  fi
done
# DAPO's default filter on the toy task: no group has a correct answer, so every round is filtered
# out; dynamic batching tries 1 + 3 rounds and the step trains on nothing. The run writes its
# metrics and checkpoint, then exits 2 saying it learned nothing (no silent success), which its
# metrics.jsonl's status line says too.
"$rlcpp" train "${base[@]}" -a DAPO --max-steps 1 -p dapo-filter > dapo-filter.log 2>&1
code=$?
if [ $code -eq 2 ] && grep -q 'none of them changed the policy' dapo-filter.log && [ -d runs/dapo-filter/step-1 ] \
   && grep -q '"kept_groups":0,"generated_groups":8,"sample_utilization":0.0' runs/dapo-filter/metrics.jsonl \
   && ends_with_status runs/dapo-filter/metrics.jsonl failed 1 'none of them changed the policy'; then
  ok dapo-dynamic-filter
else
  bad dapo-dynamic-filter; tail -3 dapo-filter.log; cat runs/dapo-filter/metrics.jsonl
fi
# That short step is a warning with the counts; --require-full-batch makes it an error (exit 2).
grep -q 'step 1: dynamic batching kept 0 of -tbs 2 groups after --max-dynamic-rounds 3' dapo-filter.log \
  && ok short-batch-warning || bad short-batch-warning
"$rlcpp" train "${base[@]}" -a DAPO --max-steps 1 --require-full-batch true -p dapo-full > dapo-full.log 2>&1
[ $? -eq 2 ] && grep -q 'error: step 1: 0 of -tbs 2 groups passed the filter.*--require-full-batch' dapo-full.log \
  && ok require-full-batch || { bad require-full-batch; tail -3 dapo-full.log; }

# Exact resume: a run of 8 steps, and the same run killed (-9) after its 3rd step and resumed with
# --resume auto, end with the same bytes of weights and the same metrics. KL (a reference model)
# and -ibs 2×-tbs (rollouts carried over a checkpoint) are part of what must be restored. The killed
# process writes no status line: the resumed run's file ends with its only one (finished), and
# metrics.discarded.jsonl, if the resume set steps aside, holds steps alone.
resume=("${base[@]}" -ibs 4 --kl 0.05 --max-steps 8 --si 1)
"$rlcpp" train "${resume[@]}" -p full > full.log 2>&1 || bad "resume-reference-run"
"$rlcpp" train "${resume[@]}" -p killed > killed.log 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null && [ "$(step_count runs/killed/metrics.jsonl)" -lt 3 ]; do sleep 0.01; done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
killed_at=$(step_count runs/killed/metrics.jsonl)
if [ "$killed_at" -ge 8 ]; then
  bad "resume-kill: the run finished before it could be killed"
else
  grep -q '"status":' runs/killed/metrics.jsonl && bad "resume-kill: the killed process wrote a status line"
  "$rlcpp" train "${resume[@]}" -p killed --resume auto > resumed.log 2>&1 || { bad resume-run; tail -5 resumed.log; }
  if cmp -s runs/full/step-8/model.safetensors runs/killed/step-8/model.safetensors \
     && [ "$(metrics_of runs/full/metrics.jsonl)" = "$(metrics_of runs/killed/metrics.jsonl)" ] \
     && ends_with_status runs/killed/metrics.jsonl finished 8 \
     && ! grep -q '"status":' runs/killed/metrics.discarded.jsonl 2>/dev/null; then
    ok "resume-exact (killed after $killed_at steps)"
  else
    bad "resume-exact (killed after $killed_at steps): weights or metrics differ"
    diff <(metrics_of runs/full/metrics.jsonl) <(metrics_of runs/killed/metrics.jsonl) | head -6
  fi
fi
# Relay buffer (ChatLearn's max_relay_episode 2, relay_episode_offset 1): from step 2 on, each step
# also trains on the groups of the 2 steps before it, with their rollout log-probs (the mismatch is
# measured, TIS weights them). A run rolled back to its step-3 checkpoint and resumed ends equal;
# the finished run's steps 4-6 and status line are set aside, and the resumed run ends with its own.
relay=("${base[@]}" --max-relay-episode 2 --relay-episode-offset 1 --tis-cap 2 --max-steps 6 --si 3)
"$rlcpp" train "${relay[@]}" -p relay-full > relay-full.log 2>&1 && "$rlcpp" train "${relay[@]}" -p relay-cut > relay-cut.log 2>&1 \
  || { bad relay-run; tail -3 relay-full.log; }
rm -rf runs/relay-cut/step-6 && echo step-3 > runs/relay-cut/latest
"$rlcpp" train "${relay[@]}" -p relay-cut --resume auto > relay-resumed.log 2>&1 || { bad relay-resume-run; tail -3 relay-resumed.log; }
if cmp -s runs/relay-full/step-6/model.safetensors runs/relay-cut/step-6/model.safetensors \
   && [ "$(metrics_of runs/relay-full/metrics.jsonl)" = "$(metrics_of runs/relay-cut/metrics.jsonl)" ] \
   && ends_with_status runs/relay-cut/metrics.jsonl finished 6 \
   && [ "$(step_count runs/relay-cut/metrics.discarded.jsonl)" -eq 3 ] \
   && ends_with_status runs/relay-cut/metrics.discarded.jsonl finished 6 \
   && python3 - runs/relay-full/metrics.jsonl <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
assert [r["relayed_groups"] for r in rows] == [0, 2, 4, 4, 4, 4], [r["relayed_groups"] for r in rows]
assert all(r["mismatch_abs_mean"] > 1e-4 for r in rows[1:]), "relayed samples come from older policies"
assert rows[0]["mismatch_abs_mean"] < 1e-4, "fresh samples: the sampler's own log-probs"
PY
then
  ok relay-buffer-resume-exact
else
  bad relay-buffer-resume-exact; diff <(metrics_of runs/relay-full/metrics.jsonl) <(metrics_of runs/relay-cut/metrics.jsonl) | head -4
fi

# TensorBoard: the killed-and-resumed run's event files, read by an independent reader that checks
# every checksum, hold every number of metrics.jsonl at its step (float32), once TensorBoard's
# restart rule (a SessionLog START at step s drops earlier files' events from s on) is applied.
if python3 - runs/killed "$here/read_tfevents.py" <<'PY'
import glob, json, subprocess, sys
run, reader = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(f"{run}/events.out.tfevents.*"), key=lambda f: int(f.split(".")[3]) * 10**9 + int(f.split(".")[-1]))
scalars, restarts = {}, 0
for f in files:
    for line in subprocess.run([sys.executable, reader, f], check=True, capture_output=True, text=True).stdout.splitlines():
        e = json.loads(line)
        if e.get("session_log", {}).get("1") == 1:  # START (field 1 status)
            restarts += 1
            scalars = {k: v for k, v in scalars.items() if k[0] < e["step"]}
        for tag, value in e.get("scalars", {}).items():
            scalars[(e["step"], tag)] = value
def flat(prefix, v, out):
    if isinstance(v, dict):
        for k, c in v.items(): flat(f"{prefix}/{k}" if prefix else k, c, out)
    elif isinstance(v, (int, float)) and not isinstance(v, bool) and prefix != "step":
        out[prefix] = v
expected = {}
for line in open(f"{run}/metrics.jsonl"):
    d = json.loads(line); out = {}
    if "step" not in d: continue  # the run's status line: not a step's, no scalars
    flat("", d, out)
    for tag, v in out.items(): expected[(d["step"], tag)] = v
bad = [k for k in expected if k not in scalars or abs(scalars[k] - expected[k]) > 1e-6 * max(1.0, abs(expected[k]))]
extra = [k for k in scalars if k not in expected]
print(f"     tensorboard: {len(files)} files, {len(scalars)} scalars, {restarts} restart(s), {len(bad)} wrong, {len(extra)} extra")
sys.exit(0 if len(files) == 2 and restarts == 1 and not bad and not extra and len(expected) > 100 else 1)
PY
then ok tensorboard-events; else bad tensorboard-events; fi
first_events=$(ls runs/full/events.out.tfevents.* | head -1)
python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0x20; open("corrupt.tfevents", "wb").write(b)' "$first_events"
if ! python3 "$here/read_tfevents.py" corrupt.tfevents > /dev/null 2> corrupt.err && grep -q 'checksum' corrupt.err; then
  ok tensorboard-checksums
else
  bad tensorboard-checksums
fi
# A checkpoint continued with other settings is refused, naming them.
other=(-m toy -d data.jsonl -g 2 -tbs 2 -tMbs 1 -tmbs 2 --mnt 12 -lr 1e-3 -sd runs "${reward[@]}" -ibs 4 --kl 0.05)
out=$("$rlcpp" train "${other[@]}" --max-steps 8 -p other -cp runs/full/step-4 2>&1)
if [ $? -eq 2 ] && grep -q 'train.learning_rate: 0.003 -> 0.001' <<<"$out" && grep -q 'rollout.num_generations: 4 -> 2' <<<"$out"; then
  ok resume-incompatible
else
  bad resume-incompatible; echo "$out" | head -5
fi
# A fresh run over an existing one is refused, and touches nothing of it (its config.yaml stays);
# --max-checkpoints prunes.
cp runs/full/config.yaml full-config.yaml
out=$("$rlcpp" train "${resume[@]}" --weight-decay 0.02 -p full 2>&1)
[ $? -eq 2 ] && grep -q 'already holds a run' <<<"$out" && cmp -s full-config.yaml runs/full/config.yaml \
  && ok fresh-over-existing || { bad fresh-over-existing; echo "$out"; diff full-config.yaml runs/full/config.yaml; }
# Sizes against the dataset before any work; --skip-bad-lines and --reward-timeout are train's too.
toy=(-m toy -d data.jsonl -g 4 -tMbs 1 -tmbs 4 --mnt 12 -lr 3e-3 "${reward[@]}")
out=$("$rlcpp" train "${toy[@]}" -sd runs -tbs 1000 --max-steps 1 -p too-big 2>&1)
[ $? -eq 2 ] && grep -q 'asks for 1000 prompts per step, but data.jsonl has 8' <<<"$out" && [ ! -e runs/too-big/config.yaml ] \
  && ok batch-larger-than-dataset || { bad batch-larger-than-dataset; echo "$out" | tail -3; }
{ cat data.jsonl; echo '{oops'; } > data-bad.jsonl
"$rlcpp" train "${base[@]/data.jsonl/data-bad.jsonl}" --skip-bad-lines --reward-timeout 5 --max-steps 1 -p skip-bad > skip-bad.log 2>&1 \
  && grep -q 'skipped 1 malformed line' skip-bad.log && ok train-skip-bad-lines || { bad train-skip-bad-lines; tail -3 skip-bad.log; }
"$rlcpp" train "${base[@]}" --max-steps 4 --si 1 --max-checkpoints 2 -p pruned > pruned.log 2>&1
[ "$(ls -d runs/pruned/step-* | xargs -n1 basename | sort | tr '\n' ' ')" = "step-3 step-4 " ] && ok max-checkpoints \
  || { bad max-checkpoints; ls runs/pruned; }

# A disk that cannot take the next checkpoint: it is refused before a byte is written, naming the
# free and needed MiB, the earlier one intact. The disk is a tmpfs of about 1.5 checkpoints (needs
# root, as CI runs; skipped otherwise).
cleanup_extra() { mountpoint -q "$tmp/small" 2>/dev/null && umount "$tmp/small"; }
mkdir -p small
ckpt_kb=$(( $(du -sk runs/GRPO/step-2 | cut -f1) ))
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=$(( ckpt_kb * 3 / 2 + 64 ))k tmpfs small 2>/dev/null; then
  out=$("$rlcpp" train "${toy[@]}" -tbs 2 -sd small --max-steps 2 --si 1 -p full-disk 2>&1)
  code=$?
  if [ $code -eq 2 ] && grep -qE 'checkpoint step-2: .* has [0-9.]+ MiB free and the checkpoint needs about' <<<"$out" \
     && grep -q 'nothing was written' <<<"$out" \
     && [ ! -e small/full-disk/.step-2.tmp ] && [ "$(cat small/full-disk/latest)" = step-1 ] \
     && "$rlcpp" info small/full-disk/step-1 > /dev/null 2>&1; then
    ok disk-full-checkpoint
  else
    bad "disk-full-checkpoint (exit $code)"; echo "$out" | tail -3; ls -la small/full-disk
  fi
  umount small
else
  echo "skip disk-full-checkpoint (needs root for a tmpfs)"
fi

# SFT: the same run machinery. A run of 6 steps, and the same run rolled back to its step-3
# checkpoint (as if it had died after step 6 but before saving it) and resumed, end equal; steps 4-6
# and the first run's status line are set aside.
for k in 1 2 3 4 5 6; do
  echo "{\"messages\": [{\"role\": \"user\", \"content\": \"$k + $k?\"}, {\"role\": \"assistant\", \"content\": \"\\\\boxed{$((k + k))}\"}]}"
done > chats.jsonl
sft=(-m toy -d chats.jsonl -tbs 2 -lr 1e-3 --max-steps 6 --si 3 -sd runs)
"$rlcpp" sft "${sft[@]}" -p sft-full > sft-full.log 2>&1 && "$rlcpp" sft "${sft[@]}" -p sft-cut > sft-cut.log 2>&1 \
  || { bad sft-run; tail -3 sft-full.log sft-cut.log; }
rm -rf runs/sft-cut/step-6 && echo step-3 > runs/sft-cut/latest
"$rlcpp" sft "${sft[@]}" -p sft-cut --resume auto > sft-resumed.log 2>&1 || { bad sft-resume-run; tail -3 sft-resumed.log; }
if cmp -s runs/sft-full/step-6/model.safetensors runs/sft-cut/step-6/model.safetensors \
   && [ "$(metrics_of runs/sft-full/metrics.jsonl)" = "$(metrics_of runs/sft-cut/metrics.jsonl)" ] \
   && [ "$(step_count runs/sft-cut/metrics.discarded.jsonl)" -eq 3 ] && grep -q '"tokens":' runs/sft-full/metrics.jsonl \
   && ends_with_status runs/sft-cut/metrics.discarded.jsonl finished 6 && ends_with_status runs/sft-cut/metrics.jsonl finished 6; then
  ok sft-resume-exact
else
  bad sft-resume-exact; tail -3 sft-resumed.log
fi
out=$("$rlcpp" sft -m toy -d data.jsonl -sd runs -p sft-bad 2>&1)
[ $? -eq 2 ] && grep -q 'data.jsonl:1: no assistant message' <<<"$out" && ok sft-needs-assistant || { bad sft-needs-assistant; echo "$out"; }

# The run file: ChatLearn's names are mapped (samples → prompts), flags override the file, and
# --print-config writes what --config reads back.
cat > run.yaml <<YAML
runtime:
  data_path: data.jsonl
  num_episode: 2
  exp_name: from-yaml
  output_dir: runs
  max_data_ckpt_nums: 1
  save_episode_interval: 2
model:
  path: toy
rollout:
  num_generations: 4
  max_new_tokens: 8
  generation_batch_size: 1
  batch_generation:
    ranking: true
train:
  sample_per_episode: 8
  train_global_batch_size: 4
  train_micro_batch_size: 4
  num_training_epoch: 2
YAML
"$rlcpp" train --config run.yaml --seed 7 --print-config > printed.yaml
if grep -q '  train_batch_size: 2' printed.yaml && grep -q '  train_minibatch_size: 1' printed.yaml \
   && grep -q '  seed: 7' printed.yaml && grep -q '  project: "from-yaml"' printed.yaml \
   && "$rlcpp" train --config printed.yaml --print-config | cmp -s - printed.yaml; then
  ok run-file-print-config
else
  bad run-file-print-config; cat printed.yaml | head -20
fi
# 8 prompts / 2 per step × 2 episodes = 8 steps; 2 mini-batches × 2 epochs = 4 updates per step.
if "$rlcpp" train --config run.yaml > yaml.log 2>&1 && [ "$(step_count runs/from-yaml/metrics.jsonl)" -eq 8 ] \
   && grep -q '"optimizer_steps":32' runs/from-yaml/metrics.jsonl && [ "$(ls -d runs/from-yaml/step-* | wc -l)" -eq 1 ]; then
  ok run-file-train
else
  bad run-file-train; tail -3 yaml.log
fi
printf 'runtime:\n  offload_weights: true\n' > offload.yaml
out=$("$rlcpp" train --config offload.yaml -m toy -d data.jsonl 2>&1)
[ $? -eq 2 ] && grep -q 'offload.yaml: runtime.offload_weights.*not implemented' <<<"$out" && ok run-file-unsupported \
  || { bad run-file-unsupported; echo "$out"; }

# Progress: on a terminal (a pty from script(1)) a live line with the step, ETA and the phase's bar;
# into a pipe, plain lines without a control character. --profile-dir: a Chrome trace whose spans nest.
script -qfec "$rlcpp train -m toy -d data.jsonl -g 4 -tbs 2 -tMbs 1 -tmbs 4 --mnt 8 --max-steps 3 -sd runs -p tty" \
  /dev/null > tty.out 2>&1 < /dev/null
"$rlcpp" train -m toy -d data.jsonl -g 4 -tbs 2 -tMbs 1 -tmbs 4 --mnt 8 --max-steps 3 -sd runs -p pipe --profile-dir prof \
  2>&1 | cat > pipe.out
if grep -q $'\r\033\\[K.*step 2/3 ETA' tty.out && grep -q 'generate \[#*\.*\] [0-9]*/8 seqs' tty.out \
   && grep -q 'train \[' tty.out && grep -q 'step 3/3' pipe.out && ! grep -q $'[\r\033]' pipe.out; then
  ok progress-terminal-and-pipe
else
  bad progress-terminal-and-pipe; tail -c 400 tty.out | od -c | tail -5
fi
python3 "$here/check_trace.py" prof/pipe/trace.rank-0.json step generate reward logprobs forward_backward optimizer \
  && ok profile-trace || bad profile-trace

# Learning: on the toy task the mean reward of the last 5 of 30 steps is far above the first 5.
"$rlcpp" train -m toy -d data.jsonl -g 8 -tbs 4 -tMbs 2 -tmbs 16 --mnt 8 -lr 3e-3 --kl 0 --max-steps 30 -sd runs \
  -p learn "${reward[@]}" > learn.log 2>&1 || bad learn-run
if python3 - runs/learn/metrics.jsonl <<'PY'
import json, sys
r = [d["reward_mean"] for d in map(json.loads, open(sys.argv[1])) if "step" in d]
first, last = sum(r[:5]) / 5, sum(r[-5:]) / 5
print(f"     reward: first 5 steps {first:.3f}, last 5 steps {last:.3f}")
sys.exit(0 if len(r) == 30 and first < 0.2 and last > 0.6 else 1)
PY
then ok learning; else bad learning; fi

exit $failed
