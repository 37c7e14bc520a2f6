#!/usr/bin/env bash
# The recipe of the bundled code model (models/code-tiny): task data, tokenizer (the arith task's
# make_tokenizer.py on this task's SFT chats), a random model of the shape in model.json, then SFT
# on the sloppy teacher's programs — all with rlcpp's own tools.
# Usage: examples/code/recipe.sh [RLCPP_BINARY] [OUT_MODEL_DIR] [DATA_DIR]
# (defaults: build/rlcpp, models/code-tiny, examples/code — the committed files).
#
# Reproducibility: as examples/arith/recipe.sh — the data and the tokenizer are the same bytes on
# every machine (seeded Python); the weights are the same bytes on the same machine and
# LibTorch/OpenBLAS build, and may differ in the last bits on another CPU or BLAS.
# SFT_STEPS shortens the fine-tuning (500 by default, 2 to 3 minutes on 2 cores).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rlcpp=$(realpath "${1:-$here/../../build/rlcpp}")
out=$(realpath -m "${2:-$here/../../models/code-tiny}")
data=$(realpath -m "${3:-$here}")
steps=${SFT_STEPS:-500}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 "$here/make_data.py" "$data" --seed 0
# 128 merges (of the 130 the chats allow): the words of the prompts and programs become one or two
# tokens each, and a whole chat about 60.
python3 "$here/../arith/make_tokenizer.py" "$data/sft.jsonl" "$work/tokenizer" --merges 128
"$rlcpp" init --config "$here/model.json" --tokenizer "$work/tokenizer" --out "$work/init" --seed 0
"$rlcpp" sft -m "$work/init" -d "$data/sft.jsonl" -tbs 32 -tmbs 32 -lr 5e-3 --lr-schedule cosine --warmup-steps 20 \
  --max-steps "$steps" --seed 0 -sd "$work/runs" -p sft --log-interval 100
mkdir -p "$out"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do cp "$work/runs/sft/step-$steps/$f" "$out/"; done
(cd "$out" && sha256sum config.json model.safetensors tokenizer.json tokenizer_config.json)
