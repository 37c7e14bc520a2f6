#!/usr/bin/env bash
# Multi-turn rollouts end to end on the bundled tool-use task (models/tools-tiny, examples/tools):
#   - colocated GRPO with --tools calculator: the multi-turn metrics (turns, tool calls, inserted
#     tokens, tito_mismatch 0), rollouts carrying their conversation ("turns"), an eval set run as
#     episodes (tool-call rate), the report's conversation;
#   - the same with LoRA, with MPI rollout workers (-t 1 -i 1: the colocated run's steps exactly),
#     with ZeRO-1 over two trainers, with tensor-parallel rollout workers and -nb 1, with partial
#     rollouts (versions changing mid-episode; a checkpoint cuts the episodes in flight, saves them
#     and they go on, exactly after a kill -9), with --stream-prompts and --group-order completion
#     (episodes held between rounds; reproducible, exact after a kill -9), and with the remote
#     backend (rlcpp serve; each turn a request of the whole sequence so far);
#   - exact resume after kill -9 (the round in flight is regenerated from the checkpoint);
#   - an external environment (-rt env, --env-cmd): its rewards, a first observation, a second
#     try; a crashing environment ends the run naming the command;
#   - rlcpp eval --tools; flags that do not go together are refused naming them.
# Usage: test_tools_train.sh RLCPP_BINARY SOURCE_DIR MPIEXEC
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_tools_train.sh RLCPP_BINARY SOURCE_DIR MPIEXEC}")
src=$(realpath "${2:?usage: test_tools_train.sh RLCPP_BINARY SOURCE_DIR MPIEXEC}")
mpiexec=${3:-mpirun}
source "$(dirname "$0")/lib.sh"
model="$src/models/tools-tiny"
data="$src/examples/tools/train.jsonl"
test_set="$src/examples/tools/test.jsonl"
pids=()
cleanup_extra() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }

common=(-m "$model" -rt boxed --tools calculator --max-turns 3 -g 4 -temp 1.0 --mnt 64 -sd runs --seed 3
        --log-interval 100)
base=("${common[@]}" -tbs 4 -tMbs 4 -tmbs 16 -d "$data" -lr 5e-5)
steps=3

# 1. Colocated, with an eval set and rollouts saved.
timeout 600 "$rlcpp" train "${base[@]}" --max-steps $steps -p colocated -ed "{\"tools\": \"$test_set\"}" -ei $steps \
  --eval-limit 16 -rsd runs/colocated/rollouts --rollout-save-interval 1 > colocated.log 2>&1 \
  || { bad colocated-run; tail -5 colocated.log; }
python3 - runs/colocated <<'PY' && ok multi-turn-metrics-and-rollouts || bad multi-turn-metrics-and-rollouts
import glob, json, sys
run = sys.argv[1]
lines = [r for r in map(json.loads, open(run + "/metrics.jsonl")) if "step" in r]
assert len(lines) == 3, len(lines)
for d in lines:
    for key in ("turns_mean", "turns_max", "tool_calls", "tool_errors", "inserted_tokens", "tito_mismatch", "ended_by"):
        assert key in d, (key, d)
    assert d["tito_mismatch"] == 0 and d["tito_rerender"] == 0, d
    assert abs(sum(d["ended_by"].values()) - 1) < 1e-9, d["ended_by"]
assert any(d["tool_calls"] > 0 for d in lines), [d["tool_calls"] for d in lines]
tool_turns = 0
for path in sorted(glob.glob(run + "/rollouts/**/*.jsonl", recursive=True)):
    for l in open(path):
        d = json.loads(l)
        assert d["turns"][0]["role"] == "assistant" and d["turns"][0]["trained"], d["turns"]
        inserted = [s for s in d["segments"] if s[0] == "inserted"]
        tools = [t for t in d["turns"] if t["role"] == "tool"]
        assert len(tools) == len(inserted) == d["episode"]["tool_calls"], (d["turns"], d["segments"])
        assert all(not t["trained"] for t in tools)
        assert d["episode"]["tito"] == "exact", d["episode"]
        tool_turns += len(tools)
