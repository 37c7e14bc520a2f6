#!/usr/bin/env bash
# The toy RL task of the training tests, in the current directory: toy/, a random model over a
# byte vocabulary (near-uniform next-token distribution, so tests/data/digits_reward.py starts
# near 0.04), and data.jsonl, 8 prompts. Usage: make_toy_task.sh RLCPP_BINARY FIXTURES_DIR
set -euo pipefail
rlcpp=${1:?usage: make_toy_task.sh RLCPP_BINARY FIXTURES_DIR} fixtures=${2:?usage: make_toy_task.sh RLCPP_BINARY FIXTURES_DIR}
here=$(cd "$(dirname "$0")" && pwd)
"$here/make_chat_model.sh" "$fixtures/qwen2-tiny" chat
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["vocab_size"] = 259
json.dump(c, open("toy.json", "w"))' "$fixtures/qwen2-tiny/config.json"
"$rlcpp" init --config toy.json --tokenizer chat --out toy --seed 1 >/dev/null
for k in 1 2 3 4 5 6 7 8; do
  echo "{\"messages\": [{\"role\": \"user\", \"content\": \"What is $k + $k?\"}], \"gt_answer\": \"$((k + k))\"}"
done > data.jsonl
