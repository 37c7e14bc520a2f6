#!/usr/bin/env bash
# bench/async: one workload, one trainer and one rollout worker (mpirun -np 2, -t 1 -i 1), run
# synchronously (-nb 0), with the next round generated ahead (-nb 1), and with partial rollouts
# (--partial-rollout: switches fixed by the schedule, every 8 engine steps, asap, and with the cache
# recomputed), and partial rollouts with a checkpoint every step, the round ahead cut at each
# checkpoint's version (--checkpoint-round cut) or collected whole first (collect); the same three
# with generation the slower role (--max-num-seqs 4: an engine with room for 4 sequences at once);
# and streamed prompts (--stream-prompts: the next round's prompts in the slots a round leaves free,
# up to 160 sequences at once, 1.25 rounds, or the default 256, two rounds), and the same two taking
# groups in completion order (--group-order completion: a round delivers the first 16 groups to
# complete among its own and the next round's prompts). The workload has a tail
# of response lengths: sampled hot (-temp 1.6) on the demo's
# arithmetic model, most answers end in about 20 tokens and a few run to -mnt 48.
# Prints per mode: samples trained per second, each role's idle fraction (from the ranks' traces:
# the trainer waiting for rollouts, the worker waiting for its round to be collected or for
# weights at a scheduled switch), the mean versions behind per token, and the response lengths.
# Two placements: both roles free on every core with 2 threads each (they share the cores), and
# each pinned to its own core with 1 thread (what separate machines would give). Last, a model of
# the speed-up at 1 trainer : N workers from the pinned run's phase times.
# WORKLOAD=tail: generation the slower role instead (small LoRA steps, -temp 2.0 -mnt 256), where
# a round waits for its slowest group: what --group-order completion is for.
#   bench/async.sh [RLCPP_BINARY]      Env: STEPS (12; tail 24), MNT (48; tail 256), WORKLOAD (demo, tail),
#                                      PLACEMENTS ("shared pinned"), MODES (names of the modes to run; all by default)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
rlcpp=$(realpath "${1:-$src/build/rlcpp}")
steps=${STEPS:-12}
mnt=${MNT:-48}
placements=${PLACEMENTS:-shared pinned}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "${WORKLOAD:-demo}" = tail ]; then
  # Generation the slower role: small LoRA steps (2 prompts x 4 samples, one step a round) and a
  # long tail of lengths (-temp 2.0 -mnt 256), so a round's slowest group decides when it ends.
  group=4 spr=1
  args=(-m "$src/models/arith-tiny" -d "$src/examples/arith/train.jsonl" -a GRPO -g 4 -tbs 2 -ibs 2 -tMbs 2 -tmbs 8
        -temp 2.0 --mnt "${MNT:-256}" -lr 5e-5 --lora-rank 8 --max-steps "${STEPS:-24}" -sd "$work/runs" -t 1 -i 1)
else
  # Rounds of 2 steps (-ibs 16 = 2 x -tbs 8), so a round ahead overlaps two steps and takes two versions.
  group=8 spr=2
  args=(-m "$src/models/arith-tiny" -d "$src/examples/arith/train.jsonl" -a GRPO -g 8 -tbs 8 -ibs 16 -tMbs 8 -tmbs 64
        -temp 1.6 --mnt "$mnt" -lr 5e-5 --max-steps "$steps" -sd "$work/runs" -t 1 -i 1)
fi
modes=("sync|-nb 0" "nb1|-nb 1" "partial|-nb 1 --partial-rollout" "partial-i8|-nb 1 --partial-rollout --switch-interval 8"
       "partial-asap|-nb 1 --partial-rollout --async-switch asap"
       "partial-recompute|-nb 1 --partial-rollout --switch-interval 8 --partial-kv recompute"
       "ckpt-cut|-nb 1 --partial-rollout --si 1" "ckpt-collect|-nb 1 --partial-rollout --si 1 --checkpoint-round collect"
       "slowgen-default|-nb 1 --partial-rollout --max-num-seqs 4"
       "slowgen-partial|-nb 1 --partial-rollout --max-num-seqs 4 --switch-interval 100"
       "slowgen-ckpt-cut|-nb 1 --partial-rollout --max-num-seqs 4 --switch-interval 100 --si 1"
       "slowgen-ckpt-collect|-nb 1 --partial-rollout --max-num-seqs 4 --switch-interval 100 --si 1 --checkpoint-round collect"
       "stream|-nb 1 --partial-rollout --stream-prompts --max-num-seqs 160"
       "stream-all|-nb 1 --partial-rollout --stream-prompts"
       "complete|-nb 1 --partial-rollout --stream-prompts --group-order completion --max-num-seqs 160"
       "complete-all|-nb 1 --partial-rollout --stream-prompts --group-order completion")