assert tool_turns > 0
ev = lines[-1]["eval"]["tools"]
assert 0 <= ev["tool_call_rate"] <= 1 and ev["turns_mean"] >= 1 and ev["tito_mismatch"] == 0, ev
print(f"      tool calls per episode {[round(d['tool_calls'], 2) for d in lines]}; eval {ev}")
PY
"$rlcpp" report runs/colocated > /dev/null 2>&1 && grep -q "Multi-turn episodes" runs/colocated/report.html \
  && grep -q "(inserted)" runs/colocated/report.html && ok report-shows-conversations || bad report-shows-conversations

# 2. LoRA.
timeout 600 "$rlcpp" train "${common[@]}" -tbs 4 -tMbs 4 -tmbs 16 -d "$data" --max-steps 2 -p lora --lora-rank 8 --lora-alpha 16 -lr 1e-3 > lora.log 2>&1 \
  && python3 -c 'import json,sys; l=[r for r in map(json.loads, open(sys.argv[1])) if "step" in r]; sys.exit(0 if len(l)==2 and all("turns_mean" in d and d["tito_mismatch"]==0 for d in l) else 1)' runs/lora/metrics.jsonl \
  && ok lora || { bad lora; tail -5 lora.log; }

# 3. MPI: one trainer and one rollout worker running the episodes: the colocated run's steps.
run_mpi 2 "${base[@]}" --max-steps $steps -t 1 -i 1 -p t1i1 > t1i1.log 2>&1 || { bad t1i1-run; tail -5 t1i1.log; }
OMP_NUM_THREADS=1 timeout 600 "$rlcpp" train "${base[@]}" --max-steps $steps -p colocated1 > colocated1.log 2>&1 || bad colocated1-run
if [ -s runs/t1i1/metrics.jsonl ] && cmp -s <(metrics_of runs/colocated1/metrics.jsonl) <(metrics_of runs/t1i1/metrics.jsonl); then
  ok mpi-workers-same-steps
else
  bad mpi-workers-same-steps; diff <(metrics_of runs/colocated1/metrics.jsonl) <(metrics_of runs/t1i1/metrics.jsonl) | head -4
fi
# ZeRO-1 over two trainers fed by two workers: the multi-turn samples (inserted runs) split over replicas.
run_mpi 4 "${common[@]}" -d "$data" -lr 5e-5 --max-steps 2 -t 2 -i 2 -tbs 2 -tMbs 2 -tmbs 8 -zero 1 -p zero > zero.log 2>&1 \
  && python3 -c 'import json,sys; l=[r for r in map(json.loads, open(sys.argv[1])) if "step" in r]; sys.exit(0 if len(l)==2 and all("turns_mean" in d for d in l) else 1)' runs/zero/metrics.jsonl \
  && ok zero1-two-trainers || { bad zero1-two-trainers; tail -5 zero.log; }

# Tensor-parallel rollout workers (two ranks hold one engine) with one round in flight (-nb 1).
run_mpi 3 "${base[@]}" --max-steps 2 -t 1 -i 2 --rollout-tp 2 -nb 1 -p tp > tp.log 2>&1 \
  && python3 -c 'import json,sys; l=[r for r in map(json.loads, open(sys.argv[1])) if "step" in r]; sys.exit(0 if len(l)==2 and all(d["tito_mismatch"]==0 and "turns_mean" in d for d in l) else 1)' runs/tp/metrics.jsonl \
  && ok rollout-tp-and-nb || { bad rollout-tp-and-nb; tail -5 tp.log; }

