#!/usr/bin/env bash
# `rlcpp train -b openai` against two `rlcpp serve` processes on the bundled demo: the servers'
# samples are the built-in engine's (same seeds, same weights after every push), so the run equals
# the native one step for step (metrics and weights), with full weights and with LoRA; it survives
# one server killed mid-run (the requests go to the other, the run still equal); a LoRA run on
# servers that earlier runs updated gets the run's model back into them first; a trainer killed
# with kill -9 resumes exactly; -nb 1 overlaps generation with training one version behind and
# learns, and with --partial-rollout the servers take each version in the middle of the round's
# sequences, reproducibly (under LoRA too, killed and resumed exactly), and a checkpoint saves the
# round they generate ahead cut at its version, from which a resumed run goes on bit for bit (also
# under --max-staleness 0 --stale-policy finish); bad
# flags and unreachable servers are errors naming them.
# Usage: test_remote_train.sh RLCPP_BINARY SOURCE_DIR
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_remote_train.sh RLCPP_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: test_remote_train.sh RLCPP_BINARY SOURCE_DIR}")
source "$(dirname "$0")/lib.sh"
model="$src/models/arith-tiny"
data="$src/examples/arith/train.jsonl"
pids=()
cleanup_extra() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
serve() {  # NAME: a server of the bundled model; its URL in the variable NAME
  start_server "$1.log" --model "$model" || { bad "server-$1-starts"; cat "$1.log"; exit 1; }
  pids+=("$server_pid"); printf -v "$1" '%s' "$server_url"; printf -v "$1_pid" '%s' "$server_pid"
}
serve a; serve b
base=(-m "$model" -d "$data" -g 4 -tbs 4 -tMbs 4 -tmbs 16 -temp 1.0 --mnt 24 --log-interval 100 -sd runs --seed 5)
full=(-lr 5e-5)
remote=(-b openai --rollout-url "$a,$b")
steps=6
train() { timeout 600 "$rlcpp" train "$@"; }
last_weights() { echo "runs/$1/step-$steps/${2:-model.safetensors}"; }
# NAME REFERENCE [weights file [tolerance]]: the same samples (every step's rollouts: prompts, responses,
# rewards), the same metrics, and the same final weights. The servers batch prompts differently from
# the one engine, so their log-probs may differ from the engine's in the last bits (products of other
# row counts round differently); figures computed from them agree to 1e-3 relative (1e-5 absolute),
# and the weights to 1e-5 relative overall (measured: 2e-7). The engine-vs-trainer mismatch figures
# are left out.
same_run() {
  local w=${3:-model.safetensors}
  python3 - "runs/$1" "runs/$2" <<'PY' || return 1
import glob, json, os, sys
a, b = sys.argv[1:3]
def rollouts(run):
    out = {}
    for path in sorted(glob.glob(f"{run}/rollouts/*/step-*.jsonl")):
        out[os.path.basename(path)] = [(r["prompt"], r["response"], r["reward"], r["policy_version"]) for r in map(json.loads, open(path))]
    return out
ra, rb = rollouts(a), rollouts(b)
if not ra or ra != rb:
    print(f"     different samples: {len(ra)} and {len(rb)} steps of rollouts"); sys.exit(1)
skip = {"time", "tokens_per_s", "staleness", "rollout_servers", "mismatch_abs_max", "mismatch_abs_mean", "mismatch_kl",
        "mismatch_by_versions"}
rows = lambda run: [{k: v for k, v in json.loads(l).items() if k not in skip} for l in open(f"{run}/metrics.jsonl")]
def close(x, y):
    if isinstance(x, dict):  # an evaluation's own "seconds" are a timing
        return isinstance(y, dict) and x.keys() == y.keys() and all(close(x[k], y[k]) for k in x if k != "seconds")
    if isinstance(x, (int, float)) and isinstance(y, (int, float)): return abs(x - y) <= 1e-5 + 1e-3 * max(abs(x), abs(y))
    return x == y
ma, mb = rows(a), rows(b)
for x, y in zip(ma, mb):
    for k in x:
        if not close(x[k], y.get(k)): print(f"     step {x.get('step', '(status line)')} {k}: {x[k]} vs {y.get(k)}"); sys.exit(1)
sys.exit(0 if len(ma) == len(mb) and ma else 1)
PY
  weights_close "$(last_weights "$1" "$w")" "$(last_weights "$2" "$w")" "${4:-1e-5}" overall
}

