#!/usr/bin/env bash
# Tokenizer and chat-template parity with the libraries users run: the real Qwen3, Llama 3.1 and
# DeepSeek-V3 tokenizers (tests/data/tokenizers) against Hugging Face `tokenizers` and transformers'
# apply_chat_template (jinja2), from rlcpp's Python environment (tests/py/text_oracle.py): 2,400
# strings' ids with and without special tokens and their round trips, and every chat render (tools,
# <think>, enable_thinking, date_string) byte for byte.
# Usage: text_parity.sh RLCPP_BINARY SOURCE_DIR
set -uo pipefail
rlcpp=$(realpath "${1:?usage: text_parity.sh RLCPP_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: text_parity.sh RLCPP_BINARY SOURCE_DIR}")
source "$(dirname "$0")/lib.sh"
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
oracle="$src/tests/py/text_oracle.py"
"$py" "$oracle" corpus > corpus.jsonl && "$py" "$oracle" chats > chats.jsonl || { bad "text_oracle.py runs"; exit 1; }
for name in qwen3 llama3_1 deepseek_v3; do
  dir="$src/tests/data/tokenizers/$name"
  "$rlcpp" tokenize --model "$dir" --json --decode - < corpus.jsonl > "$name.ids" \
    && "$rlcpp" tokenize --model "$dir" --json --add-special-tokens - < corpus.jsonl > "$name.special" \
    && "$rlcpp" template --model "$dir" < chats.jsonl > "$name.chats" || { bad "$name: rlcpp tokenize/template failed"; continue; }
  if out=$("$py" "$oracle" compare "$name" "$dir" corpus.jsonl "$name.ids" "$name.special" chats.jsonl "$name.chats" 2>&1); then
    ok "$out"
  else
    bad "$name"; echo "$out"
  fi
done
exit $failed
