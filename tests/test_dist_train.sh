#!/usr/bin/env bash
# `mpirun ... rlcpp train -t T -i I` end to end on a tiny model and the toy digits reward:
#   - -t 1 -i 1 takes exactly the colocated run's steps (one thread per process, same bytes);
#   - -t 1 -i 1, -t 2 -i 2 and -t 1 -i 3 learn, with every weight sync verified by hash on every
#     rollout worker and no stale sample under -nb 0; -nb 1 overlaps rounds and stays within 1;
#   - --max-staleness K = 0, 1, 2: the versions behind of every sample and token within K, the
#     mismatch broken down by versions behind, and a schedule over the bound refused;
#   - an error on a rollout worker ends the whole job, naming the rank;
#   - no silent success: a run that trained nothing, or a resume of a finished run, exits 2;
#   - kill -9 of a rank ends the job non-zero within seconds; --resume auto then finishes it with
#     the same metrics as an uninterrupted run (-nb 0 and -nb 1, and from the middle of a round
#     with two trainers), and a run resumes with another -i;
#   - two "hosts" (network namespaces joined by a veth pair) run a short training over TCP; with
#     the link between them dropped mid-run the job ends at --comm-timeout naming the rank waited
#     on, and resumes equal to the run on one host.
# Usage: test_dist_train.sh RLCPP_BINARY MPIEXEC
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_dist_train.sh RLCPP_BINARY MPIEXEC}")
mpiexec=${2:-mpirun}
source "$(dirname "$0")/lib.sh"
cleanup_extra() { two_host_cleanup; }

# A random model over a byte vocabulary (toy/) and 8 prompts (data.jsonl).
"$here/make_toy_task.sh" "$rlcpp" "$fixtures" || bad toy-task
reward=(--reward-cmd "python3 $here/data/digits_reward.py")
base=(-m toy -d data.jsonl -g 8 -tMbs 1 -tmbs 8 --mnt 8 -lr 3e-3 --kl 0 -sd runs "${reward[@]}")

# -t 1 -i 1 = colocated: the same prompts, samples, rewards and updates, step for step.
OMP_NUM_THREADS=1 "$rlcpp" train "${base[@]}" -tbs 2 --max-steps 6 -p colocated > colocated.log 2>&1 || bad colocated-run
run_mpi 2 "${base[@]}" -tbs 2 --max-steps 6 -t 1 -i 1 -p t1i1 --profile-dir prof > t1i1.log 2>&1 || bad t1i1-run
if [ -s runs/colocated/metrics.jsonl ] && cmp -s <(metrics_of runs/colocated/metrics.jsonl) <(metrics_of runs/t1i1/metrics.jsonl); then
  ok same-steps-as-colocated
else
  bad same-steps-as-colocated; diff <(metrics_of runs/colocated/metrics.jsonl) <(metrics_of runs/t1i1/metrics.jsonl) | head -4
fi

# --profile-dir: a Chrome trace per rank, spans nested, with each role's phases.
python3 "$here/check_trace.py" prof/t1i1/trace.rank-0.json step collect_rollouts logprobs forward_backward optimizer \
  weight_sync send recv && python3 "$here/check_trace.py" prof/t1i1/trace.rank-1.json round generate reward weight_sync send recv \
  && ok profile-per-rank || bad profile-per-rank