# Partial rollouts over episodes: a trajectory waiting for its tool is in flight like any other, and
# the round ahead takes new versions mid-episode (samples of two versions), token-exact throughout.
# A checkpoint every step cuts the round ahead at its version (--checkpoint-round cut): every
# episode's tokens and state saved in flight, and going on from them.
partial=("${base[@]}" --max-steps 6 -t 1 -i 1 -ibs 8 -nb 1 --partial-rollout --switch-interval 20 --si 1)
run_mpi 2 "${partial[@]}" -p partial > partial.log 2>&1 && python3 - runs/partial/metrics.jsonl <<'PY' && ok partial-rollout-episodes || { bad partial-rollout-episodes; tail -5 partial.log; }
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
mixed = [r for r in rows if r["staleness"]["per_token"]["mean"] < r["staleness"]["per_sample"]["mean"] - 1e-9]
print(f"     {len(mixed)} of {len(rows)} steps with episodes of two versions; tool calls {[round(r['tool_calls'], 2) for r in rows]}")
assert len(rows) == 6 and mixed and all(r["tito_mismatch"] == 0 and "turns_mean" in r for r in rows)
PY
python3 - runs/partial <<'PY' && ok partial-checkpoint-holds-episodes-in-flight || bad partial-checkpoint-holds-episodes-in-flight
import glob, json, sys
found = []
for path in sorted(glob.glob(sys.argv[1] + "/step-*/trainer_state/state.json")):
    for cut in json.load(open(path))["round"]["in_flight"]:
        samples = (cut["progress"] or {}).get("samples", [])
        going_on = [s for s in samples if not s["done"]]
        assert all(s["episode"]["state"]["messages"] for s in going_on), path
        assert all("summary" in s["episode"] for s in samples if s["done"]), path
        found.append((path.split("/")[-3], len(samples), len(going_on), sum(len(s["inserted"]) > 0 for s in going_on)))
print(f"     (checkpoint, episodes, unfinished, unfinished after a tool's answer): {found}")
assert any(f[2] > 0 for f in found), "no checkpoint cut an episode"
assert any(f[3] > 0 for f in found), "no checkpoint cut an episode after a tool's answer"
PY
# kill -9 of the rollout worker once step-2 is written (four steps before the end), then
# --resume auto: the uninterrupted run.
staleness_of() { python3 -c 'import json,sys; print([r["staleness"] for r in map(json.loads, open(sys.argv[1])) if "step" in r])' "$1"; }
kill_rank_after killed-partial 2 1 2 "${partial[@]}"
run_mpi 2 "${partial[@]}" -p killed-partial --resume auto > killed-partial-resume.log 2>&1
if grep -q "resuming from runs/killed-partial/step-" killed-partial-resume.log \
   && cmp -s <(metrics_of runs/partial/metrics.jsonl) <(metrics_of runs/killed-partial/metrics.jsonl) \
   && cmp -s <(staleness_of runs/partial/metrics.jsonl) <(staleness_of runs/killed-partial/metrics.jsonl) \
   && cmp -s runs/partial/step-6/model.safetensors runs/killed-partial/step-6/model.safetensors; then
  ok partial-episodes-kill-then-resume-exact
else
  bad partial-episodes-kill-then-resume-exact; tail -3 killed-partial-resume.log
  diff <(metrics_of runs/partial/metrics.jsonl) <(metrics_of runs/killed-partial/metrics.jsonl) | head -4
fi

# The cut of episodes with the others: LoRA on a tensor-parallel engine (both its ranks stop at the
# cut and serve the episodes' continuations).
run_mpi 3 "${base[@]}" --max-steps 6 -t 1 -i 2 --rollout-tp 2 -ibs 8 -nb 1 --partial-rollout --switch-interval 20 --si 1 --lora-rank 4 -p partial-tp-lora > partial-tp-lora.log 2>&1 \
  && python3 -c 'import json,sys; l=[r for r in map(json.loads, open(sys.argv[1])) if "step" in r]; sys.exit(0 if len(l)==6 and all(d["tito_mismatch"]==0 for d in l) else 1)' runs/partial-tp-lora/metrics.jsonl \
  && [ -n "$(python3 -c 'import json,glob,sys; print("".join("x" for p in glob.glob("runs/partial-tp-lora/step-*/trainer_state/state.json") for c in json.load(open(p))["round"]["in_flight"] if c["progress"] and any(not s["done"] for s in c["progress"]["samples"])))')" ] \
  && ok partial-episodes-cut-lora-rollout-tp || { bad partial-episodes-cut-lora-rollout-tp; tail -5 partial-tp-lora.log; }

