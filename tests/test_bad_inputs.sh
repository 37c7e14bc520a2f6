#!/usr/bin/env bash
# Hostile input, class by class: a broken model folder, tokenizer or chat template, a bad dataset
# line, out-of-range or inconsistent settings, a bad run file or checkpoint, a failing reward
# command. Each must end with a clear error (exit 2) naming the file, line or flag, never a crash,
# a hang, an "internal error" or a changed file. With BAD_INPUT_TABLE=FILE a markdown table of the
# outcomes is written there. Usage: test_bad_inputs.sh RLCPP_BINARY
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_bad_inputs.sh RLCPP_BINARY}")
table=${BAD_INPUT_TABLE:-}
[ -n "$table" ] && table=$(realpath -m "$table")
source "$(dirname "$0")/lib.sh"
[ -n "$table" ] && printf '| class | input | exit | message |\n|---|---|---|---|\n' > "$table"

# expect CLASS NAME RC PATTERN -- COMMAND...: exits RC within 60 s, prints PATTERN, no crash.
expect() {
  local class=$1 name=$2 rc_want=$3 pattern=$4; shift 5
  local out rc
  out=$(timeout 60 "$@" 2>&1); rc=$?
  local message
  message=$(grep -a -m1 -E 'error|warn|skipped' <<<"$out" | cut -c1-150 | sed 's/|/\\|/g')
  [ -n "$table" ] && printf '| %s | %s | %s | %s |\n' "$class" "$name" "$rc" "${message:-(none)}" >> "$table"
  if [ "$rc" -ne "$rc_want" ] || ! grep -aqE -- "$pattern" <<<"$out" || grep -aqi 'internal error' <<<"$out"; then
    bad "$class: $name (rc $rc, want $rc_want; want /$pattern/)"; echo "$out" | tail -5
  else
    ok "$class: $name"
  fi
}

model=chat
"$here/make_chat_model.sh" "$fixtures/qwen2-tiny" "$model" || bad chat-model
printf '%s\n' '{"messages": [{"role": "user", "content": "1+1?"}], "gt_answer": "2"}' \
  '{"messages": [{"role": "user", "content": "2+2?"}], "gt_answer": "4"}' > data.jsonl
run=(train -g 2 -tbs 1 -tMbs 1 -tmbs 2 -mnt 4 -sd runs)  # without the dataset and the length
train=("${run[@]}" -d data.jsonl --max-steps 1)
variant() { rm -rf "$1"; cp -r "$model" "$1"; }  # a copy of the model to break

# --- the model folder
expect model missing-folder 2 "'none' has no config.json" -- "$rlcpp" info none
variant m1; echo '{"hidden_size": 64,' > m1/config.json
expect model config-json-truncated 2 'm1/config.json' -- "$rlcpp" info m1
variant m2; python3 -c 'import json,sys; c=json.load(open("m2/config.json")); del c["hidden_size"]; json.dump(c, open("m2/config.json","w"))'
expect model config-field-missing 2 'config.json.*hidden_size' -- "$rlcpp" info m2
variant m3; python3 -c 'import json; c=json.load(open("m3/config.json")); c["num_hidden_layers"]=-3; json.dump(c, open("m3/config.json","w"))'
expect model config-negative-layers 2 'num_hidden_layers' -- "$rlcpp" info m3
variant m4; head -c 100 "$model/model.safetensors" > m4/model.safetensors
expect model weights-truncated 2 'm4/model.safetensors' -- "$rlcpp" info m4
variant m5; cp "$fixtures/llama-tiny/model.safetensors" m5/model.safetensors
expect model weights-of-another-model 2 'm5: weight .* is missing' -- "$rlcpp" generate --model m5 --prompt hi --mnt 2
variant m6; rm m6/tokenizer.json
expect model tokenizer-missing 2 "'m6' has no tokenizer.json" -- "$rlcpp" tokenize --model m6 hi

