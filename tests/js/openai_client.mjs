// The official OpenAI client for Node against `rlcpp serve` (tests/test_serve_cli.sh):
//   node openai_client.mjs BASE_URL API_KEY PROMPT CHAT_MESSAGE SEED
// prints one JSON line per call: completions, chat, both streamed, with log-probs, the model list
// and a refused request; each sample's token ids (vLLM's return_token_ids extension), log-probs
// and text, as the client handed them over.
import OpenAI from "openai";

const [baseURL, apiKey, prompt, message, seedText] = process.argv.slice(2);
const seed = Number(seedText);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const out = (kind, value) => process.stdout.write(JSON.stringify({ kind, ...value }) + "\n");

const models = await client.models.list();
const model = models.data[0].id;
out("models", { ids: models.data.map((m) => m.id) });

// Completions: a text prompt, two samples, each token's log-prob.
const completion = await client.completions.create({
  model, prompt, n: 2, max_tokens: 24, temperature: 1.0, seed, logprobs: 0, return_token_ids: true,
});
out("completion", {
  choices: completion.choices.map((c) => ({ index: c.index, text: c.text, token_ids: c.token_ids,
    logprobs: c.logprobs.token_logprobs, finish_reason: c.finish_reason })),
  usage: completion.usage,
});

// The same, streamed: the chunks put back together.
const streamed = await client.completions.create({
  model, prompt, n: 2, max_tokens: 24, temperature: 1.0, seed, logprobs: 0, stream: true,
  stream_options: { include_usage: true },
});
const parts = {};
let usage = null;
for await (const chunk of streamed) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    const p = (parts[c.index] ??= { index: c.index, text: "", token_ids: [], logprobs: [], finish_reason: null });
    p.text += c.text;
    p.token_ids.push(...c.token_ids);
    p.logprobs.push(...c.logprobs.token_logprobs);
    if (c.finish_reason) p.finish_reason = c.finish_reason;
  }
}
out("completion_stream", { choices: Object.values(parts), usage });

// Chat: the model's chat template, with top log-probs.
const chat = await client.chat.completions.create({
  model, messages: [{ role: "user", content: message }], max_tokens: 24, temperature: 1.0, seed, logprobs: true,
  top_logprobs: 2,
});
const choice = chat.choices[0];
out("chat", {
  text: choice.message.content, role: choice.message.role, token_ids: choice.token_ids,
  logprobs: choice.logprobs.content.map((t) => t.logprob),
  top_logprobs: choice.logprobs.content.map((t) => t.top_logprobs.length),
  finish_reason: choice.finish_reason, prompt_token_ids: chat.prompt_token_ids,
});

const chatStream = await client.chat.completions.create({
  model, messages: [{ role: "user", content: message }], max_tokens: 24, temperature: 1.0, seed, stream: true,
});
let text = "", role = null;
const ids = [];
for await (const chunk of chatStream) {
  const c = chunk.choices[0];
  if (!c) continue;
  if (c.delta.role) role = c.delta.role;
  text += c.delta.content ?? "";
  ids.push(...(c.token_ids ?? []));
}
out("chat_stream", { text, role, token_ids: ids });

// A bad parameter: the client's APIError with the status and the parameter named.
try {
  await client.completions.create({ model, prompt, temperature: -3 });
  out("refused", { status: 200 });
} catch (e) {
  out("refused", { status: e.status, param: e.param ?? e.error?.param ?? null, message: e.message });
}
