#!/usr/bin/env bash
# LLM-as-judge rewards (-rt judge) against a stand-in judge server (tests/data/fake_judge.py, an
# OpenAI-compatible /v1/chat/completions that scores a response by its length):
# - rlcpp grade -rt judge: the template's fields filled in (the prompts the judge saw are checked),
#   temperature 0, the served name from /v1/models, the score read and scaled, "no score" replies;
# - --judge-pattern; two servers of which one fails every request: every judgement still made;
# - GRPO and PPO train with -rt judge, and with the judge beside the rule reward (--reward-weights);
# - bad settings refused by name; an unreachable judge stops the run, naming it.
# Usage: test_judge.sh RLCPP_BINARY SOURCE_DIR
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_judge.sh RLCPP_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: test_judge.sh RLCPP_BINARY SOURCE_DIR}")
source "$src/tests/lib.sh"
model="$src/models/arith-tiny" data="$src/examples/arith/train.jsonl"
pids=()
cleanup_extra() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
# start_judge NAME [--fail]: starts a judge and sets $NAME to its URL. Not run in $(...): the pid must
# reach this shell's $pids, or cleanup_extra leaves the judge running.
start_judge() {
  python3 "$src/tests/data/fake_judge.py" "$1.port" "$1.log" "${@:2}" > "$1.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$1.port" ] && break; sleep 0.1; done
  printf -v "$1" 'http://127.0.0.1:%s' "$(cat "$1.port")"
}
start_judge good
start_judge broken --fail
printf '%s\n' 'Question: {prompt}' 'Reference: {answer}' 'End with "Score: N", N from 0 to 10.' 'Response: {response}' > template.txt