# Learning in three layouts (global batch 2, 3 or 4 prompts); every sync verified on every worker.
check_learning() {  # NAME METRICS WORKERS MAX_STALENESS
  python3 - "$@" <<'PY'
import json, sys
name, path, workers, max_stale = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lines = [r for r in map(json.loads, open(path)) if "step" in r]
r = [d["reward_mean"] for d in lines]
first, last = sum(r[:5]) / 5, sum(r[-5:]) / 5
stale = max(d["staleness"]["max"] for d in lines)
syncs = sum(d["weight_sync"]["syncs"] for d in lines)
verified = sum(d["weight_sync"]["verified_workers"] for d in lines)
print(f"     {name}: reward first 5 steps {first:.3f}, last 5 {last:.3f}; staleness max {stale}; "
      f"{syncs} syncs, {verified} worker hashes equal to the trainer's")
ok = len(r) == 30 and first < 0.2 and last > 0.6 and stale <= max_stale and syncs >= 10 and verified == syncs * workers
sys.exit(0 if ok else 1)
PY
}
layouts=("1 1 -tbs 2" "2 2 -tbs 2 -ibs 2" "1 3 -tbs 3 -ibs 1 --param-sync-comm-type p2p")
for layout in "${layouts[@]}"; do
  read -r T I rest <<<"$layout"
  name="learn-t${T}i${I}"
  # shellcheck disable=SC2086
  run_mpi $((T + I)) "${base[@]}" -t "$T" -i "$I" $rest --max-steps 30 --verify-sync true -p "$name" > "$name.log" 2>&1 \
    && check_learning "$name" "runs/$name/metrics.jsonl" "$I" 0 && ok "$name" || { bad "$name"; tail -3 "$name.log"; }
done

# -nb 1: the next round is generated while the trainers train; no sample more than 1 version old.
# Those samples come from an older policy: the train/rollout mismatch is measured on them, and
# TIS (--tis-cap) weights their loss by pi_old / pi_rollout (not 1).
run_mpi 4 "${base[@]}" -t 2 -i 2 -tbs 2 -ibs 2 -nb 1 --max-staleness 1 --tis-cap 2 --max-steps 30 --verify-sync true -p nb1 > nb1.log 2>&1 \
  && check_learning nb1 runs/nb1/metrics.jsonl 2 1 \
  && python3 -c 'import json,sys; sys.exit(0 if any(r["staleness"]["max"] == 1 for r in map(json.loads, open("runs/nb1/metrics.jsonl")) if "step" in r) else 1)' \
  && ok n-behind-1 || { bad n-behind-1; tail -3 nb1.log; }
python3 - runs/nb1/metrics.jsonl <<'PY' && ok off-policy-correction || bad off-policy-correction
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
stale = [r for r in rows if r["staleness"]["max"] == 1]
print("     stale steps", len(stale), "mismatch_abs_mean max", max(r["mismatch_abs_mean"] for r in stale),
      "tis_weight_mean range", min(r["tis_weight_mean"] for r in stale), max(r["tis_weight_mean"] for r in stale))
assert stale and max(r["mismatch_abs_mean"] for r in stale) > 1e-3, "no mismatch measured on stale samples"
assert max(r["mismatch_kl"] for r in stale) > 0
assert any(abs(r["tis_weight_mean"] - 1) > 1e-4 for r in stale), "TIS weights are all 1"
assert all(0 < r["tis_weight_mean"] <= 2 for r in rows if r["kept_groups"] > 0)
# The mismatch by versions behind: the stale tokens' apart from the fresh ones.
assert any("1" in r.get("mismatch_by_versions", {}) for r in rows), [r.get("mismatch_by_versions") for r in rows]
PY

# --max-staleness K: the measured versions behind (per sample and per token) never exceed K, at
# K = 0 (rounds of one step), 1 (-nb 1 above) and 2 (rounds of three steps); a schedule that would
# exceed K is refused naming the flags.
check_bound() {  # METRICS K
  python3 - "$1" "$2" <<'PY'
import json, sys
rows, k = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r], int(sys.argv[2])
seen = max(max(r["staleness"]["per_sample"]["max"], r["staleness"]["per_token"]["max"]) for r in rows)
assert all(r["staleness"]["bound"] == k and r["staleness"]["dropped_groups"] == 0 for r in rows), rows[0]["staleness"]
assert seen == k, f"versions behind reached {seen}, the bound is {k}"
hist = {}
for r in rows:
    for v, n in r["staleness"]["samples_by_versions"].items():
        hist[v] = hist.get(v, 0) + n