# --stream-prompts over episodes: each round's worker also runs the next round's episodes in the
# slots the round leaves free; the round's call ends with its own episodes, and the next round's are
# held as far as they got (their tokens and the episode's state, as at a cut). --group-order
# completion: a round delivers the first -ibs prompts whose episodes have all ended among those the
# worker holds; the others go on in the next round. Token-exact throughout; nothing lost or trained
# twice; reproducible bit for bit (the CPU disturbed); kill -9 of the worker after step-3, then
# --resume auto, ends as the run never killed (in both orders).
streamed=("${base[@]}" --max-steps 6 -t 1 -i 1 -ibs 4 -nb 1 --partial-rollout --stream-prompts --verify-sync true --si 1)
completion=("${streamed[@]}" --group-order completion)
held_episodes() {  # RUN: checkpoints hold episodes in flight, each with its episode's state
  python3 - "runs/$1" <<'PY'
import glob, json, sys
rows = [r for r in map(json.loads, open(sys.argv[1] + "/metrics.jsonl")) if "step" in r]
held = []
for path in sorted(glob.glob(sys.argv[1] + "/step-*/trainer_state/state.json")):
    for cut in json.load(open(path))["round"]["in_flight"]:
        for part in (cut.get("streamed") or {}).get("progress"), cut.get("progress"):
            going_on = [s for s in (part or {}).get("samples", []) if not s["done"] and s["tokens"]]
            assert all(s["episode"]["state"]["messages"] for s in going_on), path
            held.append(len(going_on))
print(f"     episodes held in flight at the checkpoints {held}; tool calls a step {[round(r['tool_calls'], 2) for r in rows]}")
assert len(rows) == 6 and all(r["tito_mismatch"] == 0 and "turns_mean" in r for r in rows)
assert any(held), "no checkpoint holds an episode begun"
PY
}
same_episodes() {  # A B: metrics, staleness and the last weights equal
  cmp -s <(metrics_of "runs/$1/metrics.jsonl") <(metrics_of "runs/$2/metrics.jsonl") \
    && cmp -s <(staleness_of "runs/$1/metrics.jsonl") <(staleness_of "runs/$2/metrics.jsonl") \
    && cmp -s "runs/$1/step-6/model.safetensors" "runs/$2/step-6/model.safetensors"
}
run_mpi 2 "${streamed[@]}" -p stream > stream.log 2>&1 && held_episodes stream \
  && ok stream-prompts-episodes || { bad stream-prompts-episodes; tail -3 stream.log; }
kill_rank_after stream-killed 2 1 3 "${streamed[@]}"
run_mpi 2 "${streamed[@]}" -p stream-killed --resume auto > stream-killed-resume.log 2>&1
grep -q "resuming from runs/stream-killed/step-" stream-killed-resume.log && same_episodes stream stream-killed \
  && ok stream-prompts-episodes-kill-then-resume-exact || { bad stream-prompts-episodes-kill-then-resume-exact; tail -3 stream-killed-resume.log; }
run_mpi 2 "${completion[@]}" --rsd rollouts -p complete > complete.log 2>&1 && held_episodes complete && check_pool complete 6 1 4 \
  && ok completion-order-episodes || { bad completion-order-episodes; tail -3 complete.log; }
yes > /dev/null & busy=$!
run_mpi 2 "${completion[@]}" -p complete-again > complete-again.log 2>&1
kill "$busy"
same_episodes complete complete-again && ok completion-order-episodes-reproducible || bad completion-order-episodes-reproducible
kill_rank_after complete-killed 2 1 3 "${completion[@]}"
run_mpi 2 "${completion[@]}" -p complete-killed --resume auto > complete-killed-resume.log 2>&1
grep -q "resuming from runs/complete-killed/step-" complete-killed-resume.log && same_episodes complete complete-killed \
  && ok completion-order-episodes-kill-then-resume-exact || { bad completion-order-episodes-kill-then-resume-exact; tail -3 complete-killed-resume.log; }