# 1. LoRA: the servers load each version's adapter; equal to the native LoRA run (and again below,
# on servers that full runs have updated).
lora=(--lora-rank 8 --lora-alpha 16 -lr 2e-3)
train "${base[@]}" "${lora[@]}" --max-steps $steps -p lora-native -rsd runs/lora-native/rollouts > lora-native.log 2>&1 || { bad lora-native-run; tail -3 lora-native.log; }
train "${base[@]}" "${lora[@]}" "${remote[@]}" --max-steps $steps -p lora-remote -rsd runs/lora-remote/rollouts > lora-remote.log 2>&1 \
  || { bad lora-remote-run; tail -5 lora-remote.log; }
# Adam at -lr 2e-3 turns the log-probs' last-bit differences into larger relative differences of the
# small adapter weights (measured: 1.1e-5 overall).
same_run lora-remote lora-native adapter_model.safetensors 1e-4 && ok lora-remote-equals-native || bad lora-remote-equals-native
curl -s "$a/v1/models" | grep -q "rlcpp-policy-v$((steps - 1))" && ok adapter-served-by-version || bad adapter-served-by-version

# 1b. Partial rollouts under LoRA: the servers load each version's adapter between chunks of the
# round ahead, so samples hold tokens of two versions; a run killed after step-3 and resumed ends
# with the uninterrupted run's samples and metrics, and its adapter bit for bit.
mixes_versions() {  # NAME
  python3 - "runs/$1/metrics.jsonl" <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
st = [r["staleness"] for r in rows]
mixed = [r["step"] for r, s in zip(rows, st) if s["per_token"]["mean"] < s["per_sample"]["mean"] - 1e-9]
pushes = rows[-1]["rollout_servers"]["weight_pushes"]
print(f"     steps with samples of two versions {mixed}; per-token versions behind "
      f"{[round(s['per_token']['mean'], 2) for s in st]}; {pushes} weight pushes")
sys.exit(0 if len(rows) == 6 and mixed and max(s["per_sample"]["max"] for s in st) <= 1 else 1)
PY
}
lora_partial=("${base[@]}" "${lora[@]}" "${remote[@]}" --max-steps $steps --si 1 -nb 1 --partial-rollout)
train "${lora_partial[@]}" -p lora-partial -rsd runs/lora-partial/rollouts > lora-partial.log 2>&1 \
  || { bad lora-partial-run; tail -5 lora-partial.log; }
mixes_versions lora-partial && ok lora-partial-over-servers-mixes-versions || bad lora-partial-over-servers-mixes-versions
# rlcpp itself in the background, not the train function: kill -9 of a function's subshell leaves
# rlcpp running, racing the resumed run in the same directory.
"$rlcpp" train "${lora_partial[@]}" -p lora-partial-killed -rsd runs/lora-partial-killed/rollouts > lora-partial-killed.log 2>&1 &
job=$!; pids+=("$job")
for _ in $(seq 1 1200); do [ -e runs/lora-partial-killed/step-3 ] && break; sleep 0.05; done
kill -9 $job; wait $job 2>/dev/null
[ -e runs/lora-partial-killed/step-3 ] && [ ! -e "runs/lora-partial-killed/step-$steps" ] \
  && ok lora-partial-killed-mid-run || bad lora-partial-killed-mid-run
train "${lora_partial[@]}" -p lora-partial-killed -rsd runs/lora-partial-killed/rollouts --resume auto \
  > lora-partial-resumed.log 2>&1 || { bad lora-partial-resumed-run; tail -5 lora-partial-resumed.log; }
grep -q "resuming from" lora-partial-resumed.log && same_run lora-partial-killed lora-partial adapter_model.safetensors \
  && cmp -s "$(last_weights lora-partial adapter_model.safetensors)" "$(last_weights lora-partial-killed adapter_model.safetensors)" \
  && ok lora-partial-resumes-exactly || bad lora-partial-resumes-exactly

