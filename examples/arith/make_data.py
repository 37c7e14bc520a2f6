#!/usr/bin/env python3
"""The bundled task: two-digit additions that carry and subtractions that borrow, with \\boxed{}
answers, in the reference data format. Every record carries a short system message asking for
\\boxed{}, so prompts are the same in SFT, RL and evaluation without a --system-prompt.

The SFT data comes from a sloppy teacher: its worked solutions go digit by digit, but with
probability --forget (0.6) it forgets the carry or the borrow, and its answer is then wrong. A
model fine-tuned on it learns the same habit; RL with a verifiable reward (GRPO on train.jsonl)
can unlearn it. Deterministic from a seed (Python's random.Random, stable across Python 3 versions).

Writes, into OUT_DIR:
  train.jsonl  RL prompts   {"messages": [system, {"role": "user", "content": "What is 47 + 38?"}], "gt_answer": "85"}
  test.jsonl   held-out prompts, disjoint from train and sft
  sft.jsonl    chats with the teacher's worked answers ("7+8=15 4+3+1=8 \\boxed{85}"), for `rlcpp sft`
  pairs.jsonl, pairs_test.jsonl
               preference pairs for `rlcpp train-rm` (TRL's conversational form): the right worked
               solution preferred over one with a mistake (see mistaken())
Usage: make_data.py OUT_DIR [--seed 0] [--train 2000] [--test 400] [--sft 2000] [--forget 0.6]
                    [--pairs 4000] [--pairs-test 200]
"""
import argparse
import json
import os
import random

SYSTEM = {"role": "system", "content": "Answer with \\boxed{}."}

def problem(rng):
    """A question that needs a carry (addition) or a borrow (subtraction), and its answer."""
    while True:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if rng.random() < 0.5:
            if a % 10 + b % 10 >= 10:
                return a, "+", b
        else:
            a, b = max(a, b), min(a, b)
            if a % 10 < b % 10:
                return a, "-", b


def worked(a, op, b, forget):
    """The teacher's solution, units first then tens; `forget` drops the carry or the borrow."""
    if op == "+":
        units = a % 10 + b % 10
        tens = a // 10 + b // 10 + (0 if forget else 1)
        carry = "" if forget else "+1"
        return f"{a % 10}+{b % 10}={units} {a // 10}+{b // 10}{carry}={tens} \\boxed{{{tens * 10 + units % 10}}}"
    units = 10 + a % 10 - b % 10
    tens = a // 10 - b // 10 - (0 if forget else 1)
    borrow = "" if forget else "-1"
    return f"{10 + a % 10}-{b % 10}={units} {a // 10}{borrow}-{b // 10}={tens} \\boxed{{{tens * 10 + units}}}"


def mistaken(a, op, b, rng):
    """A worked solution with one mistake, its answer following from it: the forgotten carry or
    borrow (half of them, the teacher's own), else a slip in the units or the tens step with the
    carry kept, or a boxed answer that is not what the steps gave. Preferences over the carry alone
    teach a reward model to look for "+1" and nothing else: a policy trained on it writes the
    carry over wrong digits (reward hacking)."""
    kind = rng.choice(["forget", "forget", "units", "tens", "boxed"])
    if kind == "forget":
        return worked(a, op, b, True)
    slip = rng.choice([-2, -1, 1, 2])
    if op == "+":
        units, tens = a % 10 + b % 10, a // 10 + b // 10 + 1
        if kind == "units":
            units = units + slip if 10 <= units + slip <= 18 else units - slip
        if kind == "tens":
            tens = max(0, tens + slip)
        steps = f"{a % 10}+{b % 10}={units} {a // 10}+{b // 10}+1={tens}"
        answer = tens * 10 + units % 10
    else:
        units, tens = 10 + a % 10 - b % 10, a // 10 - b // 10 - 1
        if kind == "units":
            units = units + slip if 1 <= units + slip <= 9 else units - slip
        if kind == "tens":
            tens = tens + slip if tens + slip >= 0 else tens - slip
        steps = f"{10 + a % 10}-{b % 10}={units} {a // 10}-1-{b // 10}={tens}"
        answer = tens * 10 + units
    if kind == "boxed":
        answer += rng.choice([-10, -1, 1, 10])
    return f"{steps} \\boxed{{{answer}}}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--test", type=int, default=400)
    parser.add_argument("--sft", type=int, default=2000)
    parser.add_argument("--forget", type=float, default=0.6)
    parser.add_argument("--pairs", type=int, default=4000)
    parser.add_argument("--pairs-test", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    seen = set()

    def fresh(n):
        out = []
        while len(out) < n:
            a, op, b = problem(rng)
            if (a, op, b) in seen:
                continue
            seen.add((a, op, b))
            out.append((f"What is {a} {op} {b}?", str(a + b if op == "+" else a - b), (a, op, b)))
        return out

    test, train, sft = fresh(args.test), fresh(args.train), fresh(args.sft)
    os.makedirs(args.out_dir, exist_ok=True)

    def write(name, rows):
        with open(os.path.join(args.out_dir, name), "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")

    write("test.jsonl", [{"messages": [SYSTEM, {"role": "user", "content": q}], "gt_answer": a} for q, a, _ in test])
    write("train.jsonl", [{"messages": [SYSTEM, {"role": "user", "content": q}], "gt_answer": a} for q, a, _ in train])
    write("sft.jsonl", [{"messages": [SYSTEM, {"role": "user", "content": q},
                                      {"role": "assistant", "content": worked(*w, rng.random() < args.forget)}]}
                        for q, a, w in sft])
    # Drawn after the files above, so they stay the same bytes with or without the pairs. The
    # training pairs are on the RL and SFT problems (a reward model is trained on the policy's
    # task); the held-out ones on problems no other file has.
    held_out = fresh(args.pairs_test)
    pool = train + sft
    rng.shuffle(pool)
    pairs = [pool[k % len(pool)] for k in range(args.pairs)] + held_out

    def pair(q, w):
        reply = lambda text: [{"role": "assistant", "content": text}]
        return {"prompt": [SYSTEM, {"role": "user", "content": q}], "chosen": reply(worked(*w, False)),
                "rejected": reply(mistaken(*w, rng))}

    write("pairs.jsonl", [pair(q, w) for q, _, w in pairs[:args.pairs]])
    write("pairs_test.jsonl", [pair(q, w) for q, _, w in pairs[args.pairs:]])


if __name__ == "__main__":
    main()
