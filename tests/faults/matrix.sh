#!/usr/bin/env bash
# The fault-injection matrix (`make faults` runs CASES=24; CTest a sample of 2). A seeded generator
# draws each case:
#   mode    layout: colocated (one process), -t 1 -i 1, -t 2 -i 2 (two trainers), the remote
#           backend (-b openai, two `rlcpp serve`), or -t 1 -i 1 over two "hosts" (network
#           namespaces joined by a veth pair, MPI over TCP); LoRA on or off; ZeRO 0-3 (two trainers);
#           TP 1-2 (the engine's --rollout-tp 2, or the trainers' --train-tp 2); -nb 0-1; partial
#           rollouts (with -nb 1 on rollout workers or servers; the colocated mode is on-policy);
#           single-turn (the toy task, graded by a --reward-cmd process) or multi-turn (the bundled
#           tool-use task: a calculator tool, up to 3 turns; the remote layout's servers then serve
#           its model)
#   victim  a trainer rank, a rollout worker, a rollout server, the reward process (--reward-cmd),
#           or the link between the two hosts
#   moment  a failpoint of the victim's (src/util/failpoint.h: RLCPP_FAILPOINT=NAME:HIT[@RANK]):
#           mid-decode, before a micro-batch's backward, mid-checkpoint write (the weights written,
#           the optimizer state not), mid-weight sync (a bucket received; a server's weight update),
#           mid-HTTP request (a server's request received; the trainer's about to be sent), its
#           HIT-th time there; the victim stops itself there and the fault follows. Or "any": once
#           the run has written a random number of step lines, then a random 0-99 ms more (where
#           gdb is installed, the victim's stack then says what it was doing)
#   fault   kill -9; SIGSTOP for longer than the timeouts (--comm-timeout 30 s, --rollout-timeout
#           15 s); the disk filled under the run directory (a tmpfs, colocated runs); a rollout
#           server answering every request with a 500, or with a 200 that is not JSON (a proxy in
#           front of it, tests/faults/flaky_proxy.py); the link between the two hosts dropped
# and checks, for each:
#   - the job ends by itself within a bounded time (no hang): non-zero, with a message naming the
#     victim and the cause (mpirun's for a killed rank, the comm watchdog's for a stopped one or a
#     dropped link, or rank 0's for one stopped as the job ends, the checkpoint's for a full
#     disk); for a rollout server or the reward process, it carries on
#     without it (the other server; a restarted reward process) and ends 0;
#   - nothing in the run directory is corrupt: its newest checkpoint loads (rlcpp info);
#   - `--resume auto` ends with the metrics and final weights of the run never faulted: bit for
#     bit where the mode promises it (every mode but the remote backend), else equal to the
#     remote promise (figures to 1e-9 relative, the mismatch figures aside; weights to 1e-5:
#     the servers batch differently).
# Every case prints the seed and index that reproduce it (SEED=S CASE=K runs that one alone;
# CASE="K L ..." those of the first CASES; DRY=1 prints the cases drawn and runs none; MOMENT=NAME:HIT
# puts the drawn cases' fault at that failpoint instead). Where
# network namespaces cannot be made (not root), the two-host cases are skipped, saying so.
# Usage: tests/faults/matrix.sh RLCPP_BINARY [MPIEXEC]     Env: CASES (24), SEED (1), CASE, DRY, MOMENT
set -uo pipefail
rlcpp=$(realpath "${1:?usage: tests/faults/matrix.sh RLCPP_BINARY [MPIEXEC]}")
mpiexec=${2:-mpirun}
source "$(dirname "$0")/../lib.sh"
source "$here/faults/phase.sh"
cases=${CASES:-24} seed=${SEED:-1} only=${CASE:-} dry=${DRY:-0}
src=$(cd "$here/.." && pwd)
pids=()
cleanup_extra() { for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done; two_host_cleanup; }
hosts=untried  # the two hosts: made when a case first needs them (yes), or could not be (no)

