#!/usr/bin/env bash
# Fault injection for asynchronous training (`make faults`; a short sample runs in CTest): a partial-
# rollout run (-t 1 -i 1 -nb 1 --partial-rollout, checkpoints every 3 steps, some in the middle of
# a round) is killed with kill -9 at N random moments, the trainer or the rollout worker, then
# resumed with --resume auto; each resumed run must end with the weights, metrics and staleness of
# the run never killed, bit for bit. A moment is a random number of metrics lines written, then a
# random 0-199 ms more. The victim is stopped first and, where gdb is installed, its main thread's
# stack says what it was doing (decode, grading, step, sync, checkpoint or wait). Prints one row per
# kill: the victim, the moment, its phase, how far the run had got (metrics lines, newest
# checkpoint) and whether the resumed run is equal, then the kills by victim and phase.
# MODE says which run: partial (the default: 24 steps of the toy task), completion (the same with
# --stream-prompts --group-order completion: pools of prompts held from round to round), episodes
# (12 steps of the bundled tool-use task, multi-turn episodes in completion order: episodes held
# between rounds with their state).
# Usage: faults_async.sh RLCPP_BINARY [MPIEXEC]     Env: KILLS (20), SEED (1), MODE (partial)
set -uo pipefail
rlcpp=$(realpath "${1:?usage: faults_async.sh RLCPP_BINARY [MPIEXEC]}")
mpiexec=${2:-mpirun}
source "$(dirname "$0")/lib.sh"
kills=${KILLS:-20}
mode=${MODE:-partial}
RANDOM=${SEED:-1}

in_order=(--stream-prompts --group-order completion)
case $mode in
  partial|completion)
    "$here/make_toy_task.sh" "$rlcpp" "$fixtures" > /dev/null || bad toy-task
    steps=24
    args=(-m toy -d data.jsonl -g 8 -tMbs 1 -tmbs 8 --mnt 8 -lr 3e-3 --kl 0 -sd runs
          --reward-cmd "python3 $here/data/digits_reward.py" -tbs 1 --max-steps $steps --si 3
          -t 1 -i 1 -nb 1 --partial-rollout --switch-interval 2)
    if [ "$mode" = completion ]; then args+=(-ibs 1 "${in_order[@]}"); else args+=(-ibs 2); fi ;;
  episodes)
    steps=12
    args=(-m "$here/../models/tools-tiny" -d "$here/../examples/tools/train.jsonl" -rt boxed --tools calculator
          --max-turns 3 -g 4 -temp 1.0 --mnt 64 -tbs 4 -ibs 4 -tMbs 4 -tmbs 16 -lr 5e-5 -sd runs --seed 3
          --max-steps $steps --si 3 -t 1 -i 1 -nb 1 --partial-rollout "${in_order[@]}") ;;
  *) echo "MODE=$mode: give partial, completion or episodes" >&2; exit 2 ;;
esac
fingerprint() {  # RUN: metrics (timings aside), staleness and the final weights
  metrics_of "runs/$1/metrics.jsonl"
  python3 -c 'import json,sys; print([r["staleness"] for r in map(json.loads, open(sys.argv[1])) if "step" in r])' "runs/$1/metrics.jsonl"
  sha256sum < "runs/$1/step-$steps/model.safetensors"
}
run_mpi 2 "${args[@]}" -p whole > whole.log 2>&1 || { bad whole-run; tail -3 whole.log; exit 1; }
reference=$(fingerprint whole)
source "$here/faults/phase.sh"  # phase_of PID
echo "$kills kills of an asynchronous run ($mode, $steps steps), each once the run has written a random number of"
echo "metrics lines and then a random 0-199 ms more (mid-step, mid-decode, mid-sync or mid-checkpoint)"
printf '%-4s %-8s %-16s %-11s %8s %-12s %s\n' kill victim moment phase metrics checkpoint resumed
equal=0
declare -A by_phase=()
for k in $(seq 1 "$kills"); do
  name=k$k rank=$((RANDOM % 2)) after=$((1 + RANDOM % (steps - 1))) extra_ms=$((RANDOM % 200))
  run_mpi 2 "${args[@]}" -p "$name" > "$name.log" 2>&1 &
  job=$!
  while kill -0 "$job" 2>/dev/null && [ "$(step_count "runs/$name/metrics.jsonl")" -lt "$after" ]; do sleep 0.005; done
  sleep "0.$(printf '%03d' "$extra_ms")"
  victim=$(rank_pid "$name" "$rank") phase=-
  if [ -n "$victim" ]; then
    kill -STOP "$victim" 2>/dev/null && phase=$(phase_of "$victim")
    kill -9 "$victim" 2>/dev/null || victim=""
  fi
  wait $job
  rc=$?
  lines=$(step_count "runs/$name/metrics.jsonl")
  newest=$(cat "runs/$name/latest" 2>/dev/null || echo none)
  what=$([ "$rank" = 0 ] && echo trainer || echo worker)
  [ -z "$victim" ] && what="none"  # no such process at that moment (not started yet, or already done)
  [ $rc -eq 124 ] && { bad "$name-hung"; continue; }
  run_mpi 2 "${args[@]}" -p "$name" --resume auto > "$name-resume.log" 2>&1
  if [ "$(fingerprint "$name" 2>/dev/null)" = "$reference" ]; then result=equal; equal=$((equal + 1)); else result=DIFFERENT; bad "$name-resume-exact"; fi
  printf '%-4s %-8s %-16s %-11s %8s %-12s %s\n' "$k" "$what" "line $after+${extra_ms}ms" "$phase" "$lines" "$newest" "$result"
  by_phase["$what $phase"]=$(( ${by_phase["$what $phase"]:-0} + 1 ))
done
echo "kills by victim and phase: $(for key in "${!by_phase[@]}"; do printf '%s %s\n' "$key" "${by_phase[$key]}"; done | sort | paste -sd ',' | sed 's/,/, /g')"
echo "$equal of $kills resumed runs equal to the uninterrupted one"
[ "$equal" -eq "$kills" ] && ok resumed-runs-equal
exit $failed
