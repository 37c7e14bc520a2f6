#!/usr/bin/env python3
"""The bundled tool-use task: products of a three-digit and a two-digit number ("What is 417 * 86?"),
which the tiny model cannot compute in its head, with a calculator it may call. A call is written
the way Qwen2.5 and Qwen3 write them (Hermes' format):

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "417 * 86"}}
    </tool_call>

and the calculator's answer comes back as a `tool` turn; the final answer is \\boxed{35862}. Every
record carries the same short system message, so prompts are the same in SFT, RL and evaluation.

The SFT data comes from a teacher that calls the calculator only sometimes (--call 0.3): otherwise
it writes the right product at once, which the model imitates but cannot compute. A model
fine-tuned on it calls the tool about as often, and guesses the rest; GRPO rewarded by the boxed
answer (-rt boxed --tools calculator) can learn that calling pays. Deterministic from a seed
(Python's random.Random, stable across Python 3 versions); the splits are disjoint.

Writes, into OUT_DIR:
  train.jsonl  RL prompts  {"messages": [system, {"role": "user", "content": "What is 417 * 86?"}], "gt_answer": "35862"}
  test.jsonl   held-out prompts
  sft.jsonl    chats: [system, user, assistant] or [system, user, assistant (call), tool, assistant]
Usage: make_data.py OUT_DIR [--seed 0] [--train 2000] [--test 400] [--sft 8000] [--call 0.3]
"""
import argparse
import json
import os
import random

SYSTEM = {"role": "system", "content": "You may call the calculator. Put the final answer in \\boxed{}."}


def call_text(a, b):
    arguments = {"name": "calculator", "arguments": {"expression": f"{a} * {b}"}}
    return "<tool_call>\n" + json.dumps(arguments) + "\n</tool_call>"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--test", type=int, default=400)
    parser.add_argument("--sft", type=int, default=8000)
    parser.add_argument("--call", type=float, default=0.3, help="share of SFT chats that call the calculator")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    pairs = [(a, b) for a in range(100, 1000) for b in range(10, 100)]
    rng.shuffle(pairs)
    need = args.train + args.test + args.sft
    if need > len(pairs):
        raise SystemExit(f"make_data.py: {need} problems asked of {len(pairs)}; ask for fewer")
    splits = {"train": pairs[:args.train], "test": pairs[args.train:args.train + args.test],
              "sft": pairs[args.train + args.test:need]}
    os.makedirs(args.out_dir, exist_ok=True)
    for name in ("train", "test"):
        with open(os.path.join(args.out_dir, name + ".jsonl"), "w") as f:
            for a, b in splits[name]:
                record = {"messages": [SYSTEM, {"role": "user", "content": f"What is {a} * {b}?"}], "gt_answer": str(a * b)}
                f.write(json.dumps(record) + "\n")
    calls = 0
    with open(os.path.join(args.out_dir, "sft.jsonl"), "w") as f:
        for a, b in splits["sft"]:
            messages = [SYSTEM, {"role": "user", "content": f"What is {a} * {b}?"}]
            answer = {"role": "assistant", "content": f"\\boxed{{{a * b}}}"}
            if rng.random() < args.call:
                calls += 1
                messages += [{"role": "assistant", "content": call_text(a, b)}, {"role": "tool", "content": str(a * b)}]
            f.write(json.dumps({"messages": messages + [answer]}) + "\n")
    print(f"{args.out_dir}: train {args.train}, test {args.test}, sft {args.sft} ({calls} calling the calculator)")


if __name__ == "__main__":
    main()
