// Chat-template requests for parity with @huggingface/jinja: one JSON object per line with
// messages, add_generation_prompt and extra variables (tools, enable_thinking, date_string).
const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string", description: "City name" },
      unit: { type: "string", enum: ["c", "f"] } }, required: ["city"] } } },
  { type: "function", function: { name: "add", description: "Add two numbers",
    parameters: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } } } } },
];
const user = (content) => ({ role: "user", content });
const system = (content) => ({ role: "system", content });
const assistant = (content) => ({ role: "assistant", content });
const questions = [
  "What is 2+2?", "Solve for x: 3x + 5 = 20.", "你好，请计算 12 × 7。", "Explain \\frac{a}{b} in LaTeX.",
  "Line one\nLine two\n\n  indented", "Emoji test 😀👍🏽", "Quotes \"double\" and 'single'", "",
  "  spaces around  ", "<think>not really thinking</think>", "Special <|im_end|> text inside",
];
const answers = [
  "4", "<think>\nLet me compute.\n</think>\n\nThe answer is \\boxed{5}.", "答案是 84。",
  "Use \\frac{a}{b}.", "<think>short</think>ok", "  padded answer  ",
];
const requests = [];
for (const [k, q] of questions.entries()) {
  for (const gen of [true, false]) {
    requests.push({ messages: [user(q)], add_generation_prompt: gen });
    requests.push({ messages: [system("Please reason step by step, and put your final answer within \\boxed{}."), user(q)], add_generation_prompt: gen });
    requests.push({ messages: [user(q), assistant(answers[k % answers.length]), user("And then?")], add_generation_prompt: gen });
  }
  requests.push({ messages: [system("You are terse."), user(q), assistant(answers[(k + 1) % answers.length])], add_generation_prompt: false });
  requests.push({ messages: [user(q)], add_generation_prompt: true, enable_thinking: false });
}
const toolCall = { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "get_weather", arguments: { city: "Paris" } } }] };
requests.push({ messages: [user("Weather in Paris?")], add_generation_prompt: true, tools });
requests.push({ messages: [system("Use tools when needed."), user("Weather in Paris?")], add_generation_prompt: true, tools });
requests.push({ messages: [user("Weather in Paris?"), toolCall, { role: "tool", content: "{\"temp\": 21}" }], add_generation_prompt: true, tools });
requests.push({ messages: [user("Weather in Paris?"), toolCall, { role: "tool", content: "sunny" }, assistant("It is sunny.")], add_generation_prompt: false, tools });
requests.push({ messages: [user("What is today?")], add_generation_prompt: true, date_string: "30 Nov 2026" });
requests.push({ messages: [system("A"), user("B"), assistant("C"), user("D"), assistant("E"), user("F")], add_generation_prompt: true });
// Assistant contents with leading spaces hit the JS package's strip(chars) bug (see compare.mjs).
for (const r of requests) {
  if (r.messages.some((m) => m.role === "assistant" && /^\s|\s$/.test(m.content))) r.strip_chars_case = true;
}
for (const r of requests) process.stdout.write(JSON.stringify(r) + "\n");
