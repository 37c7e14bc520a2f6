// Deterministic corpus for tokenizer parity: ≥ 2,000 varied strings, one JSON string per line.
// English and Chinese prose, code, LaTeX, emoji and other 4-byte characters, whitespace runs,
// numbers of every length, special-token text, combining marks, and random mixtures of all.
let seed = 20261130;
function rand() {  // mulberry32
  seed |= 0; seed = (seed + 0x6D2B79F5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (xs) => xs[Math.floor(rand() * xs.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const english = [
  "The quick brown fox jumps over the lazy dog.", "Natalia sold clips to 48 of her friends in April.",
  "How many clips did Natalia sell altogether in April and May?", "It's a truth universally acknowledged.",
  "I'll be there at 5 o'clock, won't you?", "She said: \"Don't do that!\"", "They're, we've, you'd, he'll.",
  "e-mail addresses like john.doe@example.com are common.", "Mr. Smith paid $12.50 for 3 apples (about 4.17 each).",
  "Let's think step by step.", "Therefore, the answer is 42.", "HELLO WORLD", "camelCaseIdentifier and snake_case_name",
  "A sentence with trailing spaces   ", "   leading spaces", "Hyphen-ated words—and em dashes – and en dashes.",
  "Ellipsis… and “curly quotes” and ‘single ones’.", "naïve café résumé coöperate façade", "ÀÉÎÕÜ àéîõü ßøåæ",
];
const chinese = [
  "你好，世界！", "我们今天去公园散步吧。", "小明有5个苹果，吃了2个，还剩几个？", "数学是科学的语言。",
  "请一步一步地思考，并把最终答案放在\\boxed{}中。", "人工智能正在改变世界。", "这是一个测试句子，包含标点符号：“引号”、《书名》。",
  "日本語のテキストも少し。カタカナとひらがな。", "한국어 문장도 있습니다.", "繁體中文與简体中文混合",
];
const code = [
  "def f(x):\n    return x ** 2 + 1\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
  "const obj = { key: 'value', n: 42 };", "if x != None and y >= 3: print(f\"{x}: {y}\")",
  "#include <vector>\nstd::vector<int> v{1, 2, 3};", "SELECT * FROM users WHERE id = 7;",
  "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", "x = [i for i in range(10) if i % 2 == 0]",
  "    indented_line()\n        more_indented()", "a&&b||!c; x<<=2; y>>>=1; z ^= ~w;",
  "<html><body><p class=\"x\">Hi</p></body></html>", "path/to/file.txt C:\\Windows\\System32",
];
const latex = [
  "\\frac{1}{2}", "\\boxed{\\frac{3}{4}}", "$x^2 + y^2 = z^2$", "\\sqrt{2}\\approx 1.414",
  "\\int_0^1 x^2\\,dx = \\frac13", "\\left( \\frac{a}{b} \\right)^{n}", "\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}",
  "\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}", "\\pi r^2", "x \\in [0, 1) \\cup (2, \\infty)",
  "\\text{The answer is } \\boxed{10\\%}", "\\dfrac{\\sqrt{3}}{2}", "a_{ij} = b^{k}_{l}", "\\$5.00 \\pm 0.01",
];
const emoji = [
  "😀", "👍🏽", "🏳️‍🌈", "👨‍👩‍👧‍👦", "🇯🇵🇺🇸", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟙𝟚𝟛", "🤖 robots", "❤️", "𠀀𠀁𪚥",
  "🎉🎉🎉", "©®™", "☃︎", "🧮 abacus", "⌘⌥⇧", "𓀀𓀁",
];
const whitespace = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "\n\t\n", "    \n", "\u00a0", "\u3000", "\u2003"];
const specials = [
  "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|begin_of_text|>",
  "<|eot_id|>", "<|start_header_id|>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", "<|im_", "im_end|>",
  "<|fim_prefix|>", "<|python_tag|>",
];
const scripts = [
  "Привет, как дела?", "مرحبا بالعالم", "नमस्ते दुनिया", "Γειά σου Κόσμε", "שלום עולם", "สวัสดีชาวโลก",
  "e\u0301", "A\u030a", "\u1e9b\u0323", "ﬁ ligature", "Ａ全角Ｂ", "①②③", "½ ¾ ⅓",
];

function number() {
  const kind = int(0, 5);
  const digits = (n) => Array.from({ length: n }, (_, k) => (k === 0 && n > 1 ? int(1, 9) : int(0, 9))).join("");
  if (kind === 0) return digits(int(1, 40));
  if (kind === 1) return `${digits(int(1, 6))}.${digits(int(1, 8))}`;
  if (kind === 2) return `-${digits(int(1, 12))}`;
  if (kind === 3) return Number(digits(int(4, 12))).toLocaleString("en-US");
  if (kind === 4) return `${digits(int(1, 3))}e${pick(["", "-", "+"])}${digits(int(1, 2))}`;
  return `${digits(int(1, 3))}/${digits(int(1, 3))}`;
}

const categories = [english, chinese, code, latex, emoji, whitespace, specials, scripts];
const out = [];
const push = (s) => out.push(s);
// Every fixed fragment alone, then in sentences.
for (const cat of categories) for (const s of cat) push(s);
for (let n = 1; n <= 40; ++n) push("7".repeat(n)), push(Array.from({ length: n }, (_, k) => (k + 1) % 10).join(""));
for (let n = 1; n <= 24; ++n) push(" ".repeat(n)), push("\n".repeat(n)), push("\t".repeat(Math.ceil(n / 3)) + "x"), push("a" + " ".repeat(n) + "b");
for (const s of specials) push(`before${s}after`), push(`text ${s} text`), push(`${s}\n${s}`);
while (out.length < 2400) {
  const parts = int(1, 6);
  let s = "";
  for (let k = 0; k < parts; ++k) {
    const r = rand();
    if (r < 0.25) s += pick(english);
    else if (r < 0.38) s += pick(chinese);
    else if (r < 0.48) s += pick(code);
    else if (r < 0.58) s += pick(latex);
    else if (r < 0.65) s += pick(emoji);
    else if (r < 0.75) s += number();
    else if (r < 0.82) s += pick(specials);
    else if (r < 0.90) s += pick(scripts);
    else s += pick(whitespace).repeat(int(1, 4));
    if (rand() < 0.7) s += pick([" ", "", "\n", ", ", ". ", "  ", "\t"]);
  }
  push(s);
}
for (const s of out) process.stdout.write(JSON.stringify(s) + "\n");