# With the others: LoRA on a tensor-parallel engine; ZeRO-3 over two trainers fed by two workers,
# the second worker killed after step-3 and the run resumed exactly.
in_order=(-nb 1 --partial-rollout --stream-prompts --group-order completion --verify-sync true --si 1 --max-steps 6)
run_mpi 3 "${base[@]}" -t 1 -i 2 --rollout-tp 2 -ibs 4 "${in_order[@]}" --lora-rank 4 -p complete-tp-lora > complete-tp-lora.log 2>&1 \
  && held_episodes complete-tp-lora && ok completion-order-episodes-lora-rollout-tp || { bad completion-order-episodes-lora-rollout-tp; tail -3 complete-tp-lora.log; }
zero3=("${common[@]}" -d "$data" -lr 5e-5 -tbs 2 -tMbs 2 -tmbs 8 -t 2 -i 2 -zero 3 -ibs 2 "${in_order[@]}")
run_mpi 4 "${zero3[@]}" -p complete-zero3 > complete-zero3.log 2>&1 && held_episodes complete-zero3 \
  && ok completion-order-episodes-zero3 || { bad completion-order-episodes-zero3; tail -3 complete-zero3.log; }
kill_rank_after complete-zero3-killed 4 3 3 "${zero3[@]}"
run_mpi 4 "${zero3[@]}" -p complete-zero3-killed --resume auto > complete-zero3-resume.log 2>&1
grep -q "resuming from runs/complete-zero3-killed/step-" complete-zero3-resume.log && same_episodes complete-zero3 complete-zero3-killed \
  && ok completion-order-episodes-zero3-kill-then-resume-exact || { bad completion-order-episodes-zero3-kill-then-resume-exact; tail -3 complete-zero3-resume.log; }
run_mpi 2 "${streamed[@]}" --env-reward add --env-cmd "python3 x.py" -p refused-stream-env > refused-stream-env.log 2>&1
grep -q -- "--stream-prompts with --env-cmd" refused-stream-env.log && ok refuses-stream-prompts-env-cmd \
  || { bad refuses-stream-prompts-env-cmd; tail -3 refused-stream-env.log; }

# 4. Exact resume after kill -9 mid-run. The killed process writes no status line: the resumed
#    run's file ends with its only one, and metrics.discarded.jsonl (if any) holds steps alone.
resume=("${base[@]}" --max-steps 6 --si 1)
"$rlcpp" train "${resume[@]}" -p full > full.log 2>&1 || bad resume-reference-run
"$rlcpp" train "${resume[@]}" -p killed > killed.log 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null && [ "$(step_count runs/killed/metrics.jsonl)" -lt 3 ]; do sleep 0.01; done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
killed_at=$(step_count runs/killed/metrics.jsonl)
if [ "$killed_at" -ge 6 ]; then
  bad "resume-kill: the run finished before it could be killed"
else
  grep -q '"status":' runs/killed/metrics.jsonl && bad "resume-kill: the killed process wrote a status line"
  "$rlcpp" train "${resume[@]}" -p killed --resume auto > resumed.log 2>&1 || { bad resume-run; tail -5 resumed.log; }
  if cmp -s runs/full/step-6/model.safetensors runs/killed/step-6/model.safetensors \
     && [ "$(metrics_of runs/full/metrics.jsonl)" = "$(metrics_of runs/killed/metrics.jsonl)" ] \
     && ends_with_status runs/killed/metrics.jsonl finished 6 \
     && ! grep -q '"status":' runs/killed/metrics.discarded.jsonl 2>/dev/null; then
    ok "resume-exact (killed after $killed_at steps)"
  else
    bad "resume-exact (killed after $killed_at steps): weights or metrics differ"
    diff <(metrics_of runs/full/metrics.jsonl) <(metrics_of runs/killed/metrics.jsonl) | head -6
  fi