"$here/make_toy_task.sh" "$rlcpp" "$fixtures" > /dev/null || { bad toy-task; exit 1; }
toy=(-m toy -d data.jsonl -g 8 -tMbs 1 -tmbs 8 --mnt 8 -lr 3e-3 --kl 0 --reward-cmd "python3 $here/data/digits_reward.py"
     -ibs 2 --max-steps 9 --si 3 --comm-timeout 30 --kv-cache-mb 16)
# The multi-turn task (the remote layout's servers serve the arith model: it stays single-turn there).
turns_task=(-m "$src/models/tools-tiny" -d "$src/examples/tools/train.jsonl" -rt boxed --tools calculator --max-turns 3
            -g 4 -tMbs 1 -tmbs 4 --mnt 48 -temp 1.0 -lr 5e-5 --seed 3 -ibs 2 --max-steps 6 --si 2 --comm-timeout 30
            --kv-cache-mb 32)
remote=(-b openai --rollout-timeout 15)
arith=(-m "$src/models/arith-tiny" -d "$src/examples/arith/train.jsonl" -g 4 -tbs 2 -tMbs 2 -tmbs 8 --mnt 16 -lr 5e-5
       --max-steps 6 --si 2 --seed 5)
# The two rlcpp serve of the remote layout, serving the case's model: started when first needed,
# again when killed, when the model changes, or (server b) to be started with a failpoint.
servers=(none none) url_a="" url_b="" proxy=none served=none
serve_two() {  # MODEL [FAILPOINT for server b]
  local k i=0
  if [ "$served" != "$1" ]; then for k in 0 1; do [ "${servers[$k]}" != none ] && end_job "${servers[$k]}"; servers[$k]=none; done; fi
  served=$1
  for k in a b; do
    if [ "${servers[$i]}" = none ] || ! kill -0 "${servers[$i]}" 2>/dev/null; then
      local fp=""; [ "$k" = b ] && fp=${2:-}
      RLCPP_FAILPOINT=$fp start_server "server-$k.log" --model "$1" --kv-cache-mb 64 || { bad "server-$k-starts"; return 1; }
      pids+=("$server_pid"); servers[$i]=$server_pid; printf -v "url_$k" '%s' "$server_url"
    fi
    i=$((i + 1))
  done
  # Server b is reached through a proxy that answers 500s or garbage on a signal (a fresh one a case).
  [ "$proxy" != none ] && kill "$proxy" 2>/dev/null
  python3 "$here/faults/flaky_proxy.py" "$url_b" > proxy.log 2>&1 &
  proxy=$!; pids+=("$proxy")
  for _ in $(seq 1 100); do url_proxy=$(grep -o 'http://[0-9.:]*' proxy.log); [ -n "$url_proxy" ] && return 0; sleep 0.05; done
  bad proxy-starts; return 1
}

