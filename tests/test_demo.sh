#!/usr/bin/env bash
# The bundled default: the recipe regenerates the committed task data exactly and makes the same
# model twice (a short SFT), and a shortened `make demo` runs end to end and prints its table.
# Usage: test_demo.sh RLCPP_BINARY SOURCE_DIR
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_demo.sh RLCPP_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: test_demo.sh RLCPP_BINARY SOURCE_DIR}")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failed=0
for k in 1 2; do
  SFT_STEPS=8 bash "$src/examples/arith/recipe.sh" "$rlcpp" "$tmp/model$k" "$tmp/data$k" > "$tmp/recipe$k.log" 2>&1 \
    || { echo "FAIL recipe run $k"; tail -5 "$tmp/recipe$k.log"; failed=1; }
done
for f in train.jsonl test.jsonl sft.jsonl pairs.jsonl pairs_test.jsonl; do
  cmp -s "$tmp/data1/$f" "$src/examples/arith/$f" || { echo "FAIL recipe data: $f differs from the committed one"; failed=1; }
done
cmp -s "$src/models/arith-tiny/tokenizer.json" "$tmp/model1/tokenizer.json" \
  || { echo "FAIL recipe tokenizer differs from the bundled one"; failed=1; }
if cmp -s "$tmp/model1/model.safetensors" "$tmp/model2/model.safetensors"; then
  echo "ok   recipe: committed data and tokenizer regenerated; the same model bytes twice"
else
  echo "FAIL recipe: two runs made different weights"; failed=1
fi
out=$(cd "$tmp" && DEMO_STEPS=3 DEMO_EVAL_LIMIT=40 DEMO_RUNS="$tmp/runs" bash "$src/scripts/demo.sh" "$rlcpp" 2>&1)
if [ $? -eq 0 ] && grep -qE '^accuracy +[0-9.]+% +[0-9.]+%$' <<<"$out" && grep -q 'training reward (step:mean)  1:' <<<"$out" \
   && ls "$tmp"/runs/demo-arith-*/step-3/model.safetensors > /dev/null 2>&1 \
   && grep -q 'Eval accuracy' "$tmp"/runs/demo-arith-*/report.html && grep -q '<td>best</td>' "$tmp"/runs/demo-arith-*/report.html; then
  echo "ok   demo (shortened)"; grep -A3 '^held-out' <<<"$out"
else
  echo "FAIL demo (shortened):"; echo "$out" | tail -20; failed=1
fi
exit $failed
