#!/usr/bin/env bash
# The layer check passes on the tree and fails, naming file and rule, on each planted forbidden include.
#   test_layering.sh SRC_DIR
src=$(realpath "${1:?usage: test_layering.sh SRC_DIR}")
source "$(dirname "$0")/lib.sh"
check="$here/check_layering.sh"
out=$(bash "$check" "$src") && ok tree-passes || { bad tree-passes; echo "$out"; }
# The forbidden pairs of docs/architecture.md, one planted at a time in a copy of the tree.
for plant in "train/trainer.h engine/engine.h" "engine/engine.h train/trainer.h" "parallel/topology.h rl/rollout/rollout.h" "comm/mpi.h model/transformer.h" "model/transformer.h parallel/topology.h" "train/zero.h parallel/weight_sync.h" \
             "algo/dapo.h io/checkpoint.h" "reward/reward.h io/prompt_dataset.h" "model/transformer.h engine/engine.h" \
             "util/file.h io/safetensors.h"; do
  read -r file target <<<"$plant"
  rm -rf copy && cp -r "$src" copy
  echo "#include \"$target\"" >> "copy/$file"
  out=$(bash "$check" copy) && rc=0 || rc=$?
  layer=${file%%/*}
  if [ $rc -ne 0 ] && grep -q "^$file:[0-9]* includes ${target%%/*}/: $layer/ may include only" <<<"$out"; then
    ok "planted-$layer-to-${target%%/*}"
  else
    bad "planted-$layer-to-${target%%/*}"; echo "rc $rc: $out"
  fi
done
# rl's subfolders only point down their order.
rm -rf copy && cp -r "$src" copy && echo '#include "rl/modes/colocated.h"' >> copy/rl/config/run_config.h
out=$(bash "$check" copy) && bad planted-rl-config-to-modes || {
  grep -q "^rl/config/run_config.h:[0-9]* includes rl/modes/: rl/config/ may include only" <<<"$out" && ok planted-rl-config-to-modes ||
    { bad planted-rl-config-to-modes; echo "$out"; }
}
rm -rf copy && cp -r "$src" copy && echo 'int y;' > copy/rl/loose.cpp
out=$(bash "$check" copy) && bad rl-file-outside-subfolders || {
  grep -q "src/rl/loose.cpp is in no subfolder" <<<"$out" && ok rl-file-outside-subfolders || bad rl-file-outside-subfolders
}
# A folder that is not a layer.
rm -rf copy && cp -r "$src" copy && mkdir copy/misc && echo 'int x;' > copy/misc/x.cpp
out=$(bash "$check" copy) && bad unknown-folder || { grep -q "src/misc/ is not a layer" <<<"$out" && ok unknown-folder || bad unknown-folder; }
exit $failed