# --- a case from (SEED, K): the mode, the victim, the moment, the fault -------------------------
draw() {  # K: sets layout lora zero tp nb partial turns np flags victim fault point hit after extra_ms
  RANDOM=$((seed * 1000 + $1))
  local layouts=(colo dist dist2 remote twohost)
  layout=${layouts[$((RANDOM % 5))]} lora=$((RANDOM % 2)) zero=0 tp=1 nb=$((RANDOM % 2)) partial=0
  flags=() np=1
  case $layout in
    colo) nb=0 ;;  # on-policy (-nb needs rollout workers or servers)
    dist) np=2; flags=(-t 1 -i 1 -tbs 1)
          [ $((RANDOM % 3)) = 0 ] && { tp=2; np=3; flags=(-t 1 -i 2 --rollout-tp 2 -tbs 1); } ;;
    dist2) np=4; flags=(-t 2 -i 2 -tbs 2); zero=$((RANDOM % 4))
           [ "$zero" = 0 ] && [ $((RANDOM % 2)) = 1 ] && { tp=2; flags=(-t 2 -i 2 --train-tp 2 -tbs 1); } ;;
    twohost) np=2; flags=(-t 1 -i 1 -tbs 1) ;;
  esac
  [ "$zero" != 0 ] && flags+=(-zero "$zero")
  [ "$lora" = 1 ] && flags+=(--lora-rank 4)
  [ "$nb" = 1 ] && flags+=(-nb 1)
  # Multi-turn: the tool-use task (no reward process).
  turns=$(( RANDOM % 3 == 0 ? 1 : 0 ))
  # Partial rollouts (not with the servers' multi-turn rollouts, which refuse them).
  [ "$nb" = 1 ] && [ "$layout" != colo ] && [ $((RANDOM % 2)) = 1 ] && ! [ "$layout$turns" = remote1 ] && { partial=1; flags+=(--partial-rollout); }
  # victims: a rank of mpirun (0 trainer; workers after the trainers), the trainer process, a
  # server, the reward process, the link between the hosts
  local victims
  case $layout in
    colo) victims=(trainer reward) ;;
    dist) victims=(rank:0 rank:1 reward); [ "$tp" = 2 ] && victims+=(rank:2) ;;
    dist2) victims=(rank:0 rank:1 rank:2 rank:3) ;;
    remote) victims=(trainer server) ;;
    twohost) victims=(rank:0 rank:1 link) ;;
  esac
  victim=${victims[$((RANDOM % ${#victims[@]}))]}
  [ "$victim" = reward ] && [ "$turns" = 1 ] && { victim=trainer; [ "$layout" != colo ] && victim=rank:0; }
  local faults=(kill9)
  case $victim in
    rank:*) faults+=(stop) ;;
    server) faults+=(stop http500 garbage) ;;
    trainer) [ "$layout" = colo ] && command -v unshare > /dev/null && faults+=(diskfull) ;;
    link) faults=(linkdrop) ;;
  esac
  fault=${faults[$((RANDOM % ${#faults[@]}))]}
  # The moment: a failpoint the victim passes (its HIT-th time), or any.
  local trainers=1 points=(any)
  [ "$layout" = dist2 ] && trainers=2
  case $victim in
    trainer) points+=(backward checkpoint); [ "$layout" = colo ] && points+=(decode); [ "$layout" = remote ] && points+=(http) ;;
    rank:0|link) points+=(backward checkpoint sync) ;;
    rank:*) if [ "${victim#rank:}" -lt "$trainers" ]; then points+=(backward)
            elif [ "$tp" = 2 ] && [ "$layout" = dist ] && [ "$victim" = rank:2 ]; then points+=(sync)  # the TP follower
            else points+=(decode sync); fi ;;
    server) points+=(decode http sync) ;;
  esac
  point=${points[$((RANDOM % ${#points[@]}))]}
  # HIT within what a run passes: a backward and a weight sync or more a step, a checkpoint every
  # third (every second in 6 steps), some 3-8 decode steps a step, 2 requests a step to a server.
  local steps=9; [ "$layout" = remote ] || [ "$turns" = 1 ] && steps=6
  case $point in
    any) hit=0 ;;
    decode) hit=$((1 + RANDOM % (3 * steps))) ;;
    backward|sync) hit=$((1 + RANDOM % (steps - 1))) ;;
    checkpoint) hit=$((1 + RANDOM % 3)) ;;
    http) hit=$((1 + RANDOM % (2 * steps - 2))) ;;
  esac
  # (0-99 ms: a toy step takes ~100 ms, and a whole colocated run about a second; 0-399 ms let
  # most "any" moments of the reward process fall after the run's end)
  after=$((1 + RANDOM % (steps - 1))) extra_ms=$((RANDOM % 100))
  [ -n "${MOMENT:-}" ] && { point=${MOMENT%%:*}; hit=${MOMENT#*:}; [ "$point" = any ] && hit=0; }
  return 0
}
failpoint_spec() {  # the victim's RLCPP_FAILPOINT (none for a random moment)
  [ "$point" = any ] && return
  case $victim in
    rank:*) echo "$point:$hit@${victim#rank:}" ;;
    link) echo "$point:$hit@0" ;;
    *) echo "$point:$hit" ;;
  esac
}
moment_name() { if [ "$point" = any ]; then echo "line $after+${extra_ms}ms"; else echo "@$point:$hit"; fi; }
mode_name() { echo "$layout lora$lora zero$zero tp$tp nb$nb${partial:+ partial$partial}$([ "${turns:-0}" = 1 ] && echo " turns")"; }
weights_file() { [ "$lora" = 1 ] && echo adapter_model.safetensors || echo model.safetensors; }
final_step() { [ "$layout" = remote ] || [ "$turns" = 1 ] && echo 6 || echo 9; }