fi

# 5. Remote backend: rlcpp serve; each turn is a /v1/completions request of the whole sequence.
start_server server.log --model "$model" || { bad server-starts; cat server.log; }
pids+=("$server_pid")
timeout 600 "$rlcpp" train "${base[@]}" --max-steps 2 -p remote -b openai --rollout-url "$server_url" > remote.log 2>&1 \
  && python3 -c 'import json,sys; l=[r for r in map(json.loads, open(sys.argv[1])) if "step" in r]; sys.exit(0 if len(l)==2 and all(d["tito_mismatch"]==0 and "turns_mean" in d for d in l) else 1)' runs/remote/metrics.jsonl \
  && ok remote-backend || { bad remote-backend; tail -5 remote.log; }

# 6. An external environment: its rewards (-rt env), a first observation, a second try.
env_common=(-m "$model" -d "$data" -rt env --env-workers 2 --tools calculator --max-turns 4 -g 4 -tbs 4 -tMbs 4 -tmbs 16
            -temp 1.0 --mnt 96 -sd runs --seed 3 --log-interval 100 -lr 5e-5)
timeout 600 "$rlcpp" train "${env_common[@]}" --env-cmd "python3 $src/tests/data/retry_env.py" --max-steps 2 -p env -rsd runs/env/rollouts > env.log 2>&1 || { bad env-run; tail -5 env.log; }
python3 - runs/env <<'PY' && ok environment-episodes || bad environment-episodes
import glob, json, sys
lines = [r for r in map(json.loads, open(sys.argv[1] + "/metrics.jsonl")) if "step" in r]
assert len(lines) == 2 and all(d["tito_mismatch"] == 0 for d in lines), lines
ends = set()
for path in glob.glob(sys.argv[1] + "/rollouts/**/*.jsonl", recursive=True):
    for l in open(path):
        d = json.loads(l)
        ends.add(d["episode"]["ended_by"])
        assert d["reward"] == d["episode"]["env_reward"] == d["reward_parts"]["env"], d
        assert d["correct"] == (d["reward"] > 0)
assert "env_done" in ends, ends
print(f"      episodes ended by {sorted(ends)}")
PY
timeout 300 "$rlcpp" train "${env_common[@]}" --env-cmd "python3 $src/tests/data/retry_env.py --crash-at 1" --max-steps 1 \
  -p crash > crash.log 2>&1
if [ $? -ne 0 ] && grep -q "env-cmd 'python3 .*retry_env.py --crash-at 1': it ended: exit status 3" crash.log; then
  ok crashing-environment-named
else
  bad crashing-environment-named; tail -3 crash.log
fi

# 7. rlcpp eval --tools, and refused combinations.
"$rlcpp" eval -m "$model" -d "$test_set" -rt boxed --tools calculator --limit 8 --mnt 64 --json > eval.json 2> eval.log \
  && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if "tool_call_rate" in d and d["tito_mismatch"]==0 else 1)' eval.json \
  && ok eval-tools || { bad eval-tools; tail -3 eval.log; }
refused() {  # NAME PATTERN ARGS...
  local name=$1 pattern=$2; shift 2
  if ! timeout 60 "$rlcpp" train -m "$model" -d "$data" -sd runs -p refused "$@" > refused.log 2>&1 && grep -q -- "$pattern" refused.log; then
    ok "$name"
  else
    bad "$name"; tail -2 refused.log
  fi
}
refused turn-limits-without-tools "turn limits are for multi-turn" --max-turns 3
refused env-without-reward-mode "say what the trajectory's reward is" --env-cmd "python3 x.py"
refused rt-env-without-env "give it with --env-cmd" -rt env
refused unknown-tool "unknown tool \"web\"" --tools calculator,web

exit $failed
