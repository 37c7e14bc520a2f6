#!/usr/bin/env bash
# `rlcpp serve` through the official OpenAI client for Python (PyPI `openai`, in rlcpp's Python
# environment): the model list, completions and chat, both streamed, with log-probs, tools offered
# and a tool call round taken back (tool_choice "required" refused by name), and a refused
# parameter; each sample's token ids and log-probs equal `rlcpp generate`'s with the same seed (a
# prompt as raw text for completions, the chat template for chat). Also: SIGTERM stops the server
# cleanly.
# Usage: test_serve_client.sh RLCPP_BINARY SOURCE_DIR
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_serve_client.sh RLCPP_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: test_serve_client.sh RLCPP_BINARY SOURCE_DIR}")
source "$(dirname "$0")/lib.sh"
model="$src/models/arith-tiny"
cleanup_extra() { [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null; }
prompt="What is 48 + 27?"
message="What is 35 + 19?"
seed=17

start_server server.log --model "$model" --api-key sesame || { bad server-starts; cat server.log; exit 1; }
ok "server-starts ($server_url)"
$py "$src/tests/py/openai_client.py" "$server_url/v1" sesame "$prompt" "$message" $seed > client.jsonl 2> client.err \
  || { bad openai-client-runs; cat client.err; }
"$rlcpp" generate --model "$model" --prompt "$prompt" --raw -n 2 --seed $seed --mnt 24 --temperature 1.0 \
  -o completion.jsonl 2> /dev/null || bad generate-completion
"$rlcpp" generate --model "$model" --prompt "$message" -n 1 --seed $seed --mnt 24 --temperature 1.0 \
  -o chat.jsonl 2> /dev/null || bad generate-chat

python3 - client.jsonl completion.jsonl chat.jsonl <<'PY' || failed=1
import json, sys
got = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    got[d.pop("kind")] = d
want = [json.loads(l) for l in open(sys.argv[2])]
chat = json.loads(open(sys.argv[3]).readline())
status = 0
def check(name, cond, detail=""):
    global status
    print(("ok   " if cond else "FAIL ") + name + (f"  {detail}" if detail and not cond else ""))
    status |= 0 if cond else 1
check("models-listed", got.get("models", {}).get("ids") == ["arith-tiny"], got.get("models"))
for kind in ("completion", "completion_stream"):
    choices = sorted(got.get(kind, {}).get("choices", []), key=lambda c: c["index"])
    same = len(choices) == 2 and all(
        c["token_ids"] == w["response_ids"] and c["logprobs"] == w["logprobs"] and c["text"] == w["response"]
        and c["finish_reason"] == w["finish_reason"] for c, w in zip(choices, want))
    check(f"{kind}-equals-generate", same, json.dumps(choices)[:400] + " vs " + json.dumps(want)[:400])
    usage = got.get(kind, {}).get("usage") or {}
    check(f"{kind}-usage", usage.get("completion_tokens") == sum(len(w["response_ids"]) for w in want), usage)
c = got.get("chat", {})
check("chat-equals-generate", c.get("token_ids") == chat["response_ids"] and c.get("logprobs") == chat["logprobs"]
      and c.get("text") == chat["response"] and c.get("prompt_token_ids") == chat["prompt_ids"], json.dumps(c)[:400])
check("chat-top-logprobs", c.get("top_logprobs") == [2] * len(chat["response_ids"]) and c.get("role") == "assistant")
s = got.get("chat_stream", {})
check("chat-stream-equals-generate", s.get("token_ids") == chat["response_ids"] and s.get("text") == chat["response"]
      and s.get("role") == "assistant", json.dumps(s)[:300])
t = got.get("tools", {})
check("tools-offered-answer-is-the-chats", t.get("text") == chat["response"] and t.get("tool_calls") is None
      and t.get("finish_reason") in ("stop", "length") and t.get("prompt_tokens") == len(chat["prompt_ids"]), t)
check("tool-call-round-taken-back", t.get("round_prompt_tokens", 0) > t.get("prompt_tokens", 1)
      and t.get("round_finish_reason") in ("stop", "length"), t)
t = got.get("tools_required", {})
check("tool-choice-required-refused-by-name", t.get("status") == 400 and t.get("param") == "tool_choice", t)
r = got.get("refused", {})
check("bad-parameter-is-400", r.get("status") == 400 and r.get("param") == "temperature", r)
sys.exit(status)
PY

# No key, a wrong key: 401; /health needs none.
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$server_url/v1/completions" -d '{"prompt": "1"}')
[ "$code" = 401 ] && ok missing-key-is-401 || bad "missing-key-is-401 ($code)"
code=$(curl -s -o /dev/null -w '%{http_code}' "$server_url/health")
[ "$code" = 200 ] && ok health-needs-no-key || bad "health-needs-no-key ($code)"
kill -TERM "$server_pid"
for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$server_pid" 2>/dev/null; then bad sigterm-stops-server; else wait "$server_pid"; rc=$?
  [ $rc = 0 ] && grep -q "stopped" server.log && ok sigterm-stops-server || bad "sigterm-stops-server (exit $rc)"; fi
server_pid=""
# Beyond loopback without a key: refused at start, naming the flag.
out=$("$rlcpp" serve --model "$model" --host 0.0.0.0 --port 0 2>&1) && bad open-bind-needs-key \
  || { grep -q -- "--api-key" <<<"$out" && ok open-bind-needs-key || { bad open-bind-needs-key; echo "$out"; }; }
exit $failed