# --- running a mode ------------------------------------------------------------------------------
launch() {  # NAME [EXTRA...]: the mode's run in the background (its pid in job)
  local name=$1; shift
  local task=("${toy[@]}"); [ "$turns" = 1 ] && task=("${turns_task[@]}")
  if [ "$layout" = remote ]; then
    [ "$turns" = 1 ] && task+=(-tbs 1) || task=("${arith[@]}")
    timeout 300 "$rlcpp" train "${task[@]}" "${remote[@]}" "${flags[@]}" --rollout-url "$url_a,$url_proxy" -sd runs -p "$name" "$@" > "$name.log" 2>&1 &
  elif [ "$layout" = twohost ]; then
    two_host_mpi "$np" "${task[@]}" "${flags[@]}" -sd runs -p "$name" "$@" > "$name.log" 2>&1 &
  elif [ "$np" = 1 ]; then
    timeout 300 "$rlcpp" train "${task[@]}" -tbs 1 "${flags[@]}" -sd runs -p "$name" "$@" > "$name.log" 2>&1 &
  else
    run_mpi "$np" "${task[@]}" "${flags[@]}" -sd runs -p "$name" "$@" > "$name.log" 2>&1 &
  fi
  job=$!
}
fingerprint() {  # NAME: the metrics (timings aside) and the final weights
  metrics_of "runs/$1/metrics.jsonl"
  sha256sum < "runs/$1/step-$(final_step)/$(weights_file)"
}
# The remote promise: the same metrics to 1e-9 relative (its mismatch figures aside) and weights to 1e-5.
same_remote() {  # A B
  metrics_close "runs/$1/metrics.jsonl" "runs/$2/metrics.jsonl" rollout_servers mismatch_abs_max mismatch_abs_mean \
    mismatch_kl mismatch_by_versions &&
    weights_close "runs/$1/step-$(final_step)/$(weights_file)" "runs/$2/step-$(final_step)/$(weights_file)" 1e-5 overall > /dev/null
}
declare -A reference=()
reference_of() {  # ref: the uninterrupted run of this mode (run once per mode)
  local key
  key=ref-$(mode_name | tr ' ' '-')
  if [ -z "${reference[$key]:-}" ]; then
    launch "$key"
    wait "$job" || { bad "$key: the run never faulted fails (SEED=$seed CASE=$k)"; tail -3 "$key.log"; return 1; }
    reference[$key]=$key
  fi
  ref=${reference[$key]}
}
victim_pid() {  # NAME: the victim's process now
  local p
  case $victim in
    rank:*) rank_pid "$1" "${victim#rank:}" ;;
    link) rank_pid "$1" 0 ;;  # the moment is rank 0's
    trainer) pgrep -f "^[^ ]*rlcpp train .*-p $1\$" | head -1 ;;
    server) echo "${servers[1]}" ;;
    reward) for p in $(pgrep -f "python3 $here/data/digits_reward.py"); do  # python3 under /bin/sh under the run's rlcpp
              case $(tr '\0' ' ' 2>/dev/null < "/proc/$p/cmdline") in *rlcpp*|/bin/sh*|"") continue ;; esac
              local up; up=$(ps -o ppid= -p "$(ps -o ppid= -p "$p" | tr -d ' ')" 2>/dev/null | tr -d ' ')
              [ -n "$up" ] && tr '\0' ' ' 2>/dev/null < "/proc/$up/cmdline" | grep -q -- "-p $1 $" && { echo "$p"; return; }
            done ;;
  esac
}