# --- tokenizer.json
edit_tokenizer() {  # DIR PYTHON: applies PYTHON to the dict t of DIR/tokenizer.json
  python3 -c "import json; t=json.load(open('$1/tokenizer.json')); $2; json.dump(t, open('$1/tokenizer.json','w'))"
}
variant t1; edit_tokenizer t1 't["model"]["vocab"]["!"] = -5'
expect tokenizer negative-id 2 'tokenizer.json.*"!"' -- "$rlcpp" tokenize --model t1 hi
variant t2; edit_tokenizer t2 't["model"]["vocab"]["!"] = 10**12'
expect tokenizer id-beyond-range 2 'tokenizer.json.*"!"' -- "$rlcpp" tokenize --model t2 hi
variant t3; edit_tokenizer t3 't["model"]["vocab"]["!"] = t["model"]["vocab"]["#"]'
expect tokenizer shared-id 2 'tokenizer.json' -- "$rlcpp" tokenize --model t3 hi
variant t4; edit_tokenizer t4 't["added_tokens"][0]["id"] = 5'
expect tokenizer added-token-collides 2 'tokenizer.json.*endoftext' -- "$rlcpp" tokenize --model t4 hi
variant t5; printf '{"model": ' > t5/tokenizer.json
expect tokenizer json-truncated 2 't5/tokenizer.json' -- "$rlcpp" tokenize --model t5 hi
variant t7; sed -i 's/"merges":\[\]/"merges":[],"x":1e999/' t7/tokenizer.json
expect tokenizer number-overflow 2 't7/tokenizer.json: not valid JSON.*overflow' -- "$rlcpp" tokenize --model t7 hi
variant t8; edit_tokenizer t8 't["model"] = 0'
expect tokenizer model-not-an-object 2 't8/tokenizer.json' -- "$rlcpp" tokenize --model t8 hi
variant t9; python3 -c 'import json; json.dump({"eos_token": "<|im_end|>", "tokenizer_class": 7}, open("t9/tokenizer_config.json", "w"))'
expect tokenizer config-field-of-wrong-type 2 't9/tokenizer.json.*(type|boolean)' -- "$rlcpp" tokenize --model t9 hi
variant m8; python3 -c 'import json; c=json.load(open("m8/config.json")); c["architectures"]=[7]; json.dump(c, open("m8/config.json","w"))'
expect model config-field-of-wrong-type 2 'm8/config.json.*type' -- "$rlcpp" info m8
variant t6; edit_tokenizer t6 't["model"]["merges"] = ["a"]'
expect tokenizer bad-merge 2 'tokenizer.json' -- "$rlcpp" tokenize --model t6 hi

# --- chat templates (tokenizer_config.json)
template() {  # DIR TEMPLATE
  python3 -c "import json,sys; json.dump({'eos_token': '<|im_end|>', 'chat_template': sys.argv[1]}, open('$1/tokenizer_config.json','w'))" "$2"
}
variant j1; template j1 '{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}'
expect template recursive-macro 2 'chat template.*(deep|recurs)' -- "$rlcpp" tokenize --model j1 --chat hi
variant j2; template j2 '{% for i in range(100000000) %}x{% endfor %}'
expect template endless-loop 2 'chat template.*(range|iterations)' -- "$rlcpp" tokenize --model j2 --chat hi
variant j3; template j3 '{{ "x" * 100000000 }}'
expect template huge-output 2 'chat template.*MiB' -- "$rlcpp" tokenize --model j3 --chat hi
variant j4; template j4 '{% for m in messages %}{{ m.content }'
expect template syntax-error 2 'chat template' -- "$rlcpp" tokenize --model j4 --chat hi
variant j5; template j5 "$(python3 -c 'print("{{" + "(" * 5000 + "1" + ")" * 5000 + "}}")')"
expect template deep-nesting 2 'chat template.*(deep|nest)' -- "$rlcpp" tokenize --model j5 --chat hi
variant j6; template j6 '{{ 99999999999999999999999 }}'
expect template int-overflow 2 'chat template' -- "$rlcpp" tokenize --model j6 --chat hi
expect template train-recursive-macro 2 'chat template' -- "$rlcpp" "${train[@]}" -m j1 -p j1

