#!/usr/bin/env bash
# Makes a tiny chat model for end-to-end tests: a fixture's config and weights with a byte-level
# tokenizer (ids 0-255) and the ChatML special tokens (256-258). Usage: make_chat_model.sh FIXTURE_DIR OUT_DIR
set -euo pipefail
fixture=${1:?usage: make_chat_model.sh FIXTURE_DIR OUT_DIR}; model=${2:?usage: make_chat_model.sh FIXTURE_DIR OUT_DIR}
mkdir -p "$model"
cp "$fixture/config.json" "$fixture/model.safetensors" "$model/"
node -e '
const bytes = []; for (let b = 33; b <= 126; ++b) bytes.push(b); for (let b = 161; b <= 172; ++b) bytes.push(b);
for (let b = 174; b <= 255; ++b) bytes.push(b);
const cps = bytes.slice(); let n = 0; for (let b = 0; b < 256; ++b) if (!bytes.includes(b)) { bytes.push(b); cps.push(256 + n++); }
const vocab = {}; bytes.forEach((b, i) => { vocab[String.fromCodePoint(cps[i])] = b; });
const added = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map((c, i) => ({id: 256 + i, content: c, special: true,
  single_word: false, lstrip: false, rstrip: false, normalized: false}));
const fs = require("fs");
fs.writeFileSync(process.argv[1] + "/tokenizer.json", JSON.stringify({added_tokens: added, normalizer: null,
  pre_tokenizer: {type: "ByteLevel", add_prefix_space: false, use_regex: true}, post_processor: null,
  decoder: {type: "ByteLevel"}, model: {type: "BPE", vocab, merges: []}}));
fs.writeFileSync(process.argv[1] + "/tokenizer_config.json", JSON.stringify({eos_token: "<|im_end|>"}));
' "$model"
