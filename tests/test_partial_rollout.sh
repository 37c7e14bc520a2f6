#!/usr/bin/env bash
# Partial rollouts (--partial-rollout) under mpirun, -t 1 -i 1 -nb 1, on the toy digits task:
#   - the round generated ahead takes each new policy version in the middle of its sequences: some
#     samples hold tokens of two versions, and their tokens are fresher on average than -nb 1's;
#   - switch points fixed by the schedule: two runs are equal bit for bit (metrics, staleness,
#     weights), every sync verified by hash on the worker;
#   - a checkpoint cuts the round ahead at its version and saves it in flight (the worker's samples
#     as far as they got); kill -9 of the rollout worker, or of the trainer, after a checkpoint:
#     --resume auto goes on from it and ends with the weights and metrics of the run never killed;
#   - LoRA, ZeRO-3 over two trainers, a tensor-parallel trainer (each also under --max-staleness,
#     finishing or dropping), a tensor-parallel engine,
#     --async-switch asap and --partial-kv recompute with two workers run (and mix versions);
#   - --max-staleness K down to the bound of rounds not generated ahead, K = 0, 1, 2: no trained
#     sample or token more than K versions behind; with --stale-policy drop the round ahead starts
#     from the versions the bound allows (nothing dropped), with finish tokens over it are kept as
#     context only (counted), and a run killed and resumed ends as the one never killed (with
#     --checkpoint-round collect: the round ahead collected whole at a checkpoint);
#   - --stream-prompts: the next round's prompts decoded in the slots a round leaves free,
#     reproducible, held in a checkpoint's cut, resumed exactly after kill -9 of the worker; with
#     LoRA over two workers, a tensor-parallel engine, and ZeRO-3 (killed and resumed exactly);
#   - --group-order completion (on the arithmetic model sampled hot, a tail of response lengths):
#     groups trained out of pick order, every picked prompt trained, filtered out or still held
#     (nothing lost, nothing twice), reproducible, the bound K = 1, 2 kept (held groups begun anew
#     under drop), kill -9 of the worker or the trainer and resume exact, a run continued from its
#     last checkpoint trains the pool it held (and one resumed in pick order says it leaves them
#     out); with LoRA and dynamic batching over two workers, a tensor-parallel engine or trainer,
#     and ZeRO-3 (killed and resumed exactly);
#   - the combinations partial rollouts cannot take are refused, naming the flags.
# Usage: test_partial_rollout.sh RLCPP_BINARY MPIEXEC
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_partial_rollout.sh RLCPP_BINARY MPIEXEC}")
mpiexec=${2:-mpirun}
source "$(dirname "$0")/lib.sh"

"$here/make_toy_task.sh" "$rlcpp" "$fixtures" || bad toy-task
reward=(--reward-cmd "python3 $here/data/digits_reward.py")
# Rounds of 2 prompts, one a step: each round generates while the 2 steps before it train.
# Checkpoints every 3 steps: at a round's end and in the middle of one.
rounds=(-m toy -d data.jsonl -g 8 -tMbs 1 -tmbs 8 --mnt 8 -lr 3e-3 --kl 0 -sd runs "${reward[@]}" -tbs 1
        --max-steps 12 --si 3)
common=("${rounds[@]}" -ibs 2)
base=("${common[@]}" -t 1 -i 1)
partial=("${base[@]}" -nb 1 --partial-rollout --verify-sync true)
# metrics_of plus the staleness figures (they are the point here)
with_staleness() { metrics_of "$1"; python3 -c 'import json,sys; print([r["staleness"] for r in map(json.loads, open(sys.argv[1])) if "step" in r])' "$1"; }
same_run() {  # A B: metrics, staleness and final weights equal
  cmp -s <(with_staleness "runs/$1/metrics.jsonl") <(with_staleness "runs/$2/metrics.jsonl") \
    && cmp -s "runs/$1/step-12/model.safetensors" "runs/$2/step-12/model.safetensors"
}

