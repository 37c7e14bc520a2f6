#!/usr/bin/env python3
"""A deterministic environment for the multi-turn tests (--env-cmd): the model answers a product
question; a boxed right answer ends the episode with reward 1, a wrong one gets one more try
("Not quite. Try again, with the calculator.") and then ends with reward 0. The start adds a first
user message. With --crash-at N it exits on its N-th step request (a crashing environment).
Speaks rlcpp's JSON lines: start, step, end."""
import json
import sys

crash_at = int(sys.argv[sys.argv.index("--crash-at") + 1]) if "--crash-at" in sys.argv else 0
answers, steps = {}, 0
for line in sys.stdin:
    request = json.loads(line)
    op, episode = request["op"], request["episode"]
    if op == "start":
        answers[episode] = request["record"]["gt_answer"]
        reply = {"observation": "Give the answer as \\boxed{N}."}
    elif op == "step":
        steps += 1
        if crash_at and steps >= crash_at:
            sys.exit(3)
        right = "\\boxed{" + answers[episode] + "}" in request["assistant"]
        if right or request["turn"] >= 1:
            reply = {"observation": None, "reward": 1.0 if right else 0.0, "done": True}
        else:
            reply = {"observation": "Not quite. Try again, with the calculator.", "role": "user", "reward": 0.0, "done": False}
    else:
        answers.pop(episode, None)
        reply = {}
    print(json.dumps(reply), flush=True)