# 2. Full weights: the built-in engine and the servers give the same run.
train "${base[@]}" "${full[@]}" --max-steps $steps --si 3 -p native -rsd runs/native/rollouts > native.log 2>&1 || { bad native-run; tail -3 native.log; }
train "${base[@]}" "${full[@]}" "${remote[@]}" --max-steps $steps --si 3 -p remote -rsd runs/remote/rollouts > remote.log 2>&1 || { bad remote-run; tail -5 remote.log; }
same_run remote native && ok remote-equals-native || bad remote-equals-native
weights_moved "$(last_weights native)" "$model/model.safetensors" && ok weights-moved || bad weights-moved
python3 - runs/remote/metrics.jsonl <<'PY' && ok servers-used || bad servers-used
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
r = rows[-1]["rollout_servers"]
print(f"     {r['requests']} requests, {r['weight_pushes']} weight pushes, sync {rows[-1]['time']['sync']:.2f} s at the last step")
# 4 prompts a step; at the start and after each step but the last, both servers load the policy
sys.exit(0 if r["requests"] == 4 * len(rows) and r["weight_pushes"] == 2 * len(rows) else 1)
PY
ls runs/remote/rollout-weights | grep -qx "v$((steps - 1))" && [ "$(ls runs/remote/rollout-weights | wc -l)" = 1 ] \
  && ok old-versions-removed || { bad old-versions-removed; ls runs/remote/rollout-weights; }

# 3. One server killed mid-run: its requests go to the other; the run ends equal to the native one.
"$rlcpp" train "${base[@]}" "${full[@]}" "${remote[@]}" --max-steps $steps --si 3 -p survive -rsd runs/survive/rollouts > survive.log 2>&1 &
job=$!; pids+=("$job")
for _ in $(seq 1 1200); do [ -f runs/survive/metrics.jsonl ] && [ "$(step_count runs/survive/metrics.jsonl)" -ge 2 ] && break; sleep 0.05; done
kill -9 "$b_pid"
wait $job && ok survives-killed-server || { bad survives-killed-server; tail -5 survive.log; }
same_run survive native && ok survived-run-equals-native || bad survived-run-equals-native
python3 -c 'import json,sys; r=[d for d in map(json.loads, open(sys.argv[1])) if "step" in d][-1]["rollout_servers"]; sys.exit(0 if r["server_failures"] >= 1 else 1)' \
  runs/survive/metrics.jsonl && ok server-failure-counted || bad server-failure-counted
serve b   # a new one in its place for the rest
remote=(-b openai --rollout-url "$a,$b")

# A LoRA run on servers full runs have updated (a holds the last one's weights, b is new): the
# server that says so gets the run's model back first; equal to the native LoRA run.
train "${base[@]}" "${lora[@]}" "${remote[@]}" --max-steps $steps -p lora-after-full -rsd runs/lora-after-full/rollouts \
  > lora-after-full.log 2>&1 || { bad lora-after-full-run; tail -5 lora-after-full.log; }
grep -q "serves policy version [0-9]* (weights pushed since it started): loading this run's model" lora-after-full.log \
  && same_run lora-after-full lora-native adapter_model.safetensors 1e-4 && ok lora-after-full-runs-equals-native \
  || bad lora-after-full-runs-equals-native

# 4. The trainer killed (kill -9) after its step-2 checkpoint, then resumed: equal to the native run.
"$rlcpp" train "${base[@]}" "${full[@]}" "${remote[@]}" --max-steps $steps --si 1 -p resumed -rsd runs/resumed/rollouts > killed.log 2>&1 &
job=$!; pids+=("$job")
for _ in $(seq 1 1200); do [ -e runs/resumed/step-2 ] && break; sleep 0.05; done
kill -9 $job; wait $job 2>/dev/null
[ -e runs/resumed/step-2 ] && [ ! -e runs/resumed/step-$steps ] && ok trainer-killed-mid-run || bad trainer-killed-mid-run
train "${base[@]}" "${full[@]}" "${remote[@]}" --max-steps $steps --si 1 -p resumed -rsd runs/resumed/rollouts --resume auto > resumed.log 2>&1 \
  || { bad resumed-run; tail -5 resumed.log; }
grep -q "resuming from" resumed.log && same_run resumed native && ok killed-trainer-resumes-exactly || bad killed-trainer-resumes-exactly

# 5. -nb 1: each round generated while the step before trains, one version behind. Killed after a
# checkpoint (which collected the round generating ahead) and resumed, it equals the run left alone.
ahead=("${base[@]}" "${full[@]}" "${remote[@]}" --max-steps $steps --si 1 -nb 1
       -ed "{\"held-out\": \"$src/examples/arith/test.jsonl\"}" -ei 3 --eval-limit 8)