run_mpi 2 "${base[@]}" -nb 1 -p nb1 > nb1.log 2>&1 || { bad nb1-run; tail -3 nb1.log; }
run_mpi 2 "${partial[@]}" -p partial > partial.log 2>&1 || { bad partial-run; tail -3 partial.log; }
# The second run with its timing disturbed (two busy loops on the two cores): the switch points
# are the schedule's, so nothing changes.
yes > /dev/null & busy1=$!
yes > /dev/null & busy2=$!
run_mpi 2 "${partial[@]}" -p again > again.log 2>&1 || { bad partial-again-run; tail -3 again.log; }
kill "$busy1" "$busy2"
same_run partial again && ok partial-reproducible || { bad partial-reproducible; diff <(with_staleness runs/partial/metrics.jsonl) <(with_staleness runs/again/metrics.jsonl) | head -4; }

# Versions mixed within samples (a sample's oldest token is older than its tokens' mean), the
# tokens fresher than without partial rollouts, every version a step made sent and verified.
check_mixed() {  # NAME WORKERS [BASELINE]
  python3 - "runs/$1/metrics.jsonl" "$2" "${3:+runs/$3/metrics.jsonl}" <<'PY'
import json, sys
rows, workers = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r], int(sys.argv[2])
def token_mean(rows):
    return sum(r["staleness"]["per_token"]["mean"] for r in rows) / len(rows)
mixed = [r for r in rows if r["staleness"]["per_token"]["mean"] < r["staleness"]["per_sample"]["mean"] - 1e-9]
syncs = sum(r["weight_sync"]["syncs"] for r in rows)
verified = sum(r["weight_sync"]["verified_workers"] for r in rows)
line = f"     {len(rows)} steps, {len(mixed)} with samples of two versions; versions behind per token {token_mean(rows):.3f}"
if sys.argv[3]:
    base = [r for r in map(json.loads, open(sys.argv[3])) if "step" in r]
    line += f" (-nb 1 alone {token_mean(base):.3f})"
    assert token_mean(rows) < token_mean(base), "partial rollouts' tokens are not fresher"
    assert all(r["staleness"]["per_token"]["mean"] == r["staleness"]["per_sample"]["mean"] for r in base)
print(line + f"; {syncs} syncs, {verified} verified")
assert len(rows) == 12 and mixed, "no sample holds tokens of two versions"
assert syncs >= 5 and verified == syncs * workers, (syncs, verified)
PY
}
check_mixed partial 1 nb1 && ok partial-mixes-versions || bad partial-mixes-versions

# kill -9 of the worker (rank 1) once step-3 is written (a checkpoint in the middle of a round),
# then of the trainer (rank 0) once step-6 is (a round's end); --resume auto finishes with the
# uninterrupted run's weights and metrics.
for rank in 1 0; do
  name=killed$rank
  kill_rank_after "$name" 2 "$rank" $((rank == 1 ? 3 : 6)) "${partial[@]}"
  run_mpi 2 "${partial[@]}" -p "$name" --resume auto > "$name-resume.log" 2>&1
  if grep -q "resuming from runs/$name/step-" "$name-resume.log" && same_run partial "$name"; then
    ok "kill-rank$rank-then-resume-exact"
  else
    bad "kill-rank$rank-then-resume-exact"; tail -3 "$name-resume.log"
  fi
done

# The checkpoint in the middle of a round (step-3) holds the round generating ahead as the worker
# cut it at the checkpoint's version (--checkpoint-round cut, the default): samples unfinished with
# the tokens they had, nothing collected; the kills above resumed from it exactly.
python3 - runs/partial/step-3/trainer_state/state.json <<'PY' && ok partial-checkpoint-holds-round-in-flight || bad partial-checkpoint-holds-round-in-flight
import json, sys
state = json.load(open(sys.argv[1]))
r = state["round"]
assert r["collected"] is None and len(r["in_flight"]) == 1, r.keys()
cut = r["in_flight"][0]
samples = cut["progress"]["samples"]
going_on = [s for s in samples if not s["done"]]
print(f"     step-3: {len(samples)} samples in flight, {len(going_on)} unfinished with "
      f"{sum(len(s['tokens']) for s in going_on)} tokens; cut after version {cut['taken']} of {cut['switches']['cuts']}")
