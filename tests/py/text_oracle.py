"""The third-party side of rlcpp's tokenizer and chat-template parity (tests/text_parity.sh): Hugging
Face `tokenizers` (the Rust implementation) and transformers' AutoTokenizer with apply_chat_template
(jinja2, the renderer users' models are served with).

    python text_oracle.py corpus                 > corpus.jsonl   (>= 2,400 strings, one JSON string a line)
    python text_oracle.py chats                  > chats.jsonl    (chat-template requests, one JSON object a line)
    python text_oracle.py compare NAME TOKENIZER_DIR corpus.jsonl rlcpp_ids.jsonl rlcpp_special.jsonl \
                                  chats.jsonl rlcpp_chats.jsonl

compare prints one summary line and exits 1 on any difference: token ids without special tokens
(`tokenizers`), with them (transformers, which adds BOS where the tokenizer_config asks for it),
decode(encode(x)) == x up to the tokenizer's normalizer, and every chat render byte for byte."""
import json
import random
import sys
import unicodedata

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.", "Natalia sold clips to 48 of her friends in April.",
    "How many clips did Natalia sell altogether in April and May?", "It's a truth universally acknowledged.",
    "I'll be there at 5 o'clock, won't you?", "She said: \"Don't do that!\"", "They're, we've, you'd, he'll.",
    "e-mail addresses like john.doe@example.com are common.", "Mr. Smith paid $12.50 for 3 apples (about 4.17 each).",
    "Let's think step by step.", "Therefore, the answer is 42.", "HELLO WORLD", "camelCaseIdentifier and snake_case_name",
    "A sentence with trailing spaces   ", "   leading spaces", "Hyphen-ated words—and em dashes – and en dashes.",
    "Ellipsis… and “curly quotes” and ‘single ones’.", "naïve café résumé coöperate façade", "ÀÉÎÕÜ àéîõü ßøåæ",
]
CHINESE = [
    "你好，世界！", "我们今天去公园散步吧。", "小明有5个苹果，吃了2个，还剩几个？", "数学是科学的语言。",
    "请一步一步地思考，并把最终答案放在\\boxed{}中。", "人工智能正在改变世界。", "这是一个测试句子，包含标点符号：“引号”、《书名》。",
    "日本語のテキストも少し。カタカナとひらがな。", "한국어 문장도 있습니다.", "繁體中文與简体中文混合",
]
CODE = [
    "def f(x):\n    return x ** 2 + 1\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "const obj = { key: 'value', n: 42 };", "if x != None and y >= 3: print(f\"{x}: {y}\")",
    "#include <vector>\nstd::vector<int> v{1, 2, 3};", "SELECT * FROM users WHERE id = 7;",
    "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", "x = [i for i in range(10) if i % 2 == 0]",
    "    indented_line()\n        more_indented()", "a&&b||!c; x<<=2; y>>>=1; z ^= ~w;",
    "<html><body><p class=\"x\">Hi</p></body></html>", "path/to/file.txt C:\\Windows\\System32",
]
LATEX = [
    "\\frac{1}{2}", "\\boxed{\\frac{3}{4}}", "$x^2 + y^2 = z^2$", "\\sqrt{2}\\approx 1.414",
    "\\int_0^1 x^2\\,dx = \\frac13", "\\left( \\frac{a}{b} \\right)^{n}", "\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}",
    "\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}", "\\pi r^2", "x \\in [0, 1) \\cup (2, \\infty)",
    "\\text{The answer is } \\boxed{10\\%}", "\\dfrac{\\sqrt{3}}{2}", "a_{ij} = b^{k}_{l}", "\\$5.00 \\pm 0.01",
]
EMOJI = [
    "😀", "👍🏽", "🏳️‍🌈", "👨‍👩‍👧‍👦", "🇯🇵🇺🇸", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟙𝟚𝟛", "🤖 robots", "❤️", "𠀀𠀁𪚥",
    "🎉🎉🎉", "©®™", "☃︎", "🧮 abacus", "⌘⌥⇧", "𓀀𓀁",
]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "\n\t\n", "    \n", "\u00a0", "\u3000", "\u2003"]
SPECIALS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|begin_of_text|>",
    "<|eot_id|>", "<|start_header_id|>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", "<|im_", "im_end|>",
    "<|fim_prefix|>", "<|python_tag|>",
]
SCRIPTS = [
    "Привет, как дела?", "مرحبا بالعالم", "नमस्ते दुनिया", "Γειά σου Κόσμε", "שלום עולם", "สวัสดีชาวโลก",
    "e\u0301", "A\u030a", "\u1e9b\u0323", "ﬁ ligature", "Ａ全角Ｂ", "①②③", "½ ¾ ⅓",
]