train "${ahead[@]}" -p ahead -rsd runs/ahead/rollouts > ahead.log 2>&1 || { bad ahead-run; tail -5 ahead.log; }
python3 - runs/ahead/metrics.jsonl <<'PY' && ok n-behind-one-version || bad n-behind-one-version
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
stale = [r["staleness"]["max"] for r in rows]
rewards = " ".join("%.2f" % r["reward_mean"] for r in rows)
print(f"     staleness by step {stale}; reward {rewards}")
# the trainer's own engine evaluates at steps 3 and 6 (-ei 3) while the servers generate
evals = [r["step"] for r in rows if "eval" in r and r["eval"]["held-out"]["prompts"] == 8]
print(f"     evaluated at steps {evals}")
sys.exit(0 if len(rows) == 6 and stale[0] == 0 and all(s == 1 for s in stale[1:]) and evals == [3, 6] else 1)
PY
weights_moved "$(last_weights ahead)" "$model/model.safetensors" && ok ahead-weights-moved || bad ahead-weights-moved
"$rlcpp" train "${ahead[@]}" -p ahead-resumed -rsd runs/ahead-resumed/rollouts > ahead-killed.log 2>&1 &
job=$!; pids+=("$job")
for _ in $(seq 1 1200); do [ -e runs/ahead-resumed/step-3 ] && break; sleep 0.05; done
kill -9 $job; wait $job 2>/dev/null
[ -e runs/ahead-resumed/step-3 ] && [ ! -e runs/ahead-resumed/step-$steps ] && ok ahead-killed-mid-run || bad ahead-killed-mid-run
train "${ahead[@]}" -p ahead-resumed -rsd runs/ahead-resumed/rollouts --resume auto > ahead-resumed.log 2>&1 \
  || { bad ahead-resumed-run; tail -5 ahead-resumed.log; }
grep -q "resuming from" ahead-resumed.log && same_run ahead-resumed ahead && ok ahead-resumes-exactly || bad ahead-resumes-exactly

# 5b. Partial rollouts: the servers take each new version between chunks of the round ahead's
# sequences (at the schedule's switch point, mid-response), so samples hold tokens of two versions;
# the chunks are seeded by the schedule, so a second run gives the same samples.
# With -imbs 2 the round is two generate calls of -mnt 24 positions each, and its switch points are
# counted over both: at 36, the version is taken in the middle of the second call's samples.
partial=("${ahead[@]}" --partial-rollout)
for name in partial partial-again partial-imbs; do
  train "${partial[@]}" $([ $name = partial-imbs ] && echo -imbs 2 --switch-interval 36) -p "$name" -rsd "runs/$name/rollouts" > "$name.log" 2>&1 \
    || { bad "$name-run"; tail -5 "$name.log"; }
done
mixes_versions partial && ok partial-over-servers-mixes-versions || bad partial-over-servers-mixes-versions
mixes_versions partial-imbs && ok partial-over-servers-imbs || bad partial-over-servers-imbs
same_run partial-again partial && ok partial-over-servers-reproducible || bad partial-over-servers-reproducible

# 5c. A checkpoint cuts the round ahead at its version (--checkpoint-round cut): the servers' round
# is saved in flight as it stands (its samples part-way through their second call at 12 tokens), or
# generated already when it ended before its switch point (--switch-interval 60, past the round's
# 48 positions); killed in the middle of a later checkpoint and resumed, each run equals the one
# left alone, its samples and weights bit for bit.
in_flight() {  # NAME STEP: what the step's checkpoint holds of the round ahead
  python3 - "runs/$1/step-$2/trainer_state/state.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["round"]
assert r["collected"] is None and len(r["in_flight"]) == 1, r
x = r["in_flight"][0]
if x["graded"] is not None:
    print(f"graded {len(x['graded']['kept']) + len(x['graded']['discarded'])} groups")
else:
    print(f"{x['source']} at {x['step']} of {x['call_end']}, calls {x['progress']['calls_started']}, tokens "
          f"{sorted({len(s['tokens']) for s in x['progress']['samples'] if not s['done']})} unfinished")
PY
}
[ "$(in_flight partial-imbs 2)" = "servers at 36 of 48, calls 2, tokens [12] unfinished" ] \
  && ok servers-cut-round-in-flight || { bad servers-cut-round-in-flight; in_flight partial-imbs 2; }
train "${partial[@]}" -imbs 2 --switch-interval 60 -p partial-late -rsd runs/partial-late/rollouts > partial-late.log 2>&1 \
  || { bad partial-late-run; tail -5 partial-late.log; }