assert going_on and all(s["tokens"] for s in going_on) and cut["taken"] in cut["switches"]["cuts"]
assert len(state["in_flight_prompts"]) == 2
PY

# The bound K held: no trained sample or token more than K versions behind; under drop nothing
# masked or dropped, under finish some tokens kept as context only.
check_bound() {  # NAME K POLICY
  python3 - "runs/$1/metrics.jsonl" "$2" "$3" <<'PY'
import json, sys
rows, k, policy = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r], int(sys.argv[2]), sys.argv[3]
st = [r["staleness"] for r in rows]
seen = max(max(s["per_sample"]["max"], s["per_token"]["max"]) for s in st)
masked, dropped = sum(s["masked_tokens"] for s in st), sum(s["dropped_groups"] for s in st)
mixed = sum(s["per_token"]["mean"] < s["per_sample"]["mean"] - 1e-9 for s in st)
print(f"     K={k} {policy}: at most {seen} versions behind, {masked} tokens kept as context only, "
      f"{dropped} groups dropped, {mixed} steps with samples of two versions")
assert len(rows) == 12 and all(s["bound"] == k for s in st), st[0]
assert seen <= k, f"versions behind reached {seen}, the bound is {k}"
assert (masked == 0 and dropped == 0) if policy == "drop" else masked > 0
PY
}

# LoRA (the adapters are the weights sent; its bound at 1, finishing), asap switches, recomputed caches with two workers.
run_mpi 2 "${partial[@]}" --lora-rank 4 --max-staleness 1 --stale-policy finish -p lora > lora.log 2>&1 \
  && check_mixed lora 1 && check_bound lora 1 finish && ok partial-lora || { bad partial-lora; tail -3 lora.log; }
run_mpi 2 "${partial[@]}" --async-switch asap -p asap > asap.log 2>&1 \
  && [ "$(step_count runs/asap/metrics.jsonl)" -eq 12 ] && ends_with_status runs/asap/metrics.jsonl finished 12 && ok partial-asap || { bad partial-asap; tail -3 asap.log; }
run_mpi 3 "${common[@]}" -t 1 -i 2 -nb 1 --partial-rollout --verify-sync true --partial-kv recompute -p recompute \
  > recompute.log 2>&1 && check_mixed recompute 2 \
  && ok partial-recompute || { bad partial-recompute; tail -3 recompute.log; }

# The trainers' other layouts take part in every version sent: ZeRO-3 over two trainers (the
# layers streamed to the two workers; bound 2, dropping) and a tensor-parallel trainer (its parts
# gathered; bound 1, finishing).
run_mpi 4 "${common[@]}" -t 2 -i 2 -zero 3 -nb 1 --partial-rollout --verify-sync true --max-staleness 2 -p zero3 \
  > zero3.log 2>&1 && check_mixed zero3 2 && check_bound zero3 2 drop && ok partial-zero3 || { bad partial-zero3; tail -3 zero3.log; }
run_mpi 3 "${common[@]}" -t 2 --train-tp 2 -i 1 -nb 1 --partial-rollout --verify-sync true --max-staleness 1 \
  --stale-policy finish -p train-tp > train-tp.log 2>&1 && check_mixed train-tp 1 && check_bound train-tp 1 finish \
  && ok partial-train-tp || { bad partial-train-tp; tail -3 train-tp.log; }
