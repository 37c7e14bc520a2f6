#!/usr/bin/env python3
"""A toy reward a tiny random model can attain: the fraction of digits among the first 8
characters of the response (about 4% by chance over a byte vocabulary). External-reward protocol:
one JSON request per line in, one {"reward": r} line out."""
import json
import sys

for line in sys.stdin:
    if not line.strip():
        continue
    head = json.loads(line).get("response", "")[:8]
    print(json.dumps({"reward": sum(ch.isdigit() for ch in head) / 8.0}), flush=True)