print(f"     K={k}: samples by versions behind {hist}")
PY
}
run_mpi 2 "${base[@]}" -t 1 -i 1 -tbs 2 -ibs 2 --max-staleness 0 --max-steps 6 -p k0 > k0.log 2>&1 \
  && check_bound runs/k0/metrics.jsonl 0 && ok max-staleness-0 || { bad max-staleness-0; tail -3 k0.log; }
check_bound runs/nb1/metrics.jsonl 1 && ok max-staleness-1 || bad max-staleness-1
run_mpi 2 "${base[@]}" -t 1 -i 1 -tbs 1 -ibs 3 --max-staleness 2 --max-steps 6 -p k2 > k2.log 2>&1 \
  && check_bound runs/k2/metrics.jsonl 2 && ok max-staleness-2 || { bad max-staleness-2; tail -3 k2.log; }
if ! run_mpi 4 "${base[@]}" -t 2 -i 2 -tbs 2 -ibs 4 -nb 1 --max-staleness 1 --max-steps 2 -p k1-refused > k1r.log 2>&1 \
   && grep -q -- "--max-staleness 1: this schedule trains samples up to 3 versions" k1r.log; then
  ok max-staleness-refuses-schedule
else
  bad max-staleness-refuses-schedule; tail -3 k1r.log
fi

# An error on one rank (the workers' reward command dies) ends the job, naming the rank. run_mpi's
# `timeout 300` only catches a hang (exit 124): no assertion on seconds.
run_mpi 3 "${base[@]/digits_reward.py/no_such_reward.py}" -t 1 -i 2 -tbs 2 -ibs 1 --max-steps 5 -p broken > broken.log 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q '^\[rank [12]/rollout [01]\] error: --reward-cmd' broken.log; then
  ok error-aborts-job
else
  bad error-aborts-job; echo "rc $rc (124: it hung)"; head -5 broken.log
fi

# No silent success under mpirun: a run whose every group is filtered trains nothing and exits 2,
# saying so on the trainer's rank and in its status line; resuming a finished run would train
# nothing and exits 2 too.
run_mpi 2 "${base[@]}" -t 1 -i 1 -tbs 2 --max-steps 2 -a DAPO --filter-range 1.5,2 --max-dynamic-rounds 0 -p nolearn \
  > nolearn.log 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -Eq 'took [0-9]+ step\(s\) and none of them changed the policy' nolearn.log \
   && ends_with_status runs/nolearn/metrics.jsonl failed "$(step_count runs/nolearn/metrics.jsonl)" 'none of them changed the policy'; then
  ok learned-nothing-exits-2
else
  bad "learned-nothing-exits-2 (rc $rc)"; grep -v '^\[' nolearn.log | tail -3
fi
run_mpi 2 "${base[@]}" -tbs 2 --max-steps 6 -t 1 -i 1 -p t1i1 --resume auto > t1i1-again.log 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q 'already took step 6 of its 6; resumed, it would train nothing' t1i1-again.log; then
  ok resume-of-a-finished-run-exits-2
else
  bad "resume-of-a-finished-run-exits-2 (rc $rc)"; grep -v '^\[' t1i1-again.log | tail -3
fi