# A tensor-parallel engine: both its ranks take each version at the same engine step.
run_mpi 3 "${common[@]}" -t 1 -i 2 --rollout-tp 2 -nb 1 --partial-rollout --verify-sync true -p rollout-tp \
  > rollout-tp.log 2>&1 && check_mixed rollout-tp 1 && ok partial-rollout-tp || { bad partial-rollout-tp; tail -3 rollout-tp.log; }

# --max-staleness under partial rollouts: rounds of two steps (K >= 1) or of one (K >= 0).
run_mpi 2 "${rounds[@]}" -ibs 1 -t 1 -i 1 -nb 1 --partial-rollout --max-staleness 0 -p k0-drop > k0-drop.log 2>&1 && check_bound k0-drop 0 drop \
  && ok partial-max-staleness-0 || { bad partial-max-staleness-0; tail -3 k0-drop.log; }
# (and --checkpoint-round collect: the trainers collect the round ahead whole at a checkpoint)
finish=("${partial[@]}" --max-staleness 1 --stale-policy finish --checkpoint-round collect)
run_mpi 2 "${finish[@]}" -p k1-finish > k1-finish.log 2>&1 && check_bound k1-finish 1 finish \
  && ok partial-max-staleness-1-finish || { bad partial-max-staleness-1-finish; tail -3 k1-finish.log; }
run_mpi 2 "${partial[@]}" --max-staleness 2 -p k2-drop > k2-drop.log 2>&1 && check_bound k2-drop 2 drop \
  && ok partial-max-staleness-2 || { bad partial-max-staleness-2; tail -3 k2-drop.log; }
# The tokens kept as context are in the checkpoint's buffers (the round ahead collected into them):
# a worker killed after step-3, resumed.
kill_rank_after k1-killed 2 1 3 "${finish[@]}"
run_mpi 2 "${finish[@]}" -p k1-killed --resume auto > k1-killed-resume.log 2>&1
same_run k1-finish k1-killed && ok stale-finish-resume-exact || { bad stale-finish-resume-exact; tail -3 k1-killed-resume.log; }

# --stream-prompts: each round comes with the next one's prompts, which the worker decodes in the
# sequence slots the round leaves free (--max-num-seqs 24: one of the next round's two prompts at
# first, the other once the round's own sequences end) and which go on when their round is sent.
# Reproducible bit for bit; a checkpoint's cut holds them as far as they got; kill -9 of the worker
# after step-6 (whose cut holds some), then --resume auto, ends as the run never killed.
stream=("${partial[@]}" --stream-prompts --max-num-seqs 24)
run_mpi 2 "${stream[@]}" -p stream > stream.log 2>&1 || { bad stream-run; tail -3 stream.log; }
yes > /dev/null & busy1=$!
run_mpi 2 "${stream[@]}" -p stream-again > stream-again.log 2>&1
kill $busy1
same_run stream stream-again && ok stream-reproducible || { bad stream-reproducible; diff <(with_staleness runs/stream/metrics.jsonl) <(with_staleness runs/stream-again/metrics.jsonl) | head -4; }
python3 - runs/stream runs/partial <<'PY' && ok stream-prompts-in-flight || bad stream-prompts-in-flight
import glob, json, sys
held = []
for path in sorted(glob.glob(sys.argv[1] + "/step-*/trainer_state/state.json")):
    state = json.load(open(path))
    for cut in state["round"]["in_flight"]:
        if cut.get("streamed"):
            samples = cut["streamed"]["progress"]["samples"]
            held.append((path.split("/")[-3], sum(len(s["tokens"]) for s in samples)))
            assert [p["id"] for p in cut["streamed"]["picks"]] == [p["id"] for p in state["next_prompts"]], path
rows = lambda run: [r for r in map(json.loads, open(run + "/metrics.jsonl")) if "step" in r]
behind = lambda run: sum(r["staleness"]["per_token"]["mean"] for r in rows(run)) / len(rows(run))
print(f"     streamed tokens held at the checkpoints {held}; versions behind per token {behind(sys.argv[1]):.3f} "
      f"(partial rollouts alone {behind(sys.argv[2]):.3f})")