def corpus():
    rng = random.Random(20261130)

    def number():
        kind = rng.randint(0, 5)
        digits = lambda n: "".join(str(rng.randint(1, 9) if k == 0 and n > 1 else rng.randint(0, 9)) for k in range(n))
        if kind == 0:
            return digits(rng.randint(1, 40))
        if kind == 1:
            return f"{digits(rng.randint(1, 6))}.{digits(rng.randint(1, 8))}"
        if kind == 2:
            return f"-{digits(rng.randint(1, 12))}"
        if kind == 3:
            return f"{int(digits(rng.randint(4, 12))):,}"
        if kind == 4:
            return f"{digits(rng.randint(1, 3))}e{rng.choice(['', '-', '+'])}{digits(rng.randint(1, 2))}"
        return f"{digits(rng.randint(1, 3))}/{digits(rng.randint(1, 3))}"

    out = [s for cat in (ENGLISH, CHINESE, CODE, LATEX, EMOJI, WHITESPACE, SPECIALS, SCRIPTS) for s in cat]
    for n in range(1, 41):
        out += ["7" * n, "".join(str((k + 1) % 10) for k in range(n))]
    for n in range(1, 25):
        out += [" " * n, "\n" * n, "\t" * -(-n // 3) + "x", "a" + " " * n + "b"]
    for s in SPECIALS:
        out += [f"before{s}after", f"text {s} text", f"{s}\n{s}"]
    while len(out) < 2400:
        s = ""
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            s += (rng.choice(ENGLISH) if r < 0.25 else rng.choice(CHINESE) if r < 0.38 else rng.choice(CODE) if r < 0.48
                  else rng.choice(LATEX) if r < 0.58 else rng.choice(EMOJI) if r < 0.65 else number() if r < 0.75
                  else rng.choice(SPECIALS) if r < 0.82 else rng.choice(SCRIPTS) if r < 0.90
                  else rng.choice(WHITESPACE) * rng.randint(1, 4))
            if rng.random() < 0.7:
                s += rng.choice([" ", "", "\n", ", ", ". ", "  ", "\t"])
        out.append(s)
    return out


def chats():
    tools = [
        {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {
            "type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                             "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "add", "description": "Add two numbers", "parameters": {
            "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}},
    ]
    user = lambda c: {"role": "user", "content": c}
    system = lambda c: {"role": "system", "content": c}
    assistant = lambda c: {"role": "assistant", "content": c}
    questions = [
        "What is 2+2?", "Solve for x: 3x + 5 = 20.", "你好，请计算 12 × 7。", "Explain \\frac{a}{b} in LaTeX.",
        "Line one\nLine two\n\n  indented", "Emoji test 😀👍🏽", "Quotes \"double\" and 'single'", "",
        "  spaces around  ", "<think>not really thinking</think>", "Special <|im_end|> text inside",
    ]
    answers = [
        "4", "<think>\nLet me compute.\n</think>\n\nThe answer is \\boxed{5}.", "答案是 84。",
        "Use \\frac{a}{b}.", "<think>short</think>ok", "  padded answer  ",
    ]
    reqs = []
    for k, q in enumerate(questions):
        for gen in (True, False):
            reqs.append({"messages": [user(q)], "add_generation_prompt": gen})
            reqs.append({"messages": [system("Please reason step by step, and put your final answer within \\boxed{}."),
                                      user(q)], "add_generation_prompt": gen})
            reqs.append({"messages": [user(q), assistant(answers[k % len(answers)]), user("And then?")],
                         "add_generation_prompt": gen})
        reqs.append({"messages": [system("You are terse."), user(q), assistant(answers[(k + 1) % len(answers)])],
                     "add_generation_prompt": False})
        reqs.append({"messages": [user(q)], "add_generation_prompt": True, "enable_thinking": False})
    call = {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
    reqs.append({"messages": [user("Weather in Paris?")], "add_generation_prompt": True, "tools": tools})
    reqs.append({"messages": [system("Use tools when needed."), user("Weather in Paris?")], "add_generation_prompt": True,
                 "tools": tools})
    reqs.append({"messages": [user("Weather in Paris?"), call, {"role": "tool", "content": "{\"temp\": 21}"}],
                 "add_generation_prompt": True, "tools": tools})
    reqs.append({"messages": [user("Weather in Paris?"), call, {"role": "tool", "content": "sunny"},
                              assistant("It is sunny.")], "add_generation_prompt": False, "tools": tools})
    reqs.append({"messages": [user("What is today?")], "add_generation_prompt": True, "date_string": "30 Nov 2026"})
    reqs.append({"messages": [system("A"), user("B"), assistant("C"), user("D"), assistant("E"), user("F")],
                 "add_generation_prompt": True})
    return reqs


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def compare(name, tokenizer_dir, corpus_f, ids_f, special_f, chats_f, rendered_f):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    rust = Tokenizer.from_file(f"{tokenizer_dir}/tokenizer.json")
    hf = AutoTokenizer.from_pretrained(tokenizer_dir)
    strings, ours, ours_special = read_jsonl(corpus_f), read_jsonl(ids_f), read_jsonl(special_f)
    requests, ours_rendered = read_jsonl(chats_f), read_jsonl(rendered_f)
    nfc = (json.load(open(f"{tokenizer_dir}/tokenizer.json", encoding="utf-8")).get("normalizer") or {}).get("type") == "NFC"
    # DeepSeek-V3's tokenizer_config.json names tokenizer_class LlamaTokenizerFast with add_bos_token:
    # transformers 4 rebuilt the post-processor to prepend BOS, and rlcpp does so (the publisher's
    # intent; its chat template writes the BOS itself); transformers 5 loads such a config with its
    # generic backend and keeps tokenizer.json's post-processor, which adds nothing. Ids with special
    # tokens may differ by exactly that BOS in front, counted and reported, nothing else.
    config = json.load(open(f"{tokenizer_dir}/tokenizer_config.json", encoding="utf-8"))
    bos = config.get("bos_token")
    bos = bos.get("content") if isinstance(bos, dict) else bos
    config_bos = (rust.token_to_id(bos) if bos and str(config.get("tokenizer_class", "")).startswith("Llama")
                  and config.get("add_bos_token") else None)
    bos_only = 0
    failures = []
    fail = failures.append
    if not (len(strings) == len(ours) == len(ours_special)):
        fail(f"line counts differ: corpus {len(strings)}, rlcpp {len(ours)} and {len(ours_special)}")
    tokens = 0
    for text, mine, mine_special in zip(strings, ours, ours_special):
        want = rust.encode(text, add_special_tokens=False).ids
        if mine["ids"] != want:
            fail(f"ids differ for {json.dumps(text)[:120]}\n  tokenizers {want}\n  rlcpp      {mine['ids']}")
        tokens += len(want)
        expected = unicodedata.normalize("NFC", text) if nfc else text
        if mine.get("decoded") != expected:
            fail(f"decode(encode(x)) != x for {json.dumps(text)[:120]}: {json.dumps(mine.get('decoded'))[:120]}")
        want_special = hf(text, add_special_tokens=True)["input_ids"]
        if mine_special["ids"] != want_special and config_bos is not None and want_special[:1] != [config_bos] \
                and mine_special["ids"] == [config_bos] + want_special:
            bos_only += 1
        elif mine_special["ids"] != want_special:
            fail(f"add_special_tokens ids differ for {json.dumps(text)[:80]}: transformers {want_special[:12]} "
                 f"rlcpp {mine_special['ids'][:12]}")
    for k, (req, mine) in enumerate(zip(requests, ours_rendered)):
        extra = {key: v for key, v in req.items() if key not in ("messages", "add_generation_prompt", "tools")}
        want = hf.apply_chat_template(req["messages"], tools=req.get("tools"), tokenize=False,
                                      add_generation_prompt=req["add_generation_prompt"], **extra)
        if mine != want:
            fail(f"chat template differs for request {k}:\n  transformers {json.dumps(want)[:400]}\n"
                 f"  rlcpp        {json.dumps(mine)[:400]}")
    if len(ours_rendered) != len(requests):
        fail(f"{len(requests)} chat requests, {len(ours_rendered)} renders from rlcpp")
    for f in failures[:10]:
        print(f"{name}: {f}", file=sys.stderr)
    print(f"{name}: {len(strings)} strings ({tokens} tokens): ids, ids with special tokens and round trips identical "
          f"to tokenizers/transformers; {len(requests)} chat renders byte-identical to apply_chat_template"
          + (f"; with special tokens rlcpp adds the config's BOS {config_bos} that transformers 5 leaves out "
             f"({bos_only} strings)" if bos_only else "")
          if not failures else f"{name}: {len(failures)} FAILURES (first above)")
    return 1 if failures else 0


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "corpus":
        for s in corpus():
            print(json.dumps(s, ensure_ascii=False))
    elif mode == "chats":
        for r in chats():
            print(json.dumps(r, ensure_ascii=False))
    elif mode == "compare":
        sys.exit(compare(*sys.argv[2:9]))
    else:
        sys.exit(f"unknown mode {mode}")