# --- dataset lines
expect dataset missing-file 2 'nothing.jsonl' -- "$rlcpp" prompts --model "$model" --dataset nothing.jsonl
printf '%s\n' '{"messages": [{"role": "user", "content": "a"}], "gt_answer": "1"}' '{"messages": [' > d1.jsonl
expect dataset truncated-line 2 'd1.jsonl:2' -- "$rlcpp" prompts --model "$model" --dataset d1.jsonl
expect dataset skip-bad-lines 0 '1 malformed lines skipped' -- "$rlcpp" prompts --model "$model" --dataset d1.jsonl --skip-bad-lines
echo '{"messages": [{"role": "user", "content": "a"}]}' > d2.jsonl
expect dataset no-answer 2 'd2.jsonl:1.*gt_answer' -- "$rlcpp" prompts --model "$model" --dataset d2.jsonl
echo '{"messages": [{"role": "robot", "content": "a"}], "gt_answer": "1"}' > d3.jsonl
expect dataset unknown-role 2 'd3.jsonl:1.*robot' -- "$rlcpp" prompts --model "$model" --dataset d3.jsonl
: > d4.jsonl
expect dataset empty-file 2 'd4.jsonl' -- "$rlcpp" prompts --model "$model" --dataset d4.jsonl
printf '{"messages": [{"role": "user", "content": "\xff\xfe"}], "gt_answer": "1"}\n' > d5.jsonl
expect dataset invalid-utf8 2 'd5.jsonl:1' -- "$rlcpp" prompts --model "$model" --dataset d5.jsonl
python3 -c 'import json; print(json.dumps({"messages": [{"role": "user", "content": "x" * 5000000}], "gt_answer": "1"}))' > d6.jsonl
expect dataset line-over-4MiB 2 'd6.jsonl:1' -- "$rlcpp" prompts --model "$model" --dataset d6.jsonl
python3 -c 'import json; print(json.dumps({"messages": [{"role": "user", "content": "x" * 900}], "gt_answer": "1"}))' > d7.jsonl
variant short; python3 -c 'import json; c=json.load(open("short/config.json")); c["max_position_embeddings"]=256; json.dump(c, open("short/config.json","w"))'
expect dataset prompt-beyond-positions 0 'd7.jsonl:1: the prompt is [0-9]+ tokens.*max_position_embeddings 256.*cut' -- \
  "$rlcpp" "${run[@]}" --max-steps 1 -m short -d d7.jsonl -p d7
expect dataset prompt-beyond-positions-error 2 'd7.jsonl:1: the prompt is [0-9]+ tokens, over the limit of 255' -- \
  "$rlcpp" "${run[@]}" --max-steps 1 -m short -d d7.jsonl -p d7e --overflow error
expect dataset prompt-beyond-mpt-generate 2 'd7.jsonl:1: .*over the limit of 100 \(-mpt 100\)' -- \
  "$rlcpp" generate --model "$model" -d d7.jsonl -mpt 100 --overflow error --mnt 2
expect settings generate-rollout-dtype-fp64 2 '--rollout-dtype: unknown rollout dtype "float64" \(use float32, bfloat16, float16, int8, fp8\)' -- \
  "$rlcpp" generate --model "$model" --prompt hi --mnt 2 --rollout-dtype float64
expect settings eval-kv-cache-dtype-fp64 2 '--kv-cache-dtype float64: .*float32, bfloat16 or float16' -- \
  "$rlcpp" eval --model "$model" -d data.jsonl --kv-cache-dtype float64
echo '{"messages": [{"role": "user", "content": "a"}], "gt_answer": 1e999}' > d9.jsonl
expect dataset number-overflow 2 'd9.jsonl:1: not valid JSON.*overflow' -- "$rlcpp" prompts --model "$model" --dataset d9.jsonl
echo '[1, 2, 3]' > d8.jsonl
expect dataset not-an-object 2 'd8.jsonl:1' -- "$rlcpp" prompts --model "$model" --dataset d8.jsonl