assert len(rows(sys.argv[1])) == 12 and any(tokens > 0 for _, tokens in held), held
PY
kill_rank_after stream-killed 2 1 6 "${stream[@]}"
run_mpi 2 "${stream[@]}" -p stream-killed --resume auto > stream-killed-resume.log 2>&1
grep -q "resuming from runs/stream-killed/step-" stream-killed-resume.log && same_run stream stream-killed \
  && ok stream-kill-then-resume-exact || { bad stream-kill-then-resume-exact; tail -3 stream-killed-resume.log; }
# With the others: LoRA over two workers, a tensor-parallel engine, and ZeRO-3 over two trainers fed
# by two workers (killed after step-6 and resumed exactly).
streamed=(-nb 1 --partial-rollout --verify-sync true --stream-prompts --max-num-seqs 24)
run_mpi 3 "${common[@]}" -t 1 -i 2 "${streamed[@]}" --lora-rank 4 -p stream-lora > stream-lora.log 2>&1 \
  && check_mixed stream-lora 2 && ok stream-lora-two-workers || { bad stream-lora-two-workers; tail -3 stream-lora.log; }
run_mpi 3 "${common[@]}" -t 1 -i 2 --rollout-tp 2 "${streamed[@]}" -p stream-rollout-tp > stream-rollout-tp.log 2>&1 \
  && check_mixed stream-rollout-tp 1 && ok stream-rollout-tp || { bad stream-rollout-tp; tail -3 stream-rollout-tp.log; }
run_mpi 4 "${common[@]}" -t 2 -i 2 -zero 3 "${streamed[@]}" -p stream-zero3 > stream-zero3.log 2>&1 \
  && check_mixed stream-zero3 2 && ok stream-zero3 || { bad stream-zero3; tail -3 stream-zero3.log; }
kill_rank_after stream-zero3-killed 4 3 6 "${common[@]}" -t 2 -i 2 -zero 3 "${streamed[@]}"
run_mpi 4 "${common[@]}" -t 2 -i 2 -zero 3 "${streamed[@]}" -p stream-zero3-killed --resume auto > stream-zero3-resume.log 2>&1
grep -q "resuming from runs/stream-zero3-killed/step-" stream-zero3-resume.log && same_run stream-zero3 stream-zero3-killed \
  && ok stream-zero3-kill-then-resume-exact || { bad stream-zero3-kill-then-resume-exact; tail -3 stream-zero3-resume.log; }

# --group-order completion: a worker's round ends once -ibs of the groups it holds (its own and the
# next round's streamed beside them) are complete and delivers those; the others go on in the next
# round. On the arithmetic model sampled hot (a tail of response lengths), one step a round: groups
# are trained out of the order they were picked, each picked prompt trained once or still held at
# the end (nothing lost, nothing twice); reproducible bit for bit; kill -9 of the worker after
# step-6, then --resume auto, ends as the run never killed; a run continued from the last checkpoint
# (no round in flight: the pool is the checkpoint's) trains the prompts that pool held.
arith_task=(-m "$here/../models/arith-tiny" -d "$here/../examples/arith/train.jsonl" -g 4 -tbs 2 -ibs 2 -tMbs 2 -tmbs 8
            -lr 5e-5 --si 3 -sd runs)
