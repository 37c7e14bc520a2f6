#!/usr/bin/env bash
# Code rewards end to end on the bundled code task (models/code-tiny, examples/code):
#   - `rlcpp grade -rt code --input` gives one verdict per line with per-test results;
#   - colocated GRPO with -rt code: each step's reasons in metrics.jsonl, each rollout's reason in
#     the saved rollouts, an eval set of code tasks with pass@1 and pass@k, the report's reason plot;
#   - the same with LoRA, with MPI rollout workers (-t 1 -i 1: the colocated run's steps exactly),
#     and with the remote backend (rlcpp serve);
#   - a malformed test record stops the run naming its line; --skip-bad-lines skips it.
# Usage: test_code_train.sh RLCPP_BINARY SOURCE_DIR MPIEXEC
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_code_train.sh RLCPP_BINARY SOURCE_DIR MPIEXEC}")
src=$(realpath "${2:?usage: test_code_train.sh RLCPP_BINARY SOURCE_DIR MPIEXEC}")
mpiexec=${3:-mpirun}
source "$(dirname "$0")/lib.sh"
model="$src/models/code-tiny"
data="$src/examples/code/train.jsonl"
test_set="$src/examples/code/test.jsonl"
pids=()
cleanup_extra() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }

# 1. grade: a right, a wrong and a hostile program, and stdin/stdout tests.
cat > responses.jsonl <<'EOF'
{"response": "```python\ndef f(x):\n    return (x+2)*3\n```", "test_code": "assert f(0) == 6\nassert f(-4) == -6", "entry_point": "f"}
{"response": "```python\ndef f(x):\n    return x+2*3\n```", "test_code": "assert f(0) == 6\nassert f(-4) == -6", "entry_point": "f"}
{"response": "```python\nwhile True:\n    pass\n```", "test_code": "assert True", "time_limit": 1}
{"response": "```python\nprint(sum(map(int, input().split())))\n```", "tests": [{"stdin": "1 2", "stdout": "3"}, {"stdin": "5 5", "stdout": "10\n"}]}
EOF
"$rlcpp" grade -rt code --input responses.jsonl > verdicts.jsonl 2> grade.log || { bad grade-runs; cat grade.log; }
python3 - verdicts.jsonl <<'PY' && ok grade-verdicts || bad grade-verdicts
import json, sys
v = [json.loads(l) for l in open(sys.argv[1])]
want = [("passed", 1.0, 2, 2), ("wrong_answer", 0.0, 1, 2), ("timeout", 0.0, 0, 1), ("passed", 1.0, 2, 2)]
got = [(d["reason"], d["reward"], d["details"]["passed"], d["details"]["tests"]) for d in v]
print("     ", got)
sys.exit(0 if got == want and [d["correct"] for d in v] == [True, False, False, True] else 1)
PY

# 2. Colocated GRPO with the code reward, an eval set of code tasks, rollouts saved.
common=(-m "$model" -rt code -g 4 -tbs 4 -tMbs 4 -tmbs 16 -temp 1.0 --mnt 40 -sd runs --seed 3 --sandbox-workers 2
        --log-interval 100)
base=("${common[@]}" -d "$data" -lr 5e-5)
steps=3
timeout 600 "$rlcpp" train "${base[@]}" --max-steps $steps -p colocated -ed "{\"code\": \"$test_set\"}" -ei $steps \
  --eval-limit 8 --eval-n 2 -rsd runs/colocated/rollouts --rollout-save-interval 1 > colocated.log 2>&1 \
  || { bad colocated-run; tail -5 colocated.log; }
python3 - runs/colocated <<'PY' && ok reasons-in-metrics-and-rollouts || bad reasons-in-metrics-and-rollouts
import glob, json, sys
run = sys.argv[1]
lines = [r for r in map(json.loads, open(run + "/metrics.jsonl")) if "step" in r]
reasons = [d.get("reward_reasons", {}) for d in lines]
assert len(lines) == 3 and all(sum(r.values()) == 16 for r in reasons), reasons
verdicts = {"passed", "no_code", "syntax", "timeout", "memory", "runtime_error", "output_limit", "wrong_answer"}
assert all(set(r) <= verdicts for r in reasons), reasons
accuracy = [d["accuracy"] for d in lines]
assert all(abs(r.get("passed", 0) / 16 - a) < 1e-9 for r, a in zip(reasons, accuracy)), (reasons, accuracy)
saved = []
for path in sorted(glob.glob(run + "/rollouts/**/*.jsonl", recursive=True)):
    for l in open(path):
        d = json.loads(l)
        for s in d.get("samples", [d]):
            saved.append(s.get("reason"))