# --- settings
expect settings lr-inf 2 '(-lr|learning.rate).*inf' -- "$rlcpp" "${train[@]}" -m "$model" -lr inf -p s
expect settings kl-nan 2 '(-kl|kl).*nan' -- "$rlcpp" "${train[@]}" -m "$model" -kl nan -p s
expect settings temperature-nan 2 'temp.*nan' -- "$rlcpp" "${train[@]}" -m "$model" -temp nan -p s
expect settings weight-decay-nan 2 'weight-decay.*nan' -- "$rlcpp" "${train[@]}" -m "$model" --weight-decay nan -p s
expect settings clip-eps-low-2 2 'clip-eps-low' -- "$rlcpp" "${train[@]}" -m "$model" --clip-eps-low 2 -p s
expect settings negative-tbs 2 '(-tbs|train-batch-size)' -- "$rlcpp" train -m "$model" -d data.jsonl -tbs -1 -sd runs -p s
expect settings tbs-beyond-dataset 2 '-tbs.*data.jsonl has 2' -- "$rlcpp" train -m "$model" -d data.jsonl -tbs 3 -tMbs 1 -sd runs -p s
expect settings round-beyond-memory 2 'ibs 1000000.*GiB' -- "$rlcpp" train -m "$model" -d data.jsonl -tbs 1000000 -sd runs -p s
expect settings generations-beyond-memory 2 '-g 100000000' -- "$rlcpp" train -m "$model" -d data.jsonl -g 100000000 -sd runs -p s
expect settings project-escapes 2 '(-p|project).*escape' -- "$rlcpp" "${train[@]}" -m "$model" -p ../../escape
expect settings project-empty 2 '(-p|project)' -- "$rlcpp" "${train[@]}" -m "$model" -p ""
expect settings unknown-dtype 2 'dtype "fp8"' -- "$rlcpp" "${train[@]}" -m "$model" --dtype fp8 -p s
expect settings not-a-number 2 '(-lr|learning)' -- "$rlcpp" "${train[@]}" -m "$model" -lr fast -p s
expect settings nb-without-workers 2 'n-behind 1' -- "$rlcpp" "${train[@]}" -m "$model" -nb 1 -p s
expect settings trainers-workers-ratio 2 '-i 3 is not a multiple of -t 2' -- "$rlcpp" "${train[@]}" -m "$model" -t 2 -i 3 -p s
expect settings unknown-flag 109 'nope' -- "$rlcpp" "${train[@]}" -m "$model" --nope -p s
[ ! -e ../escape ] && [ ! -e escape ] && ok "settings: nothing written outside -sd" || bad "settings: a run escaped -sd"

# --- run files (--config)
printf 'train:\n  learning_rate: [1, 2\n' > r1.yaml
expect run-file malformed-yaml 2 'r1.yaml' -- "$rlcpp" "${train[@]}" -m "$model" --config r1.yaml -p s
printf 'train:\n  learning_rat: 1e-3\n' > r2.yaml
expect run-file unknown-key 2 'r2.yaml.*learning_rat' -- "$rlcpp" "${train[@]}" -m "$model" --config r2.yaml -p s
python3 -c 'print("a: " + "[" * 10000 + "]" * 10000)' > r3.yaml
expect run-file deep-nesting 2 'r3.yaml' -- "$rlcpp" "${train[@]}" -m "$model" --config r3.yaml -p s
printf 'train:\n  learning_rate: nan\n' > r4.yaml
expect run-file nan-value 2 'learning_rate' -- "$rlcpp" "${train[@]}" -m "$model" --config r4.yaml -p s