report() {  # NAME: figures from metrics.jsonl and the two ranks' traces
  python3 - "$1" "$work/runs/$1/metrics.jsonl" "$work/prof/$1" "$group" "$spr" <<'PY'
import json, sys
name, metrics, prof = sys.argv[1:4]
group, spr = int(sys.argv[4]), int(sys.argv[5])
rows = [r for r in map(json.loads, open(metrics)) if "step" in r]
def spans(rank):
    events = json.load(open(f"{prof}/trace.rank-{rank}.json"))["traceEvents"]
    return [e for e in events if e.get("ph") == "X"]
def total(events, name): return sum(e["dur"] for e in events if e["name"] == name) / 1e6
trainer, worker = spans(0), spans(1)
t0 = min(e["ts"] for e in trainer + worker)
wall = (max(e["ts"] + e["dur"] for e in trainer + worker) - t0) / 1e6
# From the end of the first step on (start-up and the first round are the same in every mode).
first_step_end = min(e["ts"] + e["dur"] for e in trainer if e["name"] == "step")
after = lambda evs: [e for e in evs if e["ts"] >= first_step_end]
span_after = (max(e["ts"] + e["dur"] for e in trainer + worker) - first_step_end) / 1e6
samples = sum(r["kept_groups"] * group for r in rows[1:])
# (a checkpoint's wait for the round ahead: collected whole, or cut at its version)
trainer_idle = (total(after(trainer), "collect_rollouts") + total(after(trainer), "wait_cut")) / span_after
# The rounds that start after the first step, and the waits inside them.
rounds = [e for e in after(worker) if e["name"] == "round"]
inside = [e for e in worker if rounds and e["ts"] >= min(r["ts"] for r in rounds)]
worker_busy = total(rounds, "round") - total(inside, "switch_wait") - total(inside, "deliver_wait")
worker_idle = 1 - worker_busy / span_after
tok = sum(r["staleness"]["per_token"]["mean"] for r in rows) / len(rows)
lens = [r["response_length_mean"] for r in rows]
trunc = sum(r["truncated_fraction"] for r in rows) / len(rows)
rate = samples / span_after
import os
anchor_file = f"{prof}/../{name.split('-')[0]}-sync.rate"
if name.endswith("-sync"):
    open(anchor_file, "w").write(str(rate))
ratio = f"({rate / float(open(anchor_file).read()):4.2f}x sync)" if os.path.exists(anchor_file) else ""
print(f"{name:26s} {rate:7.2f} samples/s {ratio:12s} idle: trainer {trainer_idle:5.1%} worker {worker_idle:5.1%}"
      f"   switch waits {total(worker, 'switch_wait'):5.2f} s   versions behind/token {tok:4.2f}"
      f"   length mean {sum(lens) / len(lens):5.1f} (truncated {trunc:4.1%})   reward {rows[-1]['reward_mean']:.3f}")
phases = {"gen": (total(after(worker), "generate")) / max(1, len([e for e in after(worker) if e["name"] == "round"])),
          "train": sum(r["time"]["logprobs"] + r["time"]["train"] for r in rows[1:]) / len(rows[1:]) * spr,
          "sync": sum(r["time"]["sync"] for r in rows[1:]) / len(rows[1:]) * spr}
json.dump(phases, open(f"{prof}/../{name}.phases.json", "w"))
PY
}

run_mode() {  # PLACEMENT NAME FLAGS...
  local placement=$1 name=$2; shift 2
  local bind=(--bind-to none -x OMP_NUM_THREADS=2)
  [ "$placement" = pinned ] && bind=(--bind-to core -x OMP_NUM_THREADS=1)
  mpirun --oversubscribe "${bind[@]}" -np 2 "$rlcpp" train "${args[@]}" "$@" -p "$name" --profile-dir "$work/prof" \
    > "$work/$name.log" 2>&1 && report "$name" || { echo "$name failed:"; tail -3 "$work/$name.log"; }
}

echo "rlcpp train -t 1 -i 1 on the arith task (${WORKLOAD:-demo}): ${args[*]:4:14}, $(nproc) cores"
for placement in $placements; do
  echo "-- $placement: $([ $placement = shared ] && echo 'both ranks on every core, 2 threads each' || echo 'one core each, 1 thread')"
  for mode in "${modes[@]}"; do
    IFS='|' read -r name flags <<<"$mode"
    [[ " $flags " == *" --si "* ]] || flags="$flags --si 0"  # no checkpoints unless the mode is about them
    [ -n "${MODES:-}" ] && [[ " $MODES " != *" $name "* ]] && continue
    # shellcheck disable=SC2086
    run_mode "$placement" "$placement-$name" $flags
  done
done
# The speed-up at 1 trainer : N workers (rounds split over the workers), from the pinned phases of
# one round: generation G (one worker), training T and syncs S of its two steps.
# Synchronous: G/N + T + S a round. Generated ahead: max(G/N, T + S).
[ -f "$work/prof/pinned-sync.phases.json" ] || exit 0
python3 - "$work/prof/pinned-sync.phases.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
G, T, S = p["gen"], p["train"], p["sync"]
print(f"-- model from the pinned synchronous run: a round generates in {G:.2f} s on one worker, trains in {T:.2f} s, syncs {S:.2f} s")
for n in (1, 2, 4, 8):
    sync, ahead = G / n + T + S, max(G / n, T + S)
    print(f"   1 trainer : {n} workers   synchronous {sync:5.2f} s/round   ahead (-nb 1 / partial) {ahead:5.2f} s/round   speed-up {sync / ahead:4.2f}x")
PY