# kill -9 of a rollout worker mid-run: the job ends non-zero within seconds; --resume auto finishes
# it with the steps an uninterrupted run takes (under -nb 1 too: the round in flight at the
# checkpoint, generated by the policy before it, is restored); a run resumes with another -i as well.
crash=(-t 1 -i 2 -tbs 2 -ibs 1 --max-steps 24 --si 4)
kill_and_resume() {  # NAME ARGS...: kills rank 2 once step-8 is written, resumes, compares with NAME-whole
  local name=$1; shift
  run_mpi 3 "${base[@]}" "$@" -p "$name-whole" > "$name-whole.log" 2>&1 || bad "$name-whole-run"
  kill_rank_after "$name" 3 2 8 "${base[@]}" "$@"
  run_mpi 3 "${base[@]}" "$@" -p "$name" --resume auto > "$name-resume.log" 2>&1
  if grep -q "resuming from runs/$name/step-" "$name-resume.log" \
     && cmp -s <(metrics_of "runs/$name-whole/metrics.jsonl") <(metrics_of "runs/$name/metrics.jsonl") \
     && ends_with_status "runs/$name/metrics.jsonl" finished 24; then
    ok "$name-kill-then-resume-exact"
  else
    bad "$name-kill-then-resume-exact"; tail -3 "$name-resume.log"
    diff <(metrics_of "runs/$name-whole/metrics.jsonl") <(metrics_of "runs/$name/metrics.jsonl") | head -4
  fi
}
kill_and_resume crash "${crash[@]}"
kill_and_resume crash-nb1 "${crash[@]}" -nb 1
# Resumed from a checkpoint in the middle of a round (2 steps per round, one every 3 steps), with
# two trainers each given back its own buffered groups: the same steps as uninterrupted, staleness too.
for nb in 0 1; do
  mid=(-t 2 -i 2 -tbs 1 -ibs 2 -nb "$nb" --max-steps 16 --si 3)
  run_mpi 4 "${base[@]}" "${mid[@]}" -p "mid$nb-whole" > "mid$nb-whole.log" 2>&1 || bad "mid$nb-whole-run"
  mkdir -p "runs/mid$nb" && cp -r "runs/mid$nb-whole/step-9" "runs/mid$nb-whole/metrics.jsonl" "runs/mid$nb/" \
    && echo step-9 > "runs/mid$nb/latest"
  run_mpi 4 "${base[@]}" "${mid[@]}" -p "mid$nb" --resume auto > "mid$nb.log" 2>&1
  staleness() { python3 -c 'import json,sys; print([r["staleness"] for r in map(json.loads, open(sys.argv[1])) if "step" in r])' "$1"; }
  if grep -q "resuming from runs/mid$nb/step-9" "mid$nb.log" \
     && cmp -s <(metrics_of "runs/mid$nb-whole/metrics.jsonl") <(metrics_of "runs/mid$nb/metrics.jsonl") \
     && cmp -s <(staleness "runs/mid$nb-whole/metrics.jsonl") <(staleness "runs/mid$nb/metrics.jsonl"); then
    ok "resume-mid-round-nb$nb"
  else
    bad "resume-mid-round-nb$nb"; tail -3 "mid$nb.log"
    diff <(metrics_of "runs/mid$nb-whole/metrics.jsonl") <(metrics_of "runs/mid$nb/metrics.jsonl") | head -4
  fi
done
# -nb may change on resume, also in the middle of a round (no round is waited for that was never sent).
mkdir -p runs/mid-other && cp -r runs/mid0-whole/step-9 runs/mid0-whole/metrics.jsonl runs/mid-other/ && echo step-9 > runs/mid-other/latest
run_mpi 4 "${base[@]}" -t 2 -i 2 -tbs 1 -ibs 2 -nb 1 --max-steps 16 --si 3 -p mid-other --resume auto > mid-other.log 2>&1 \
  && [ "$(step_count runs/mid-other/metrics.jsonl)" -eq 16 ] && ends_with_status runs/mid-other/metrics.jsonl finished 16 && ok resume-mid-round-other-nb || { bad resume-mid-round-other-nb; tail -3 mid-other.log; }
cp -r runs/crash-whole runs/regrow && rm -rf runs/regrow/step-24 && echo step-20 > runs/regrow/latest
run_mpi 2 "${base[@]}" -t 1 -i 1 -tbs 2 -ibs 2 --max-steps 30 -p regrow --resume auto > regrow.log 2>&1 \
  && [ "$(step_count runs/regrow/metrics.jsonl)" -eq 30 ] && ends_with_status runs/regrow/metrics.jsonl finished 30 && grep -q 'resuming from runs/regrow/step-20' regrow.log \
  && ok resume-with-other-i || { bad resume-with-other-i; tail -3 regrow.log; }

