#!/usr/bin/env bash
# The recipe of the bundled tool-use model (models/tools-tiny): task data, tokenizer (the arith task's
# make_tokenizer.py on this task's SFT chats), a random model of the shape in model.json, then SFT
# on the teacher that calls the calculator only sometimes — all with rlcpp's own tools.
# Usage: examples/tools/recipe.sh [RLCPP_BINARY] [OUT_MODEL_DIR] [DATA_DIR]
# (defaults: build/rlcpp, models/tools-tiny, examples/tools — the committed files).
#
# Reproducibility: as examples/arith/recipe.sh — the data and the tokenizer are the same bytes on
# every machine (seeded Python); the weights are the same bytes on the same machine and
# LibTorch/OpenBLAS build, and may differ in the last bits on another CPU or BLAS.
# SFT_STEPS shortens the fine-tuning (1500 by default, about 5.5 minutes on 2 cores: copying the
# numbers into the call and out of the tool's answer takes the model that long to learn).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rlcpp=$(realpath "${1:-$here/../../build/rlcpp}")
out=$(realpath -m "${2:-$here/../../models/tools-tiny}")
data=$(realpath -m "${3:-$here}")
steps=${SFT_STEPS:-1500}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 "$here/make_data.py" "$data" --seed 0
# Every merge the chats allow (89): the system message's words and the call's JSON become a few
# tokens each; digits stay one token each (the tokenizer splits them), so numbers are copied digit
# by digit. A chat that calls the calculator is about 70 tokens.
python3 "$here/../arith/make_tokenizer.py" "$data/sft.jsonl" "$work/tokenizer" --merges 89
"$rlcpp" init --config "$here/model.json" --tokenizer "$work/tokenizer" --out "$work/init" --seed 0
"$rlcpp" sft -m "$work/init" -d "$data/sft.jsonl" -tbs 32 -tmbs 32 -lr 5e-3 --lr-schedule cosine --warmup-steps 20 \
  --max-steps "$steps" --seed 0 -sd "$work/runs" -p sft --log-interval 100
mkdir -p "$out"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do cp "$work/runs/sft/step-$steps/$f" "$out/"; done
(cd "$out" && sha256sum config.json model.safetensors tokenizer.json tokenizer_config.json)