# --- one case ------------------------------------------------------------------------------------
declare -A tally=() moments=()
end_job() { kill -CONT "$1" 2>/dev/null; kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null; }  # PID: a job of ours, ended quietly
stopped() { [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" = T ]; }  # PID: stopped
stopped_victim() {  # NAME: the victim's pid once it has stopped itself at its failpoint; nothing if the run ended first
  local p
  while kill -0 "$job" 2>/dev/null; do
    p=$(victim_pid "$1")
    [ -n "$p" ] && stopped "$p" && { echo "$p"; return; }
    sleep 0.02
  done
}
hangs=0 corrupt=0 silent=0 equal=0 run=0
run_case() {  # K
  local k=$1 name="c$1" ref pid phase="-" rc outcome resumed="-" why="" lines newest spec link_down=0
  draw "$k"
  if [ "$layout" = twohost ]; then
    [ "$hosts" = untried ] && { two_host_setup && hosts=yes || hosts=no; }
    [ "$hosts" = yes ] || { echo "skip case $k ($(mode_name)): cannot make network namespaces here (needs root and iproute2)"; return; }
  fi
  local model="$src/models/arith-tiny"; [ "$turns" = 1 ] && model="$src/models/tools-tiny"
  [ "$layout" = remote ] && { serve_two "$model" || return; }
  reference_of || return
  run=$((run + 1))
  spec=$(failpoint_spec)
  # A server that stops itself at a failpoint is started with it (after the reference run).
  if [ "$victim" = server ] && [ -n "$spec" ]; then
    end_job "${servers[1]}"; servers[1]=none
    serve_two "$model" "$spec" || return
  fi
  if [ "$fault" = diskfull ]; then
    disk_full_case "$name"; rc=$?
  else
    if [ -n "$spec" ] && [ "$victim" != server ]; then RLCPP_FAILPOINT=$spec launch "$name"; else launch "$name"; fi
    if [ -n "$spec" ]; then
      pid=$(stopped_victim "$name")  # it stops itself there, or the run ends without passing it
      phase=$point
    else
      while kill -0 "$job" 2>/dev/null && [ "$(step_count "runs/$name/metrics.jsonl")" -lt "$after" ]; do sleep 0.005; done
      sleep "0.$(printf '%03d' "$extra_ms")"
      pid=$(victim_pid "$name")
      [ -n "$pid" ] && kill -STOP "$pid" 2>/dev/null && phase=$(phase_of "$pid") || pid=""
    fi
    grep -qs '"status"' "runs/$name/metrics.jsonl" && touch "$name.ended-before"
    if [ -n "$pid" ]; then  # stopped, by itself or by us
      case $fault in
        kill9) kill -9 "$pid" 2>/dev/null ;;
        stop) pids+=("$pid") ;;
        http500) kill -CONT "$pid"; kill -USR1 "$proxy" ;;
        garbage) kill -CONT "$pid"; kill -USR2 "$proxy" ;;
        linkdrop) two_host_link down; link_down=1; kill -CONT "$pid" ;;
      esac
    fi  # else no such process at that moment (not started yet, or done), or the failpoint not passed
    local deadline=$((SECONDS + 120))
    while kill -0 "$job" 2>/dev/null && [ $SECONDS -lt $deadline ]; do
      # The link comes back once the watchdog has spoken, for mpirun to end the other host's ranks.
      [ $link_down = 1 ] && grep -q "s in MPI .*--comm-timeout" "$name.log" && { two_host_link up; link_down=0; }
      sleep 0.1
    done
    [ $link_down = 1 ] && two_host_link up
    if kill -0 "$job" 2>/dev/null; then
      hangs=$((hangs + 1)); bad "case $k hung (SEED=$seed CASE=$k): $(mode_name), $victim $fault"
      pkill -9 -f -- "-p $name\$"; kill -9 "$job" 2>/dev/null
    fi
    wait "$job"; rc=$?
    [ "$fault" = stop ] && [ -n "$pid" ] && { kill -CONT "$pid" 2>/dev/null; [ "$victim" != server ] && kill -9 "$pid" 2>/dev/null; }
  fi
  # How it ended: with the victim's cause named, or carrying on without it.
  if [ -z "$pid" ] && [ "$fault" != diskfull ]; then
    outcome="no victim"
    [ $rc -eq 0 ] || { outcome="FAILED"; why="no fault, exit $rc"; }
  elif [ -f "$name.ended-before" ] && [ $rc -eq 0 ]; then
    outcome="after its end"  # the run had written its status line: the fault came as it exited
  elif [ "$victim" = server ] || [ "$victim" = reward ]; then
    if [ $rc -eq 0 ]; then outcome="carried on"; else outcome="FAILED"; why="exit $rc without its $victim"; fi
  elif [ $rc -eq 0 ]; then
    silent=$((silent + 1)); outcome="SILENT"; why="exit 0 after the $victim was faulted"
  else
    outcome="ended $rc"
    case $fault in
      kill9) [ "$np" = 1 ] || [ "$layout" = remote ] || grep -q "rank ${victim#rank:} with PID .* exited on signal 9" "$name.log" \
               || { outcome="FAILED"; why="no message naming rank ${victim#rank:} killed"; } ;;
      stop|linkdrop) grep -Eq "(waited [0-9]+ s in MPI|did not exit in [0-9]+ s) .*--comm-timeout" "$name.log" \
              || { outcome="FAILED"; why="no watchdog message"; } ;;
      diskfull) grep -Eq "MiB free|No space left|disk" "$name.log" || { outcome="FAILED"; why="no message naming the disk"; } ;;
    esac
  fi
  [ "$outcome" = FAILED ] && bad "case $k (SEED=$seed CASE=$k): $why"
  # A server started with a failpoint it may not have passed: the next case starts a fresh one.
  [ "$victim" = server ] && [ -n "$spec" ] && { end_job "${servers[1]}"; servers[1]=none; }
  lines=$(step_count "runs/$name/metrics.jsonl"); newest=$(cat "runs/$name/latest" 2>/dev/null || echo none)
  if [ "$newest" != none ] && ! "$rlcpp" info "runs/$name/$newest" > /dev/null 2>&1; then
    corrupt=$((corrupt + 1)); bad "case $k (SEED=$seed CASE=$k): runs/$name/$newest does not load"
  fi
  # The run resumed (a run that carried on is already whole: it must equal the reference as it is).
  # (a run faulted after its last checkpoint, a rank stopped at its exit, is whole too: a resume
  # would have nothing left to train and says so)
  if [ "$outcome" = "carried on" ] || [ "$outcome" = "no victim" ] || [ "$outcome" = "after its end" ] ||
     [ "$newest" = "step-$(final_step)" ]; then :; else
    launch "$name" --resume auto; wait "$job" || { bad "case $k (SEED=$seed CASE=$k): the resume failed"; tail -3 "$name.log"; }
  fi
  if [ "$layout" = remote ]; then
    same_remote "$ref" "$name" && resumed="equal (remote)" || resumed="DIFFERENT"
  else
    [ "$(fingerprint "$name" 2>/dev/null)" = "$(fingerprint "$ref")" ] && resumed="bitwise" || resumed="DIFFERENT"
  fi
  [ "$resumed" = DIFFERENT ] && bad "case $k (SEED=$seed CASE=$k): the run differs from the one never faulted" || equal=$((equal + 1))
  printf '%-3s %-44s %-8s %-8s %-14s %-11s %5s %-8s %-12s %s\n' "$k" "$(mode_name)" "$victim" "$fault" "$(moment_name)" \
    "$phase" "$lines" "$newest" "$outcome" "$resumed"
  tally["$layout $fault"]=$(( ${tally["$layout $fault"]:-0} + 1 ))
  moments["$point"]=$(( ${moments["$point"]:-0} + 1 ))
}

