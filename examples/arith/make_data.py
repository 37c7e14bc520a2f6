#!/usr/bin/env python3
"""The bundled task: two-digit addition and subtraction with \\boxed{} answers, in the reference
data format. Deterministic from a seed (Python's random.Random, stable across Python 3 versions).

Writes, into OUT_DIR:
  train.jsonl  RL prompts   {"messages": [{"role": "user", "content": "What is 47 + 38?"}], "gt_answer": "85"}
  test.jsonl   held-out prompts, disjoint from train and sft
  sft.jsonl    chat examples with the assistant's answer, for `rlcpp sft`
Usage: make_data.py OUT_DIR [--seed 0] [--train 4000] [--test 500] [--sft 4000]
"""
import argparse
import json
import os
import random


def problem(rng):
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    if rng.random() < 0.5:
        return f"What is {a} + {b}?", str(a + b)
    a, b = max(a, b), min(a, b)
    return f"What is {a} - {b}?", str(a - b)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=4000)
    parser.add_argument("--test", type=int, default=500)
    parser.add_argument("--sft", type=int, default=4000)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    seen = set()

    def fresh(n):
        out = []
        while len(out) < n:
            question, answer = problem(rng)
            if question in seen:
                continue
            seen.add(question)
            out.append((question, answer))
        return out

    test, train, sft = fresh(args.test), fresh(args.train), fresh(args.sft)
    os.makedirs(args.out_dir, exist_ok=True)

    def write(name, rows):
        with open(os.path.join(args.out_dir, name), "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")

    write("test.jsonl", [{"messages": [{"role": "user", "content": q}], "gt_answer": a} for q, a in test])
    write("train.jsonl", [{"messages": [{"role": "user", "content": q}], "gt_answer": a} for q, a in train])
    write("sft.jsonl", [{"messages": [{"role": "user", "content": q},
                                      {"role": "assistant", "content": f"\\boxed{{{a}}}"}]} for q, a in sft])


if __name__ == "__main__":
    main()
