#!/usr/bin/env python3
"""An external reward for rlcpp (Python 3 standard library only).

rlcpp starts this once (--reward-cmd "python3 examples/rewards/reward_server.py") and writes one
JSON request per line on stdin:
    {"id": 0, "prompt": "...", "response": "...", "gt_answer": "...", "metadata": {...}}
It answers each request, in order, with one JSON line on stdout:
    {"reward": 0.8, "parts": {"has_answer": 1.0, "brevity": -0.2}}
Anything it prints on stderr is kept, and shown if rlcpp has to stop it.

This example rewards responses that contain the ground-truth answer and penalises length beyond
400 characters: an illustration of the protocol, not a recommended reward.
"""
import json
import sys


def score(request):
    response = request.get("response", "")
    answer = str(request.get("gt_answer", "")).strip()
    has_answer = 1.0 if answer and answer in response else 0.0
    brevity = -min(1.0, max(0, len(response) - 400) / 1600.0)
    return {"reward": has_answer + 0.2 * brevity, "parts": {"has_answer": has_answer, "brevity": brevity}}


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            reply = score(json.loads(line))
        except Exception as error:  # a bad request gets a reward of 0 and a note on stderr
            print(f"reward_server: {error}", file=sys.stderr, flush=True)
            reply = {"reward": 0.0}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