# 1. grade -rt judge: what the judge is sent and what its replies are worth.
cat > records.jsonl <<'JSON'
{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3?"}], "response": "2+3=5 \\boxed{5}", "gt_answer": "5"}
{"prompt": "Name a colour.", "response": "Blue, or {prompt} written as is."}
{"prompt": "Say anything.", "response": "NOSCORE"}
{"prompt": "Long?", "response": "abcdefghij"}
JSON
"$rlcpp" grade -rt judge --judge-url "$good" --judge-template template.txt --input records.jsonl -o graded.jsonl 2> grade.log \
  || { bad "grade -rt judge:"; tail -5 grade.log; }
python3 - records.jsonl graded.jsonl good.log <<'PY' && ok "grade -rt judge: fields filled in, scores read and scaled, no-score replies" || bad "grade -rt judge"
import json, sys
records = [json.loads(l) for l in open(sys.argv[1])]
graded = [json.loads(l) for l in open(sys.argv[2])]
seen = {json.loads(l)["prompt"]: json.loads(l) for l in open(sys.argv[3])}
assert len(graded) == 4 and len(seen) == 4, (graded, seen)
for rec, g in zip(records, graded):
    question = rec["messages"][-1]["content"] if "messages" in rec else rec["prompt"]
    prompt = (f"Question: {question}\nReference: {rec.get('gt_answer', '')}\n"
              f'End with "Score: N", N from 0 to 10.\nResponse: {rec["response"]}\n')
    assert prompt in seen, (prompt, list(seen))
    call = seen[prompt]
    assert call["model"] == "fake-judge" and call["temperature"] == 0 and call["max_tokens"] == 256, call
    if rec["response"] == "NOSCORE":
        assert g["reward"] == 0 and g["reason"] == "no score" and g["parts"]["judge/no_score"] == 1, g
    else:
        raw = len(rec["response"]) % 11
        assert g["parts"]["judge/raw"] == raw and abs(g["reward"] - min(1, raw / 10)) < 1e-12, (g, raw)
print("     rewards", [g["reward"] for g in graded])
PY

# 2. A pattern, and two servers of which one fails every request.
"$rlcpp" grade -rt judge --judge-url "$broken,$good" --judge-template template.txt --judge-pattern 'Score: ([0-9]+)' \
  --judge-max-score 5 --input records.jsonl -o graded2.jsonl 2> grade2.log || { bad "grade with a failing server:"; tail -5 grade2.log; }
python3 - records.jsonl graded2.jsonl <<'PY' && grep -q "judge server $broken failed" grade2.log \
  && ok "--judge-pattern, --judge-max-score; a failing judge server set aside, its judgements made by the other" || bad "pattern and failover"
import json, sys
records = [json.loads(l) for l in open(sys.argv[1])]
graded = [json.loads(l) for l in open(sys.argv[2])]
for rec, g in zip(records, graded):
    if rec["response"] != "NOSCORE":
        assert abs(g["reward"] - min(1, (len(rec["response"]) % 11) / 5)) < 1e-12, g
PY

# 3. Training with the judge: GRPO alone on it, PPO alone on it, GRPO beside the rule reward.
train() {  # train PROJECT FLAGS...
  local project=$1; shift
  OMP_NUM_THREADS=1 "$rlcpp" train -m "$model" -d "$data" -g 2 -tbs 2 -tMbs 2 -tmbs 4 --mnt 16 --max-steps 2 --seed 0 -sd runs -p "$project" \
    --judge-url "$good" --judge-template template.txt -rsd rollouts "$@" > "$project.log" 2>&1
}
for run in "grpo -rt judge" "ppo -a PPO -rt judge" "both -rt boxed --reward-weights accuracy=1,judge=0.5"; do
  read -r name flags <<<"$run"
  # shellcheck disable=SC2086
  if train "$name" $flags && python3 - "rollouts/$name" "$name" <<'PY'
import glob, json, sys
rows = [json.loads(l) for f in sorted(glob.glob(sys.argv[1] + "/**/*.jsonl", recursive=True)) for l in open(f)]
samples = [s for r in rows for s in (r.get("samples") or [r])]
assert samples, "no rollouts"
for s in samples:
    parts = s.get("reward_parts") or s.get("parts")
    if parts.get("judge/no_score", 0) == 0:
        raw = parts["judge/raw"]
        want = min(1, raw / 10) if sys.argv[2] != "both" else parts["accuracy"] + 0.5 * min(1, raw / 10)
        assert abs(s["reward"] - want) < 1e-9, (s["reward"], parts)
PY
  then ok "train $flags with the judge"; else bad "train $flags with the judge:"; tail -5 "$name.log"; fi
done

# 4. Refused by name.
expect judge-without-url 2 '-rt judge: .*--judge-url' -- "$rlcpp" train -m "$model" -d "$data" -rt judge
expect url-without-template 2 '--judge-url .*--judge-template FILE' -- "$rlcpp" train -m "$model" -d "$data" -rt judge --judge-url "$good"
expect template-missing 2 '--judge-template .*nowhere.txt: no such file' -- \
  "$rlcpp" train -m "$model" -d "$data" -rt judge --judge-url "$good" --judge-template nowhere.txt
printf 'Rate this.\n' > blind.txt
expect template-without-response 2 'no \{response\}' -- "$rlcpp" grade -rt judge --judge-url "$good" --judge-template blind.txt x
expect judge-flags-without-url 2 'are for an LLM judge; give its servers with --judge-url' -- \
  "$rlcpp" train -m "$model" -d "$data" --judge-template template.txt
expect weights-without-judge 2 'no reward component "judge"' -- "$rlcpp" train -m "$model" -d "$data" --reward-weights judge=1
expect eval-judge 2 'rlcpp grade -rt judge' -- "$rlcpp" eval -m "$model" -d "$data" -rt judge
dead=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
expect judge-unreachable 2 "no judge server has answered .*127.0.0.1:$dead" -- timeout 60 \
  "$rlcpp" grade -rt judge --judge-url "http://127.0.0.1:$dead" --judge-template template.txt --judge-timeout 2 x
exit "$failed"
