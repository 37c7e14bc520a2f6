#!/usr/bin/env python3
"""The bundled code task: one-line Python functions of one integer, described in words, whose
right answer needs parentheses. "Write f(n): add 2 to n, then multiply by 3." is answered by
`return (n+2)*3`: two operations applied in turn (add, subtract or multiply by a constant, then
add, subtract, multiply, square, take the remainder or divide rounding down), with the argument's
name varied. The function is always f: copying a name from "Write g(n)" to "def g(n)" is, for the
tiny model, a skill of its own that a few minutes of SFT do not reliably reach. Every record
carries a short system message asking for a ```python block, so prompts are the same in SFT, RL
and evaluation without a --system-prompt.

The SFT data comes from a sloppy teacher: it writes the first step in parentheses,
`return (n+2)*3`, but with probability --forget (0.6) it leaves them out, `return n+2*3`: a valid
program with the wrong value when the second operation binds tighter than the first (add then
multiply, multiply then square, ...). Compositions that need none (multiply then add, add then
subtract) are right either way. Four in five problems (--with-parentheses 0.8) need parentheses,
in every split. A model fine-tuned on it learns the same habit; RL rewarded by running its
programs against the tests (GRPO on train.jsonl) can unlearn it. (A teacher that wrote
parentheses only where needed would make GRPO's first lesson "open a parenthesis" everywhere,
and the model, never shown `(n*2)+5`, would lose the problems that need none on the way.)
Deterministic from a seed (Python's random.Random, stable across Python 3 versions).

Writes, into OUT_DIR:
  train.jsonl  RL prompts  {"messages": [system, {"role": "user", "content": "Write f(x): add 2 to x, then multiply by 3."}],
                            "gt_answer": "", "test_code": "assert f(-7) == -15\\n...", "entry_point": "f"}
               five asserts at sorted inputs (0, two negatives, two positives); the program
               without parentheses, where they are needed, fails at least two of them
  test.jsonl   held-out prompts, disjoint from train and sft
  sft.jsonl    chats with the teacher's answers ("```python\\ndef f(x):\\n    return (x+2)*3\\n```"), for `rlcpp sft`
Usage: make_data.py OUT_DIR [--seed 0] [--train 2000] [--test 400] [--sft 2000] [--forget 0.6]
                   [--with-parentheses 0.8]
"""
import argparse
import json
import os
import random

SYSTEM = {"role": "system", "content": "Answer with a ```python code block."}
FUNCTION, ARGUMENTS = "f", ["x", "y", "z", "n", "k", "m", "t", "s", "u"]
# name: (Python operator, precedence, the constants it takes). The first operation is one of
# FIRST, the second one of SECOND; squaring takes the fixed exponent 2.
OPS = {
    "add": ("+", 1, range(1, 13)),
    "sub": ("-", 1, range(1, 13)),
    "mul": ("*", 2, range(2, 10)),
    "mod": ("%", 2, range(2, 10)),
    "div": ("//", 2, range(2, 10)),
    "square": ("**", 3, [2]),
}
FIRST, SECOND = ["add", "sub", "mul"], ["add", "sub", "mul", "mod", "div", "square"]


def describe_first(op, c, v):
    return {"add": f"add {c} to {v}", "sub": f"subtract {c} from {v}", "mul": f"multiply {v} by {c}"}[op]


def describe_second(op, c):
    return {"add": f"add {c}", "sub": f"subtract {c}", "mul": f"multiply by {c}",
            "mod": f"take the remainder modulo {c}", "div": f"divide by {c}, rounding down",
            "square": "square the result"}[op]


def needs_parentheses(op1, op2):
    """Whether `v op1 c1 op2 c2` computes something else than `(v op1 c1) op2 c2` (for constants
    that make the difference show): the second operator binds tighter than the first."""
    return OPS[op2][1] > OPS[op1][1]


def expressions(problem):
    """The teacher's expression, the first step in parentheses, and the sloppy one without them
    (which computes the same when they are not needed)."""
    _, v, op1, c1, op2, c2 = problem
    inner, outer = f"{v}{OPS[op1][0]}{c1}", f"{OPS[op2][0]}{c2}"
    return f"({inner}){outer}", inner + outer


def value(expression, v, x):
    return eval(expression, {"__builtins__": {}}, {v: x})


def problems(parentheses):
    """Every (function, argument, op1, c1, op2, c2) that needs parentheses, or every one that needs none."""
    return [(FUNCTION, v, op1, c1, op2, c2) for v in ARGUMENTS for op1 in FIRST for c1 in OPS[op1][2]
            for op2 in SECOND for c2 in OPS[op2][2] if needs_parentheses(op1, op2) == parentheses]


def test_inputs(rng, problem):
    """Sorted inputs: 0, two negatives and two positives; the sloppy program, where it differs,
    gets at least two of them wrong."""
    right, sloppy = expressions(problem)
    v, differs = problem[1], needs_parentheses(problem[2], problem[4])
    while True:
        xs = sorted([0] + rng.sample(range(-9, 0), 2) + rng.sample(range(1, 10), 2))
        if not differs or sum(value(right, v, x) != value(sloppy, v, x) for x in xs) >= 2:
            return xs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--test", type=int, default=400)
    parser.add_argument("--sft", type=int, default=2000)
    parser.add_argument("--forget", type=float, default=0.6)
    parser.add_argument("--with-parentheses", type=float, default=0.8, help="share of problems that need them")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    # Each split draws the same share of problems that need parentheses, uniformly and without
    # repeats from the whole space, so the splits are disjoint and alike.
    pools = {True: problems(True), False: problems(False)}
    for pool in pools.values():
        rng.shuffle(pool)

    def fresh(n):
        n_with = round(n * args.with_parentheses)
        if n_with > len(pools[True]) or n - n_with > len(pools[False]):
            raise SystemExit(f"make_data.py: {n} more problems asked of {len(pools[True])} with parentheses and "
                             f"{len(pools[False])} without left; ask for fewer (--train, --test, --sft)")
        out = [pools[True].pop() for _ in range(n_with)] + [pools[False].pop() for _ in range(n - n_with)]
        rng.shuffle(out)
        return out

    test, train, sft = fresh(args.test), fresh(args.train), fresh(args.sft)
    os.makedirs(args.out_dir, exist_ok=True)

    def question(p):
        f, v, op1, c1, op2, c2 = p
        text = f"Write {f}({v}): {describe_first(op1, c1, v)}, then {describe_second(op2, c2)}."
        return {"role": "user", "content": text}

    def prompt(p):
        f, v = p[0], p[1]
        right, _ = expressions(p)
        tests = "\n".join(f"assert {f}({x}) == {value(right, v, x)}" for x in test_inputs(rng, p))
        return {"messages": [SYSTEM, question(p)], "gt_answer": "", "test_code": tests, "entry_point": f}

    def answer(p, forget):
        right, sloppy = expressions(p)
        return f"```python\ndef {p[0]}({p[1]}):\n    return {sloppy if forget else right}\n```"

    def write(name, rows):
        with open(os.path.join(args.out_dir, name), "w") as out:
            for row in rows:
                out.write(json.dumps(row) + "\n")

    write("test.jsonl", [prompt(p) for p in test])
    write("train.jsonl", [prompt(p) for p in train])
    write("sft.jsonl", [{"messages": [SYSTEM, question(p),
                                      {"role": "assistant", "content": answer(p, rng.random() < args.forget)}]}
                        for p in sft])


if __name__ == "__main__":
    main()
