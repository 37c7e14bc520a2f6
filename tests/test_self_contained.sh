#!/usr/bin/env bash
# The repository stands on its own: no tracked file reads a folder beside the checkout (a user's clone
# has nothing there), and what the tests, benchmarks and docs need is inside it.
#   test_self_contained.sh SOURCE_DIR
src=$(realpath "${1:?usage: test_self_contained.sh SOURCE_DIR}")
source "$(dirname "$0")/lib.sh"
cd "$src" || exit 1
# The pattern is built from pieces so that this file does not match itself.
beside="\.\./sha""red"
if [ -d .git ] && command -v git > /dev/null; then
  hits=$(git grep -nE "$beside" -- . 2>/dev/null)
else  # a source tarball: every file but build output
  hits=$(grep -rnE "$beside" --exclude-dir='build*' --exclude-dir=.git --exclude-dir=node_modules . 2>/dev/null)
fi
[ -z "$hits" ] && ok no-file-reads-beside-the-repository || { bad no-file-reads-beside-the-repository; echo "$hits" | head -20; }
# The files the suite, the benchmarks and the README's walk-through read.
for f in tests/fixtures/make_fixtures.py tests/fixtures/qwen2-tiny/reference.safetensors examples/gsm8k/train.jsonl \
         examples/gsm8k/test.jsonl examples/gsm8k/LICENSE docs/architecture.md docs/contributing.md \
         docs/reference/chatlearn-config-reference.txt bench/anchors/torch_grpo_step.py; do
  [ -s "$f" ] && ok "has-$f" || bad "has-$f"
done
exit $failed