[ "$(in_flight partial-late 2)" = "graded 4 groups" ] && ok servers-cut-after-round-generated \
  || { bad servers-cut-after-round-generated; in_flight partial-late 2; }
for name in partial-imbs partial-late; do
  interval=$([ $name = partial-imbs ] && echo 36 || echo 60)
  RLCPP_FAILPOINT=checkpoint:4 "$rlcpp" train "${partial[@]}" -imbs 2 --switch-interval $interval -p "$name-killed" \
    -rsd "runs/$name-killed/rollouts" > "$name-killed.log" 2>&1 &
  job=$!; pids+=("$job")
  for _ in $(seq 1 1200); do [ "$(awk '{print $3}' /proc/$job/stat 2>/dev/null)" = T ] && break; sleep 0.05; done
  kill -9 $job; wait $job 2>/dev/null
  train "${partial[@]}" -imbs 2 --switch-interval $interval -p "$name-killed" -rsd "runs/$name-killed/rollouts" --resume auto \
    > "$name-resumed.log" 2>&1 || { bad "$name-resumed-run"; tail -5 "$name-resumed.log"; }
  grep -q "resuming from runs/$name-killed/step-3" "$name-resumed.log" && same_run "$name-killed" "$name" \
    && cmp -s "$(last_weights "$name")" "$(last_weights "$name-killed")" && ok "$name-killed-mid-checkpoint-resumes-exactly" \
    || bad "$name-killed-mid-checkpoint-resumes-exactly"
done

# The same cut under --max-staleness 0 --stale-policy finish (the round's stale sequences finished
# on the new version): killed in the middle of the 4th checkpoint and resumed, equal to the run left alone.
finish=("${partial[@]}" -imbs 2 --switch-interval 36 --max-staleness 0 --stale-policy finish)
train "${finish[@]}" -p finish -rsd runs/finish/rollouts > finish.log 2>&1 || { bad finish-run; tail -5 finish.log; }
RLCPP_FAILPOINT=checkpoint:4 "$rlcpp" train "${finish[@]}" -p finish-killed -rsd runs/finish-killed/rollouts > finish-killed.log 2>&1 &
job=$!; pids+=("$job")
for _ in $(seq 1 1200); do [ "$(awk '{print $3}' /proc/$job/stat 2>/dev/null)" = T ] && break; sleep 0.05; done
kill -9 $job; wait $job 2>/dev/null
train "${finish[@]}" -p finish-killed -rsd runs/finish-killed/rollouts --resume auto > finish-resumed.log 2>&1 \
  || { bad finish-resumed-run; tail -5 finish-resumed.log; }
[ "$(in_flight finish 2)" = "servers at 36 of 48, calls 2, tokens [12] unfinished" ] &&
  grep -q "resuming from runs/finish-killed/step-3" finish-resumed.log && same_run finish-killed finish &&
  cmp -s "$(last_weights finish)" "$(last_weights finish-killed)" && ok stale-finish-killed-mid-checkpoint-resumes-exactly \
  || { bad stale-finish-killed-mid-checkpoint-resumes-exactly; in_flight finish 2; }

# 6. Bad flags and unreachable servers: errors naming them, not hangs.
expect_error() {  # NAME TEXT ARGS...
  local name=$1 text=$2; shift 2
  out=$(timeout 120 "$rlcpp" train "${base[@]}" "${full[@]}" --max-steps 1 -p err "$@" 2>&1) && { bad "$name (accepted)"; return; }
  grep -q -- "$text" <<<"$out" && ok "$name" || { bad "$name"; echo "$out" | tail -3; }
}
expect_error needs-url "--rollout-url" -b openai
expect_error url-needs-backend "-b openai" --rollout-url "$a"
expect_error vllm-needs-lora "--lora-rank" -b vllm --rollout-url "$a"
expect_error no-rollout-workers "drop -t and -i" -b openai --rollout-url "$a" -t 1 -i 1
expect_error bad-url "HOST:PORT" -b openai --rollout-url "http://nowhere"
expect_error weights-dir-unwritable "--rollout-weights-dir" -b openai --rollout-url "$a" --rollout-weights-dir /proc/nowhere
dead=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
expect_error partial-asap "--async-switch asap" -b openai --rollout-url "$a" -nb 1 --partial-rollout --async-switch asap
expect_error unreachable "127.0.0.1:$dead" -b openai --rollout-url "http://127.0.0.1:$dead" --rollout-timeout 3
[ -n "${KEEP:-}" ] && cp -r runs "$KEEP"
exit $failed
