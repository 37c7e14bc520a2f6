#!/usr/bin/env bash
# The rlcpp binary: --version, info on a fixture, and clear errors with a non-zero exit on bad input.
set -uo pipefail
rlcpp=${1:?usage: test_cli.sh RLCPP_BINARY}
fixtures=${RLCPP_FIXTURES:-${RLCPP_DEFAULT_FIXTURES:-$(dirname "$0")/fixtures}}
[ -f "$fixtures/qwen2-tiny/config.json" ] || { echo "FAIL no test fixtures under '$fixtures' (\$RLCPP_FIXTURES, else tests/fixtures)" >&2; exit 1; }
fail=0
expect() {  # expect NAME EXPECTED_RC PATTERN -- COMMAND...
  local name=$1 rc_want=$2 pattern=$3; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -ne "$rc_want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: rc=$rc (want $rc_want), output lacks /$pattern/:"; echo "$out" | head -20; fail=1
  else
    echo "ok   $name"
  fi
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
expect version 0 '^rlcpp [0-9]+\.[0-9]+\.[0-9]+' -- "$rlcpp" --version
expect info 0 'head_dim 24' -- "$rlcpp" info "$fixtures/qwen3-tiny"
expect info-params 0 'parameters +[0-9]+ on disk' -- "$rlcpp" info "$fixtures/llama-tiny"
expect info-system 0 'kernels +[A-Z0-9_]+ \(dispatched at run time' -- "$rlcpp" info --system
# One binary for CPU and GPU: LibTorch's CUDA part loads at run time (the machine may have no device).
expect info-system-cuda 0 'libtorch +[0-9.]+, [0-9]+ intra-op thread\(s\), CUDA ([0-9]+ device|no: LibTorch.s CUDA part loaded, but this machine has no CUDA device)' -- "$rlcpp" info --system
expect info-system-mpi 0 'mpi +built with MPI' -- "$rlcpp" info --system
expect info-system-blas 0 'blas +(MKL|LibTorch.s own) \(LibTorch.s\), fp32 GEMM 1024\^3 [0-9]+ GFLOP/s \(rlcpp.s kernels [0-9]+\)' -- "$rlcpp" info --system
# MPI ranks on one machine running more intra-op threads than it has cores (the launcher's local
# rank count stood in for by Open MPI's variable): rlcpp runs itself again with OMP_WAIT_POLICY=PASSIVE;
# one thread a rank, or a policy of the user's, is left alone.
# (nproc itself answers $OMP_NUM_THREADS when it is set, as under CTest: the cores rlcpp sees are its
# answer without it.)
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
threads=$(( cores > 1 ? cores : 2 ))
expect omp-passive-when-oversubscribed 0 "openmp waits +PASSIVE \\(set by rlcpp: 2 ranks x $threads threads on $cores cores\\)" -- \
  env OMPI_COMM_WORLD_LOCAL_SIZE=2 OMP_NUM_THREADS=$threads "$rlcpp" info --system
expect omp-one-thread-a-rank 0 "openmp waits +the library's default" -- env OMPI_COMM_WORLD_LOCAL_SIZE=2 OMP_NUM_THREADS=1 "$rlcpp" info --system
expect omp-user-policy-kept 0 "openmp waits +ACTIVE" -- \
  env OMPI_COMM_WORLD_LOCAL_SIZE=2 OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=ACTIVE "$rlcpp" info --system
expect info-nothing 2 'error: info: give a model directory' -- "$rlcpp" info
expect info-untied 0 'tied embeddings +no' -- "$rlcpp" info "$fixtures/llama-tiny"
expect parity 0 'max \|logits - reference\| += [0-9.e-]+' -- "$rlcpp" parity "$fixtures/qwen2-tiny"
expect info-missing 2 "error: .*$tmp/none.*config.json" -- "$rlcpp" info "$tmp/none"
mkdir -p "$tmp/bad"; cp "$fixtures/qwen2-tiny/config.json" "$tmp/bad/"; printf 'garbage!' > "$tmp/bad/model.safetensors"
expect info-corrupt 2 'error: .*model.safetensors.*header length' -- "$rlcpp" info "$tmp/bad"
expect bad-dtype 2 'error: --dtype: unknown dtype "fp8"' -- "$rlcpp" parity "$fixtures/qwen2-tiny" --dtype fp8
expect bad-device 2 'error: --device: unknown device "tpu"' -- "$rlcpp" parity "$fixtures/qwen2-tiny" --device tpu
expect bad-flag 109 "nope" -- "$rlcpp" info x --nope

# A tiny chat model: qwen2-tiny's weights with a byte-level tokenizer (ids 0-255) and ChatML tokens.
model="$tmp/chat-tiny"
"$(dirname "$0")/make_chat_model.sh" "$fixtures/qwen2-tiny" "$model"
printf '%s\n' '{"messages": {"role": "user", "content": "1+1?"}, "gt_answer": "2"}' \
  '{"messages": [{"role": "user", "content": "2+2?"}], "gt_answer": "4"}' > "$tmp/data.jsonl"
expect tokenize 0 '<\|im_start\|>' -- "$rlcpp" tokenize --model "$model" --chat "hi"
expect prompts 0 'gt_answer=4 tokens=[0-9]+' -- "$rlcpp" prompts --model "$model" --dataset "$tmp/data.jsonl"
expect generate 0 'samples, [0-9]+ prompt' -- "$rlcpp" generate --model "$model" --dataset "$tmp/data.jsonl" -n 3 \
  --mnt 6 --temperature 0.7 -o "$tmp/out.jsonl"
if [ "$(wc -l < "$tmp/out.jsonl")" -ne 6 ] || ! grep -q '"finish_reason":"length"' "$tmp/out.jsonl" \
   || ! grep -q '"logprobs":\[[-0-9]' "$tmp/out.jsonl"; then
  echo "FAIL generate-output: expected 6 samples with logprobs and finish reasons:"; head -2 "$tmp/out.jsonl"; fail=1
else
  echo "ok   generate-output"
fi
echo '{"messages": {"role": "user"}, "gt_answer": "2"}' >> "$tmp/data.jsonl"
expect bad-dataset 2 'data.jsonl:3: messages\[0\]' -- "$rlcpp" prompts --model "$model" --dataset "$tmp/data.jsonl"
expect skip-bad 0 '1 malformed lines skipped' -- "$rlcpp" prompts --model "$model" --dataset "$tmp/data.jsonl" --skip-bad-lines
expect generate-args 2 'exactly one of --prompt' -- "$rlcpp" generate --model "$model"

# The colocated training loop end to end: steps, metrics.jsonl (a line per step, then the run's
# status line), a checkpoint rlcpp info accepts.
head -2 "$tmp/data.jsonl" > "$tmp/train.jsonl"
expect train 0 'step 2/2 reward' -- "$rlcpp" train -m "$model" -d "$tmp/train.jsonl" -g 4 -tbs 2 -tMbs 1 -tmbs 4 \
  -mnt 6 -temp 2 --max-steps 2 -lr 1e-3 -sd "$tmp/runs" -p cli
if [ "$(grep -c '"step":' "$tmp/runs/cli/metrics.jsonl")" -ne 2 ] || [ "$(grep -c '"status":' "$tmp/runs/cli/metrics.jsonl")" -ne 1 ] \
   || [ "$(tail -1 "$tmp/runs/cli/metrics.jsonl")" != '{"status":"finished","steps":2}' ] || [ "$(cat "$tmp/runs/cli/latest")" != "step-2" ] \
   || [ ! -s "$tmp/runs/cli/step-2/trainer_state/optimizer.pt" ] || ! grep -q '"step": 2' "$tmp/runs/cli/step-2/trainer_state/state.json"; then
  echo "FAIL train-outputs: expected 2 step lines then {\"status\":\"finished\",\"steps\":2} in metrics.jsonl, latest = step-2 and trainer_state/"
  tail -1 "$tmp/runs/cli/metrics.jsonl"; fail=1
else
  echo "ok   train-outputs"
fi
expect train-checkpoint 0 'Qwen2ForCausalLM' -- "$rlcpp" info "$tmp/runs/cli/step-2"
expect train-distributed-ratio 2 '-i 3 is not a multiple of -t 2' -- "$rlcpp" train -m "$model" -d "$tmp/train.jsonl" -t 2 -i 3
expect train-distributed-world 2 'asks for 2 processes, but 1 were started; run `mpirun -np 2' -- "$rlcpp" train \
  -m "$model" -d "$tmp/train.jsonl" -t 1 -i 1
expect train-nb-colocated 2 'nb/--n-behind 1: the colocated mode' -- "$rlcpp" train -m "$model" -d "$tmp/train.jsonl" -nb 1
expect train-sync-frequency 2 'sync-frequency 2 lets rollout run 2 rounds behind.*-nb 1' -- "$rlcpp" train -m "$model" \
  -d "$tmp/train.jsonl" -t 1 -i 1 -nb 1 --sync-frequency 2
expect train-round-size 2 '-ibs 1 with -i 3: 3 prompts per round are not a multiple of -t 1 × -tbs 2' -- "$rlcpp" train \
  -m "$model" -d "$tmp/train.jsonl" -t 1 -i 3 -ibs 1 -tbs 2 -tMbs 1
expect train-batch 2 'tMbs.* 3 must be between 1 and -tbs 2' -- "$rlcpp" train -m "$model" -d "$tmp/train.jsonl" -tbs 2 -tMbs 3
# A reward model (transformers' sequence-classifier layout: the decoder and a `score` head) is
# recognised, and refused as a policy.
rm_dir="$tmp/rm"; cp -rL "$model" "$rm_dir"
python3 - "$rm_dir" <<'PY'
import json, struct, sys
d = sys.argv[1]
c = json.load(open(f"{d}/config.json"))
c["architectures"] = ["Qwen2ForSequenceClassification"]; c["id2label"] = {"0": "LABEL_0"}
json.dump(c, open(f"{d}/config.json", "w"))
data = open(f"{d}/model.safetensors", "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n]); body = data[8 + n:]
header["score.weight"] = {"dtype": "F32", "shape": [1, c["hidden_size"]], "data_offsets": [len(body), len(body) + 4 * c["hidden_size"]]}
body += struct.pack(f"<{c['hidden_size']}f", *([0.01] * c["hidden_size"]))
text = json.dumps(header).encode(); text += b" " * (-len(text) % 8)
open(f"{d}/model.safetensors", "wb").write(struct.pack("<Q", len(text)) + text + body)
PY
expect info-reward-model 0 'score: 1 label\(s\) at the last token' -- "$rlcpp" info "$rm_dir"
expect train-reward-model 2 'a sequence classifier \(Qwen2ForSequenceClassification, a reward model\)' -- "$rlcpp" train \
  -m "$rm_dir" -d "$tmp/train.jsonl"
exit $fail
