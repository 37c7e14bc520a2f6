#!/usr/bin/env python3
"""Checks a Chrome trace written by --profile-dir: the JSON structure Perfetto reads (traceEvents
of complete "X" events with name, ts, dur, pid, tid, and the process_name metadata), that spans on
each thread nest (a span that starts inside another ends inside it), and that the named phases
are present. Usage: check_trace.py FILE PHASE...   prints a summary; exits 1 on a failure."""
import json
import sys
from collections import defaultdict

path, phases = sys.argv[1], sys.argv[2:]
trace = json.load(open(path))
events = trace["traceEvents"]
spans = [e for e in events if e.get("ph") == "X"]
meta = [e for e in events if e.get("ph") == "M" and e.get("name") == "process_name"]
problems = []
if len(meta) != 1 or not meta[0].get("args", {}).get("name"):
    problems.append("no process_name metadata")
for e in spans:
    if not (isinstance(e.get("name"), str) and all(isinstance(e.get(k), int) for k in ("ts", "dur", "pid", "tid"))
            and e["ts"] >= 0 and e["dur"] >= 0):
        problems.append(f"malformed span {e}")
by_thread = defaultdict(list)
for e in spans:
    by_thread[(e["pid"], e["tid"])].append(e)
nested = 0
for key, list_ in by_thread.items():
    list_.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack = []
    for e in list_:
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
            stack.pop()
        if stack:
            parent = stack[-1]
            if e["ts"] + e["dur"] > parent["ts"] + parent["dur"] + 2:  # µs rounding of both
                problems.append(f"{e['name']} at {e['ts']} overlaps {parent['name']} at {parent['ts']} without nesting")
            nested += 1
        stack.append(e)
names = {e["name"] for e in spans}
missing = [p for p in phases if p not in names]
if missing:
    problems.append(f"phases missing: {missing} (present: {sorted(names)})")
print(f"     {path.split('/')[-1]}: {len(spans)} spans on {len(by_thread)} thread(s), {nested} nested, "
      f"phases {sorted(names)}")
for p in problems[:5]:
    print(f"     problem: {p}")
sys.exit(1 if problems or nested == 0 else 0)
