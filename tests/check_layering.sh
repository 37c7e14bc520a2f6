#!/usr/bin/env bash
# The layer rules of docs/architecture.md as a table: each folder under src/ names the folders it may include
# (besides itself). Any other include fails the check, so the forbidden pairs docs/architecture.md lists
# (engine<->train, parallel->engine/train/rl, algo/reward->io, model->engine/train) cannot creep in,
# and neither can any upward include. A folder missing from the table fails too: a new layer gets
# its line here and in docs/architecture.md at the same time.
#   check_layering.sh SRC_DIR
set -euo pipefail
src=${1:?usage: check_layering.sh SRC_DIR}

declare -A allowed=(
  [util]=""
  [kernels]="util"
  [io]="util"
  # Communicator, MPI and the bucketed collectives: below every user of them.
  [comm]="util"
  # Child processes: spawn, pipes, process groups, deadlines; under rewards, environments and the sandbox.
  [process]="util"
  [text]="util io"
  [model]="util kernels io comm"
  [engine]="util kernels io text model"
  [reward]="util process"
  [algo]="util"
  [train]="util kernels io comm model algo"
  # Topology and WeightSync: roles and the weights' movement; no engine, trainer or run.
  [parallel]="util io comm"
  [rl]="util kernels io comm process text model engine reward algo train parallel"
  [serve]="util kernels io process text model engine reward"
  [app]="util kernels io comm process text model engine reward algo train parallel rl serve"
)

bad=0 includes=0
for dir in "$src"/*/; do
  layer=$(basename "$dir")
  if [ -z "${allowed[$layer]+set}" ]; then
    echo "src/$layer/ is not a layer of docs/architecture.md: add it to the table in $0 (and to docs/architecture.md)"
    bad=1
    continue
  fi
  while IFS=: read -r file line include; do
    target=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$include")
    includes=$((includes + 1))
    [ "$target" = "$layer" ] && continue
    if [[ " ${allowed[$layer]} " != *" $target "* ]]; then
      echo "${file#"$src"/}:$line includes $target/: $layer/ may include only ${allowed[$layer]:-nothing} (docs/architecture.md, layers)"
      bad=1
    fi
  done < <(grep -rnE '^#include "[a-z_]+/' "$dir" || true)
done
[ $bad -eq 0 ] && echo "layering ok: ${#allowed[@]} layers, $includes project includes, each to an allowed layer"
exit $bad
