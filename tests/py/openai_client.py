"""The official OpenAI client for Python (PyPI `openai`, pinned in scripts/requirements.txt) against
`rlcpp serve` (tests/test_serve_client.sh):
    python openai_client.py BASE_URL API_KEY PROMPT CHAT_MESSAGE SEED
prints one JSON line per call: the model list, completions and chat, both streamed, with log-probs,
tools offered and a tool call round, and refused requests; each sample's token ids (vLLM's return_token_ids extension, which
the client keeps as an extra field), log-probs and text, as the client handed them over."""
import json
import sys

import openai

base_url, api_key, prompt, message, seed = sys.argv[1:6]
seed = int(seed)
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)


def out(kind, value):
    print(json.dumps({"kind": kind, **value}), flush=True)


def extra(obj, name):
    """A field the client does not know (vLLM's extensions), kept in the object's extras."""
    value = getattr(obj, name, None)
    if value is None and getattr(obj, "model_extra", None):
        value = obj.model_extra.get(name)
    return value


models = client.models.list()
model = models.data[0].id
out("models", {"ids": [m.id for m in models.data]})

# Completions: a text prompt, two samples, each token's log-prob.
completion = client.completions.create(model=model, prompt=prompt, n=2, max_tokens=24, temperature=1.0, seed=seed,
                                       logprobs=0, extra_body={"return_token_ids": True})
out("completion", {
    "choices": [{"index": c.index, "text": c.text, "token_ids": extra(c, "token_ids"),
                 "logprobs": c.logprobs.token_logprobs, "finish_reason": c.finish_reason} for c in completion.choices],
    "usage": completion.usage.model_dump() if completion.usage else None,
})

# The same, streamed: the chunks put back together.
parts, usage = {}, None
for chunk in client.completions.create(model=model, prompt=prompt, n=2, max_tokens=24, temperature=1.0, seed=seed,
                                       logprobs=0, stream=True, stream_options={"include_usage": True}):
    if chunk.usage:
        usage = chunk.usage.model_dump()
    for c in chunk.choices:
        p = parts.setdefault(c.index, {"index": c.index, "text": "", "token_ids": [], "logprobs": [],
                                       "finish_reason": None})
        p["text"] += c.text
        p["token_ids"] += extra(c, "token_ids") or []
        p["logprobs"] += c.logprobs.token_logprobs if c.logprobs else []
        if c.finish_reason:
            p["finish_reason"] = c.finish_reason
out("completion_stream", {"choices": list(parts.values()), "usage": usage})

# Chat: the model's chat template, with top log-probs.
chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": message}], max_tokens=24,
                                      temperature=1.0, seed=seed, logprobs=True, top_logprobs=2)
choice = chat.choices[0]
out("chat", {
    "text": choice.message.content, "role": choice.message.role, "token_ids": extra(choice, "token_ids"),
    "logprobs": [t.logprob for t in choice.logprobs.content],
    "top_logprobs": [len(t.top_logprobs) for t in choice.logprobs.content],
    "finish_reason": choice.finish_reason, "prompt_token_ids": extra(chat, "prompt_token_ids"),
})

text, role, ids = "", None, []
for chunk in client.chat.completions.create(model=model, messages=[{"role": "user", "content": message}],
                                            max_tokens=24, temperature=1.0, seed=seed, stream=True):
    if not chunk.choices:
        continue
    c = chunk.choices[0]
    role = c.delta.role or role
    text += c.delta.content or ""
    ids += extra(c, "token_ids") or []
out("chat_stream", {"text": text, "role": role, "token_ids": ids})

# Tools: offered through the model's chat template, and a finished call round (the assistant's
# tool_calls, the tool's answer) taken back. The bundled model's template shows no tools and its
# answers call none, so the answer is the plain chat's text (the calls' parsing on real templates is
# tests/test_serve.cpp's); tool_choice "required" is refused by name.
tools = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluates an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]


def refusal(call):
    """The status and the parameter named by a request the server refuses (status 200 if it did not)."""
    try:
        call()
        return {"status": 200}
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        body = body.get("error", body) if isinstance(body, dict) else {}
        return {"status": e.status_code, "param": body.get("param"), "message": str(e)}


user = {"role": "user", "content": message}
offered = client.chat.completions.create(model=model, messages=[user], tools=tools, max_tokens=24, temperature=1.0,
                                         seed=seed)
call_round = [user, {"role": "assistant", "content": None, "tool_calls": [{
    "id": "call_1", "type": "function",
    "function": {"name": "calculator", "arguments": json.dumps({"expression": "35 + 19"})}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "54"}]
answered = client.chat.completions.create(model=model, messages=call_round, tools=tools, max_tokens=24, seed=seed)
out("tools", {
    "text": offered.choices[0].message.content, "tool_calls": [c.model_dump() for c in offered.choices[0].message.tool_calls or []] or None,
    "finish_reason": offered.choices[0].finish_reason, "prompt_tokens": offered.usage.prompt_tokens,
    "round_prompt_tokens": answered.usage.prompt_tokens, "round_finish_reason": answered.choices[0].finish_reason,
})
out("tools_required", refusal(lambda: client.chat.completions.create(
    model=model, messages=[user], tools=tools, tool_choice="required", max_tokens=24, seed=seed)))

# A bad parameter: the client's APIStatusError with the status and the parameter named.
out("refused", refusal(lambda: client.completions.create(model=model, prompt=prompt, temperature=-3)))