# A colocated run whose disk fills: its run directory on a 64 MiB tmpfs (a private mount
# namespace), filled up at the moment; then the filler is removed and the run directory copied out
# for the resume.
disk_full_case() {  # NAME
  local name=$1 task=("${toy[@]}"); [ "$turns" = 1 ] && task=("${turns_task[@]}")
  mkdir -p runs "$name-out"
  NAME=$name AFTER=$after EXTRA_MS=$extra_ms RLCPP_FAILPOINT=$spec unshare -rm bash -c '
    mount -t tmpfs -o size=64m tmpfs runs || exit 99
    "$@" > "$NAME.log" 2>&1 &
    job=$!
    if [ -n "$RLCPP_FAILPOINT" ]; then  # the disk fills while it is stopped at its failpoint
      while kill -0 $job 2>/dev/null; do
        p=$(pgrep -P $job)
        [ -n "$p" ] && [ "$(sed "s/.*) //" /proc/$p/stat 2>/dev/null | cut -d" " -f1)" = T ] && { pid=$p; break; }
        sleep 0.02
      done
    else
      lines() { local n; n=$(grep -c "\"step\":" runs/$NAME/metrics.jsonl 2>/dev/null); echo "${n:-0}"; }
      while kill -0 $job 2>/dev/null && [ "$(lines)" -lt $AFTER ]; do sleep 0.005; done
      sleep 0.0$((EXTRA_MS % 10))  # 0-90 ms: a colocated toy step takes ~100 ms
      kill -0 $job 2>/dev/null && pid=$job
    fi
    grep -qs "\"status\"" runs/$NAME/metrics.jsonl && touch "$NAME.ended-before"
    fallocate -l $(( $(stat -f -c "%a*%S" runs) )) runs/filler 2>/dev/null || head -c 64M /dev/zero > runs/filler 2>/dev/null
    [ -n "${pid:-}" ] && kill -CONT $pid
    wait $job; rc=$?
    rm -f runs/filler
    cp -a runs/. "$NAME-out"/
    [ -n "${pid:-}" ] || exit 98
    exit $rc' _ timeout 300 "$rlcpp" train "${task[@]}" -tbs 1 "${flags[@]}" -sd runs -p "$name"
  local rc=$?
  cp -a "$name-out/." runs/ 2>/dev/null
  [ $rc -eq 99 ] && { bad "case (SEED=$seed CASE=$k): cannot mount a tmpfs here"; return 0; }
  if [ $rc -eq 98 ]; then pid=""; return 0; fi
  pid=filled phase=${point/any/-}
  return $rc
}

echo "fault matrix: seed $seed, $cases case(s)${only:+ (case $only only)}"
printf '%-3s %-44s %-8s %-8s %-14s %-11s %5s %-8s %-12s %s\n' case mode victim fault moment phase steps newest ended resumed
for k in $(seq 1 "$cases"); do
  [ -n "$only" ] && [[ " $only " != *" $k "* ]] && continue
  if [ "$dry" = 1 ]; then draw "$k"; printf '%-3s %-44s %-8s %-8s %s\n' "$k" "$(mode_name)" "$victim" "$fault" "$(moment_name)"; continue; fi
  run_case "$k"
done
[ "$dry" = 1 ] && exit 0
counts() { local -n t=$1; for key in "${!t[@]}"; do printf '%s %s\n' "$key" "${t[$key]}"; done | sort | paste -sd ',' | sed 's/,/, /g'; }
echo "cases by layout and fault: $(counts tally)"
echo "cases by moment: $(counts moments)"
echo "$run case(s): $equal ended equal to the run never faulted; $hangs hang(s), $corrupt corrupt run director(ies), $silent silent success(es)"
[ "$failed" = 0 ] && ok "fault-matrix (seed $seed)"
exit $failed