# --- reward commands
expect reward missing-program 2 'reward-cmd.*no_such_program.*(not found|127)' -- "$rlcpp" "${train[@]}" -m "$model" --reward-cmd ./no_such_program -p rw1
printf '#!/bin/sh\nsleep 1000\n' > hang.sh && chmod +x hang.sh
expect reward hanging-program 2 'reward-cmd.*no reply within 1 s' -- "$rlcpp" "${run[@]}" -d data.jsonl --max-steps 3 -m "$model" --reward-cmd ./hang.sh --reward-timeout 1 -p rw2
sleep 0.5
pgrep -f 'sleep 1000' > /dev/null && bad "reward: hanging program left running" || ok "reward: no process left behind"
printf '#!/bin/sh\nwhile read l; do echo banana; done\n' > garbage.sh && chmod +x garbage.sh
expect reward garbage-output 2 'reward-cmd.*first reply.*banana' -- "$rlcpp" "${train[@]}" -m "$model" --reward-cmd ./garbage.sh -p rw3

# --- runs and checkpoints
"$rlcpp" "${train[@]}" -m "$model" -p good > good.log 2>&1 || bad "run: a good run"
cp runs/good/config.yaml good-config.yaml
expect run fresh-start-over-a-run 2 'already holds a run' -- "$rlcpp" "${train[@]}" -m "$model" -lr 5e-2 -p good
cmp -s good-config.yaml runs/good/config.yaml && ok "run: refused start left config.yaml alone" || bad "run: config.yaml changed"
cp -r runs/good runs/broken && echo '{"step": ' > runs/broken/step-1/trainer_state/state.json
expect run corrupt-state-json 2 'broken/step-1/trainer_state/state.json' -- "$rlcpp" "${run[@]}" -d data.jsonl -m "$model" --max-steps 2 -p broken --resume auto
cp -r runs/good runs/nostate && rm runs/nostate/step-1/model.safetensors
expect run checkpoint-missing-weights 2 'nostate/step-1' -- "$rlcpp" "${run[@]}" -d data.jsonl -m "$model" --max-steps 2 -p nostate --resume auto

# --- no silent success, and a disk that cannot take a checkpoint
expect run resume-a-finished-run 2 'already took step 1 of its 1; resumed, it would train nothing' -- \
  "$rlcpp" "${train[@]}" -m "$model" -p good --resume auto
expect run learned-nothing 2 'took 1 step\(s\) and none of them changed the policy' -- \
  "$rlcpp" "${train[@]}" -m "$model" -a DAPO --filter-range 1.5,2 --max-dynamic-rounds 0 -p nolearn
# ... and its metrics.jsonl says so too: its step, then a "failed" status line naming the error.
[ "$(step_count runs/nolearn/metrics.jsonl)" -eq 1 ] \
  && ends_with_status runs/nolearn/metrics.jsonl failed 1 'none of them changed the policy' \
  && ok "run: learned-nothing status line" || bad "run: learned-nothing status line"
# A run directory on a 1 MiB tmpfs (a mount namespace of its own): the checkpoint is refused before a
# byte of it is written, naming the free and needed MiB; the run's metrics stay, no partial step.
if unshare -rm true 2> /dev/null; then
  mkdir -p small
  out=$(timeout 120 unshare -rm sh -c 'mount -t tmpfs -o size=1m none small && "$@"; rc=$?; echo "left: $(ls -A small/runs/full | grep -v tfevents | tr "\n" " ")"; exit $rc' \
        sh "$rlcpp" "${run[@]/runs/small/runs}" -d data.jsonl --max-steps 1 -m "$model" -p full 2>&1)
  rc=$?
  [ -n "$table" ] && printf '| run | disk-too-small-for-a-checkpoint | %s | %s |\n' "$rc" "$(grep -m1 error <<<"$out" | cut -c1-150)" >> "$table"
  if [ $rc -eq 2 ] && grep -qE 'checkpoint step-1: .* has [0-9.]+ MiB free and the checkpoint needs about [0-9.]+ MiB' <<<"$out" &&
     grep -qx 'left: config.yaml metrics.jsonl ' <<<"$out"; then
    ok "run: disk-too-small-for-a-checkpoint"
  else
    bad "run: disk-too-small-for-a-checkpoint (rc $rc)"; echo "$out" | tail -5
  fi
else
  echo "skip run: disk-too-small-for-a-checkpoint (no mount namespace here: unshare -rm)"
fi
exit $failed
