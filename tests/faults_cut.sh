#!/usr/bin/env bash
# Fault injection for the round a checkpoint cuts (`make faults`): partial rollouts with a
# checkpoint in the middle of a round (step-3), composed with a tensor-parallel engine (-i 2
# --rollout-tp 2, its second rank killed), LoRA (the worker killed) and ZeRO-3 over two trainers
# with two engines (a worker killed, two records in flight). Each is killed with kill -9 once
# step-3 is written and resumed with --resume auto; it must end with the metrics and weights of
# the run never killed, bit for bit, its checkpoint holding the round in flight of every engine.
# Usage: faults_cut.sh RLCPP_BINARY [MPIEXEC]
set -uo pipefail
rlcpp=$(realpath "${1:?usage: faults_cut.sh RLCPP_BINARY [MPIEXEC]}")
mpiexec=${2:-mpirun}
source "$(dirname "$0")/lib.sh"

"$here/make_toy_task.sh" "$rlcpp" "$fixtures" > /dev/null || bad toy-task
base=(-m toy -d data.jsonl -g 8 -tMbs 1 -tmbs 8 --mnt 8 -lr 3e-3 --kl 0 -sd runs
      --reward-cmd "python3 $here/data/digits_reward.py" -tbs 1 --max-steps 12 --si 3 -ibs 2 -nb 1 --partial-rollout
      --verify-sync true)
same_run() {  # A B WEIGHTS_FILE
  cmp -s <(metrics_of "runs/$1/metrics.jsonl") <(metrics_of "runs/$2/metrics.jsonl") &&
    cmp -s "runs/$1/step-12/$3" "runs/$2/step-12/$3"
}
# name | processes | the rank killed | the weights file | flags
for case in "rollout-tp|3|2|model.safetensors|-t 1 -i 2 --rollout-tp 2" \
            "lora|2|1|adapter_model.safetensors|-t 1 -i 1 --lora-rank 4" \
            "zero3|4|3|model.safetensors|-t 2 -i 2 -zero 3"; do
  IFS='|' read -r name np victim weights flags <<<"$case"
  # shellcheck disable=SC2086
  run_mpi "$np" "${base[@]}" $flags -p "$name-whole" > "$name-whole.log" 2>&1 || { bad "$name-whole"; tail -3 "$name-whole.log"; continue; }
  engines=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["round"]; print(sum(x["progress"] is not None for x in r["in_flight"]))' \
            "runs/$name-whole/step-3/trainer_state/state.json")
  # shellcheck disable=SC2086
  kill_rank_after "$name" "$np" "$victim" 3 "${base[@]}" $flags
  # shellcheck disable=SC2086
  run_mpi "$np" "${base[@]}" $flags -p "$name" --resume auto > "$name-resume.log" 2>&1
  if [ "$engines" -ge 1 ] && grep -q "resuming from runs/$name/step-" "$name-resume.log" && same_run "$name-whole" "$name" "$weights"; then
    ok "$name: killed after a cut ($engines engine record(s) in flight), resumed bitwise equal"
  else
    bad "$name: killed after a cut, resumed (records in flight: $engines)"; tail -3 "$name-resume.log"
  fi
done
exit $failed
