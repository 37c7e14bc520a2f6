#!/usr/bin/env bash
# The recipe of the bundled model (models/arith-tiny): task data, tokenizer, a random model of the
# shape in model.json, then SFT on the sloppy teacher's worked solutions — all with rlcpp's own
# tools. Usage: examples/arith/recipe.sh [RLCPP_BINARY] [OUT_MODEL_DIR] [DATA_DIR]
# (defaults: build/rlcpp, models/arith-tiny, examples/arith — the committed files).
#
# Reproducibility: the data and the tokenizer are the same bytes on every machine (seeded Python).
# The model is the same bytes when rerun on the same machine with the same LibTorch/OpenBLAS build
# (`make test` checks a short version of this); another CPU or BLAS may round float32 matmuls
# differently, so the weights can differ there in the last bits while the recipe is the same.
# SFT_STEPS shortens the fine-tuning (600 by default, about 2 minutes on 2 cores).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rlcpp=$(realpath "${1:-$here/../../build/rlcpp}")
out=$(realpath -m "${2:-$here/../../models/arith-tiny}")
data=$(realpath -m "${3:-$here}")
steps=${SFT_STEPS:-600}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 "$here/make_data.py" "$data" --seed 0
python3 "$here/make_tokenizer.py" "$data/sft.jsonl" "$work/tokenizer"
"$rlcpp" init --config "$here/model.json" --tokenizer "$work/tokenizer" --out "$work/init" --seed 0
"$rlcpp" sft -m "$work/init" -d "$data/sft.jsonl" -tbs 32 -tmbs 32 -lr 2e-3 --lr-schedule cosine --warmup-steps 20 \
  --max-steps "$steps" --seed 0 -sd "$work/runs" -p sft --log-interval 100
mkdir -p "$out"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do cp "$work/runs/sft/step-$steps/$f" "$out/"; done
(cd "$out" && sha256sum config.json model.safetensors tokenizer.json tokenizer_config.json)