arith=("${arith_task[@]}" -temp 1.6 --mnt 32)
completion=(-nb 1 --partial-rollout --verify-sync true --stream-prompts --group-order completion)
complete=("${arith[@]}" -t 1 -i 1 "${completion[@]}")
longer=("${arith_task[@]}" -temp 2.0 --mnt 96 -t 1 -i 1 "${completion[@]}")  # sampled hotter, a longer tail
run_mpi 2 "${complete[@]}" --max-steps 12 --rsd rollouts -p complete > complete.log 2>&1 || { bad complete-run; tail -3 complete.log; }
run_mpi 2 "${arith[@]}" -t 1 -i 1 -nb 1 --partial-rollout --stream-prompts --max-steps 12 -p complete-pick > complete-pick.log 2>&1
check_pool complete 12 && ok completion-order-nothing-lost || bad completion-order-nothing-lost
python3 - runs/complete runs/complete-pick <<'PY'
import json, sys  # the figures beside pick order's (for the log)
for run in sys.argv[1:]:
    r = [r for r in map(json.loads, open(run + "/metrics.jsonl")) if "step" in r]
    print(f"     {run}: wait for rollouts {sum(x['time']['wait'] for x in r):.2f} s, versions behind per sample "
          f"{sum(x['staleness']['per_sample']['mean'] for x in r) / len(r):.2f} (max {max(x['staleness']['per_sample']['max'] for x in r)})")