# Two hosts: network namespaces joined by a veth pair; mpirun in one starts the other's ranks
# through an "rsh" agent that enters that namespace, and MPI moves everything over TCP.
if two_host_setup; then
  two_host_mpi 2 -m toy -d data.jsonl -g 8 -tMbs 1 -tmbs 8 --mnt 8 -lr 3e-3 --kl 0 -sd runs \
      --reward-cmd "python3 $here/data/digits_reward.py" -t 1 -i 1 -tbs 2 --max-steps 4 --verify-sync true -p two-hosts \
      > two-hosts.log 2>&1
  if [ "$(step_count runs/two-hosts/metrics.jsonl)" -eq 4 ] && grep -q "veth_b$$" hostb.addr; then
    ok two-hosts-over-tcp
  else
    bad two-hosts-over-tcp; tail -5 two-hosts.log
  fi
  # The link between the hosts dropped mid-run: the ranks' MPI waits end at --comm-timeout with an
  # error naming the rank waited on (not a hang); with the link back, --resume auto ends with the
  # weights and metrics of the same run on one host, never cut.
  two_hosts() {  # NAME EXTRA...
    local name=$1; shift
    two_host_mpi 2 -m toy -d data.jsonl -g 8 -tMbs 1 -tmbs 8 --mnt 8 -lr 3e-3 --kl 0 -sd runs --kv-cache-mb 16 \
        --reward-cmd "python3 $here/data/digits_reward.py" -t 1 -i 1 -tbs 2 --max-steps 8 --si 2 --comm-timeout 15 -p "$name" "$@" \
        > "$name.log" 2>&1
  }
  run_mpi 2 -m toy -d data.jsonl -g 8 -tMbs 1 -tmbs 8 --mnt 8 -lr 3e-3 --kl 0 -sd runs --kv-cache-mb 16 \
    --reward-cmd "python3 $here/data/digits_reward.py" -t 1 -i 1 -tbs 2 --max-steps 8 --si 2 -p one-host > one-host.log 2>&1 \
    || bad one-host-run
  two_hosts link-drop &
  job=$!
  while kill -0 $job 2>/dev/null && [ "$(step_count runs/link-drop/metrics.jsonl)" -lt 3 ]; do sleep 0.01; done
  two_host_link down
  start=$SECONDS
  while kill -0 $job 2>/dev/null && ! grep -q "s in MPI .*--comm-timeout" link-drop.log && [ $((SECONDS - start)) -lt 90 ]; do
    sleep 0.2
  done
  took=$((SECONDS - start))
  # The link comes back for mpirun to end the other host's ranks (it reaches them over it too).
  two_host_link up
  wait $job; rc=$?
  if [ $rc -ne 0 ] && [ $took -lt 120 ] && grep -Eq "waited [0-9]+ s in MPI .* for rank [01] .*--comm-timeout 15" link-drop.log; then
    ok "link-drop-ends-the-job (exit $rc after $took s: $(grep -o 'rank [01] waited [0-9]* s in MPI [A-Za-z_]* for rank [01]' link-drop.log | head -1))"
  else
    bad "link-drop-ends-the-job (exit $rc after $took s)"; grep -v '^\[' link-drop.log | tail -5
  fi
  two_hosts link-drop --resume auto
  if [ "$(metrics_of runs/one-host/metrics.jsonl)" = "$(metrics_of runs/link-drop/metrics.jsonl)" ] \
     && cmp -s runs/one-host/step-8/model.safetensors runs/link-drop/step-8/model.safetensors; then
    ok link-drop-resumed-equal
  else
    bad link-drop-resumed-equal; tail -3 link-drop.log
  fi
else
  echo "skip two-hosts-over-tcp: cannot create network namespaces and a veth pair here (needs root and iproute2)"
fi
exit $failed