assert saved and all(r in verdicts for r in saved), saved[:5]
ev = lines[-1]["eval"]["code"]
assert 0 <= ev["accuracy"] <= ev["pass_at_n"] <= 1, ev
print(f"      reasons per step {reasons}; eval {ev}")
PY
"$rlcpp" report runs/colocated > /dev/null 2>&1 && grep -q "Samples by reward reason" runs/colocated/report.html \
  && ok report-has-reasons || bad report-has-reasons

# 3. LoRA.
timeout 600 "$rlcpp" train "${common[@]}" -d "$data" --max-steps 2 -p lora --lora-rank 8 --lora-alpha 16 -lr 1e-3 > lora.log 2>&1 \
  && python3 -c 'import json,sys; l=[r for r in map(json.loads, open(sys.argv[1])) if "step" in r]; sys.exit(0 if len(l)==2 and all(sum(d["reward_reasons"].values())==16 for d in l) else 1)' runs/lora/metrics.jsonl \
  && ok lora || { bad lora; tail -5 lora.log; }

# 4. MPI: one trainer, one rollout worker grading where it generates: the colocated run's steps.
run_mpi 2 "${base[@]}" --max-steps $steps -t 1 -i 1 -p t1i1 > t1i1.log 2>&1 || { bad t1i1-run; tail -5 t1i1.log; }
OMP_NUM_THREADS=1 timeout 600 "$rlcpp" train "${base[@]}" --max-steps $steps -p colocated1 > colocated1.log 2>&1 || bad colocated1-run
if [ -s runs/t1i1/metrics.jsonl ] && cmp -s <(metrics_of runs/colocated1/metrics.jsonl) <(metrics_of runs/t1i1/metrics.jsonl); then
  ok mpi-workers-same-steps
else
  bad mpi-workers-same-steps; diff <(metrics_of runs/colocated1/metrics.jsonl) <(metrics_of runs/t1i1/metrics.jsonl) | head -4
fi

# 5. Remote backend: an rlcpp serve of the model; graded on the trainer's side.
start_server server.log --model "$model" || { bad server-starts; cat server.log; }
pids+=("$server_pid")
timeout 600 "$rlcpp" train "${base[@]}" --max-steps 2 -p remote -b openai --rollout-url "$server_url" > remote.log 2>&1 \
  && python3 -c 'import json,sys; l=[r for r in map(json.loads, open(sys.argv[1])) if "step" in r]; sys.exit(0 if len(l)==2 and all(sum(d["reward_reasons"].values())==16 for d in l) else 1)' runs/remote/metrics.jsonl \
  && ok remote-backend || { bad remote-backend; tail -5 remote.log; }

# 6. A malformed test record: an error naming the line, or skipped with --skip-bad-lines.
head -5 "$data" > bad.jsonl
echo '{"messages": [{"role": "user", "content": "x"}], "tests": [{"stdin": "1"}]}' >> bad.jsonl
head -12 "$data" | tail -7 >> bad.jsonl
timeout 120 "$rlcpp" train "${common[@]}" -d bad.jsonl --max-steps 1 -p bad > bad.log 2>&1
if [ $? -ne 0 ] && grep -q "bad.jsonl:6: tests\[0\] must be" bad.log; then ok bad-record-named; else bad bad-record-named; tail -3 bad.log; fi
timeout 300 "$rlcpp" train "${common[@]}" -d bad.jsonl --max-steps 1 -p skipped --skip-bad-lines > skipped.log 2>&1 \
  && ok bad-record-skipped || { bad bad-record-skipped; tail -3 skipped.log; }

exit $failed
