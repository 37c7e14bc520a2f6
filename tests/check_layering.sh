#!/usr/bin/env bash
# Layers only point down (DESIGN.md): a file under src/<layer>/ may include only its own layer or lower ones.
set -euo pipefail
src=${1:?usage: check_layering.sh SRC_DIR}
layers=(util io text model engine reward algo train dist rl app)
rank() { for i in "${!layers[@]}"; do [ "${layers[$i]}" = "$1" ] && { echo "$i"; return; }; done; echo -1; }
bad=0
for dir in "$src"/*/; do
  layer=$(basename "$dir")
  own=$(rank "$layer")
  if [ "$own" -lt 0 ]; then echo "src/$layer is not a layer of DESIGN.md"; bad=1; continue; fi
  while IFS=: read -r file _ include; do
    target=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$include")
    [ "$(rank "$target")" -le "$own" ] || { echo "$file includes $target/ (a higher layer than $layer/)"; bad=1; }
  done < <(grep -rnE '^#include "[a-z_]+/' "$dir" || true)
done
[ $bad -eq 0 ] && echo "layering ok: ${#layers[@]} layers, no upward include"
exit $bad