PY
yes > /dev/null & busy1=$!
run_mpi 2 "${complete[@]}" --max-steps 12 -p complete-again > complete-again.log 2>&1
kill $busy1
same_run complete complete-again && ok completion-order-reproducible || { bad completion-order-reproducible; diff <(with_staleness runs/complete/metrics.jsonl) <(with_staleness runs/complete-again/metrics.jsonl) | head -4; }
# Groups held from round to round would go over --max-staleness: under drop the worker begins them
# anew instead (counted), so the bound holds with nothing dropped; under finish their old tokens are
# context only.
restarted() { python3 -c 'import json, sys; n = sum(r["staleness"]["restarted_groups"] for r in map(json.loads, open(sys.argv[1])) if "step" in r)
print(f"     {n} groups begun anew"); assert n > 0' "runs/$1/metrics.jsonl"; }
run_mpi 2 "${complete[@]}" --max-steps 12 --max-staleness 1 -p complete-k1 > complete-k1.log 2>&1 \
  && check_bound complete-k1 1 drop && restarted complete-k1 && ok completion-order-max-staleness-1 || { bad completion-order-max-staleness-1; tail -3 complete-k1.log; }
run_mpi 2 "${complete[@]}" --max-steps 12 --max-staleness 1 --stale-policy finish -p complete-k1-finish > complete-k1-finish.log 2>&1 \
  && check_bound complete-k1-finish 1 finish && ok completion-order-max-staleness-1-finish || { bad completion-order-max-staleness-1-finish; tail -3 complete-k1-finish.log; }
run_mpi 2 "${complete[@]}" --max-steps 12 --max-staleness 2 -p complete-k2 > complete-k2.log 2>&1 \
  && check_bound complete-k2 2 drop && ok completion-order-max-staleness-2 || { bad completion-order-max-staleness-2; tail -3 complete-k2.log; }
kill_rank_after complete-killed 2 1 6 "${complete[@]}" --max-steps 12
run_mpi 2 "${complete[@]}" --max-steps 12 -p complete-killed --resume auto > complete-killed-resume.log 2>&1
grep -q "resuming from runs/complete-killed/step-" complete-killed-resume.log && same_run complete complete-killed \
  && ok completion-order-kill-then-resume-exact || { bad completion-order-kill-then-resume-exact; tail -3 complete-killed-resume.log; }
# (and the trainer killed after step-9)
kill_rank_after complete-trainer-killed 2 0 9 "${complete[@]}" --max-steps 12
run_mpi 2 "${complete[@]}" --max-steps 12 -p complete-trainer-killed --resume auto > complete-trainer-killed-resume.log 2>&1
grep -q "resuming from runs/complete-trainer-killed/step-" complete-trainer-killed-resume.log && same_run complete complete-trainer-killed \
  && ok completion-order-trainer-kill-then-resume-exact || { bad completion-order-trainer-kill-then-resume-exact; tail -3 complete-trainer-killed-resume.log; }
# Continued from the last checkpoint of a 10-step run, to 16 steps. The scenario is found, not hoped
# for: the 10-step run must end holding a prompt older than the next round's (so that only the saved
# pool has it), which depends on how the samples fall on this CPU; the first seed of 1..8 whose run
# does is taken, and none doing so is a failure that says so.
older_held() {  # RUN: the run's last checkpoint holds a prompt older than the next round's
  python3 -c 'import json, sys; held = set(json.load(open(sys.argv[1])))
state = json.load(open(sys.argv[2]))
sys.exit(0 if held - {p["id"] for p in state["next_prompts"]} else 1)' "runs/$1.held" "runs/$1/step-10/trainer_state/state.json"
}
ten_seed=""
for seed in 1 2 3 4 5 6 7 8; do
  rm -rf runs/complete-ten rollouts/complete-ten
  run_mpi 2 "${longer[@]}" --seed $seed --max-steps 10 --rsd rollouts -p complete-ten > complete-ten.log 2>&1 \
    && check_pool complete-ten 10 > complete-ten.pool || { bad complete-ten-run; cat complete-ten.pool; break; }
  if older_held complete-ten; then ten_seed=$seed; cat complete-ten.pool; echo "     seed $seed: its step-10 holds a prompt older than the next round's"; break; fi
done
[ -n "$ten_seed" ] || bad "completion-order-pool-resumed: none of seeds 1-8 ended a 10-step run holding a prompt older than the next round's"
cp -r runs/complete-ten runs/complete-more
run_mpi 2 "${longer[@]}" --seed "${ten_seed:-1}" --max-steps 16 --rsd rollouts -p complete-more --resume auto > complete-more.log 2>&1 \
  && check_pool complete-more 16 11 \
  && python3 -c 'import json, sys; held, trained, still = (set(json.load(open(f))) for f in sys.argv[1:4])
state = json.load(open(sys.argv[4]))
older = held - {p["id"] for p in state["next_prompts"]}
print(f"     of the {len(held)} prompts step-10 held ({len(older)} older than the next round), {len(held & trained)} "
      f"trained in steps 11-16, {len(held & still)} still held")
assert older and held <= trained | still' runs/complete-ten.held runs/complete-more.trained runs/complete-more.held \
      runs/complete-ten/step-10/trainer_state/state.json \
  && ok completion-order-pool-resumed || { bad completion-order-pool-resumed; tail -3 complete-more.log; }
# Resumed in pick order, the held prompts are said to be left out (not silently lost).
cp -r runs/complete-ten runs/complete-pick-resumed
run_mpi 2 "${arith_task[@]}" -temp 2.0 --mnt 96 -t 1 -i 1 -nb 1 --partial-rollout --stream-prompts --max-steps 12 \
  --seed "${ten_seed:-1}" -p complete-pick-resumed --resume auto > complete-pick-resumed.log 2>&1 \
  && grep -q "held $(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))))' runs/complete-ten.held) prompt(s) picked and not yet delivered" complete-pick-resumed.log \
  && ok completion-order-pools-left-out-said || { bad completion-order-pools-left-out-said; tail -3 complete-pick-resumed.log; }
# With the others: two workers with LoRA and DAPO's dynamic batching (filtered groups leave the
# pools too), a tensor-parallel engine, a tensor-parallel trainer, ZeRO-3 over two trainers fed by
# two workers (a worker killed after step-6, resumed exactly).
run_mpi 3 "${arith[@]}" -t 1 -i 2 "${completion[@]}" --max-steps 12 --lora-rank 4 --filter-range 0,1 \
  --dynamic-batching --rsd rollouts -p complete-lora > complete-lora.log 2>&1 && check_pool complete-lora 12 1 2 0 \
  && ok completion-order-lora-dynamic-batching || { bad completion-order-lora-dynamic-batching; tail -3 complete-lora.log; }
run_mpi 3 "${arith[@]}" -t 1 -i 2 --rollout-tp 2 "${completion[@]}" --max-steps 12 --rsd rollouts \
  -p complete-rollout-tp > complete-rollout-tp.log 2>&1 && check_pool complete-rollout-tp 12 \
  && ok completion-order-rollout-tp || { bad completion-order-rollout-tp; tail -3 complete-rollout-tp.log; }
run_mpi 3 "${arith[@]}" -t 2 --train-tp 2 -i 1 "${completion[@]}" --max-steps 12 --rsd rollouts -p complete-train-tp \
  > complete-train-tp.log 2>&1 && check_pool complete-train-tp 12 \
  && ok completion-order-train-tp || { bad completion-order-train-tp; tail -3 complete-train-tp.log; }
zero3=("${arith[@]}" -t 2 -i 2 -zero 3 "${completion[@]}" --max-steps 12)
run_mpi 4 "${zero3[@]}" --rsd rollouts -p complete-zero3 > complete-zero3.log 2>&1 && check_pool complete-zero3 12 1 4 \
  && ok completion-order-zero3 || { bad completion-order-zero3; tail -3 complete-zero3.log; }
kill_rank_after complete-zero3-killed 4 3 6 "${zero3[@]}"
run_mpi 4 "${zero3[@]}" -p complete-zero3-killed --resume auto > complete-zero3-resume.log 2>&1
grep -q "resuming from runs/complete-zero3-killed/step-" complete-zero3-resume.log && same_run complete-zero3 complete-zero3-killed \
  && ok completion-order-zero3-kill-then-resume-exact || { bad completion-order-zero3-kill-then-resume-exact; tail -3 complete-zero3-resume.log; }

# Refused combinations.
refused() {  # NAME EXPECTED-TEXT NP ARGS...
  local name=$1 text=$2 np=$3; shift 3
  if [ "$np" -gt 1 ]; then run_mpi "$np" "$@" -p "$name" > "$name.log" 2>&1; else "$rlcpp" train "$@" -p "$name" > "$name.log" 2>&1; fi
  if [ $? -ne 0 ] && grep -q -- "$text" "$name.log"; then ok "$name"; else bad "$name"; tail -3 "$name.log"; fi
}
colocated=(-m toy -d data.jsonl -g 8 -tbs 1 -tMbs 1 --mnt 8 -sd runs "${reward[@]}" --max-steps 2)
refused refuses-colocated "--partial-rollout: the colocated mode" 1 "${colocated[@]}" --partial-rollout
refused refuses-no-nb "--partial-rollout with -nb 0" 2 "${base[@]}" --partial-rollout
refused refuses-asap-alone "add --partial-rollout or drop them" 1 "${colocated[@]}" --async-switch asap
refused refuses-servers-recompute "prefill each chunk anew" 1 "${colocated[@]}" --partial-rollout \
  -nb 1 -b openai --rollout-url http://127.0.0.1:9 --partial-kv recompute
refused refuses-sync-frequency "--partial-rollout with --sync-frequency 2" 2 "${base[@]}" -nb 2 --sync-frequency 2 --partial-rollout
refused refuses-below-round "raise --max-staleness to 1" 2 "${partial[@]}" --max-staleness 0
refused refuses-finish-alone "--stale-policy finish says what becomes of tokens over --max-staleness" 1 "${colocated[@]}" \
  --stale-policy finish
refused refuses-asap-interval "--async-switch asap with --switch-interval 4" 2 "${partial[@]}" --async-switch asap --switch-interval 4
refused refuses-stream-alone "--stream-prompts without --partial-rollout" 2 "${base[@]}" -nb 1 --stream-prompts
refused refuses-stream-imbs "--stream-prompts with -imbs 1" 2 "${partial[@]}" --stream-prompts -imbs 1
refused refuses-completion-alone "--group-order completion without --stream-prompts" 2 "${partial[@]}" --group-order completion
exit $failed
