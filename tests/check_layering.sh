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
  # Plugins linked with CUDA libraries rlcpp itself does not link (the NCCL communicator): comm's interfaces.
  [cuda]="comm"
  # Child processes: spawn, pipes, process groups, deadlines; under rewards, environments and the sandbox.
  [process]="util"
  [text]="util io"
  [model]="util kernels io comm"
  [engine]="util kernels io text model"
  # Untrusted programs: namespaces (bubblewrap), rlimits, a private directory, a pool; no RL knowledge.
  [sandbox]="util process"
  [reward]="util process sandbox"
  # Multi-turn episodes: tools (python on the sandbox, the calculator on reward's parser), external
  # environments (process), the inserted turns' rendering (text); no engine: the agent loop is rl's.
  [env]="util io process sandbox text reward"
  [algo]="util"
  [train]="util kernels io comm model algo"
  # Topology and WeightSync: roles and the weights' movement; no engine, trainer or run.
  [parallel]="util io comm"
  [rl]="util kernels io comm process sandbox text model engine openai reward env algo train parallel"
  # The OpenAI wire format, rlcpp serve's HTTP server and the remote-rollout HTTP client.
  [openai]="util kernels io text model engine"
  [app]="util kernels io comm process sandbox text model engine openai reward env algo train parallel rl"
)

# rl's subfolders, bottom up: a file in one may include rl/ files of its own subfolder and of those
# before it (config: the run's settings; checkpoint: the files a run writes; rollout: rounds of
# groups and where they come from; step: one step's update, metrics line and evaluation; run: the
# run's state and memory plan; modes: the loops and the distributed roles).
rl_order=(config checkpoint rollout step run modes)
rl_index() { local k; for k in "${!rl_order[@]}"; do [ "${rl_order[$k]}" = "$1" ] && { echo "$k"; return; }; done; echo -1; }

bad=0 includes=0
for f in "$src"/rl/*; do
  [ -f "$f" ] && { echo "src/rl/${f##*/} is in no subfolder of rl/: put it in one of ${rl_order[*]}"; bad=1; }
done
for dir in "$src"/rl/*/; do
  sub=$(basename "$dir")
  [ "$(rl_index "$sub")" -ge 0 ] || { echo "src/rl/$sub/ is not a subfolder of rl in $0: add it to rl_order"; bad=1; }
done
while IFS=: read -r file line include; do
  sub=${file#"$src"/rl/}; sub=${sub%%/*}
  # The subfolder the include names (bash's own matching: a subprocess per include took seconds).
  if [[ $include =~ ^#include\ \"rl/([a-z_]+)/ ]]; then
    target=${BASH_REMATCH[1]}
  else
    echo "${file#"$src"/}:$line includes an rl/ file outside rl's subfolders"; bad=1; continue
  fi
  if [ "$(rl_index "$target")" -gt "$(rl_index "$sub")" ]; then
    echo "${file#"$src"/}:$line includes rl/$target/: rl/$sub/ may include only rl/ subfolders up to itself (${rl_order[*]})"
    bad=1
  fi
done < <(grep -rnE '^#include "rl/' "$src"/rl/ 2>/dev/null || true)

for dir in "$src"/*/; do
  layer=$(basename "$dir")
  if [ -z "${allowed[$layer]+set}" ]; then
    echo "src/$layer/ is not a layer of docs/architecture.md: add it to the table in $0 (and to docs/architecture.md)"
    bad=1
    continue
  fi
  while IFS=: read -r file line include; do
    [[ $include =~ ^#include\ \"([a-z_]+)/ ]] && target=${BASH_REMATCH[1]}
    includes=$((includes + 1))
    [ "$target" = "$layer" ] && continue
    if [[ " ${allowed[$layer]} " != *" $target "* ]]; then
      echo "${file#"$src"/}:$line includes $target/: $layer/ may include only ${allowed[$layer]:-nothing} (docs/architecture.md, layers)"
      bad=1
    fi
  done < <(grep -rnE '^#include "[a-z_]+/' "$dir" || true)
done
[ $bad -eq 0 ] && echo "layering ok: ${#allowed[@]} layers, $includes project includes, each to an allowed layer; rl's subfolders in order"
exit $bad
