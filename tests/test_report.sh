#!/usr/bin/env bash
# `rlcpp report` on a real short run (eval set and rollout logs on), rendered by headless Chromium:
# the page is self-contained (no network, no external scripts), every plot's plotting area holds
# drawn lines (coloured pixels in the screenshot, where the page's layout block says the plot is),
# and the gaps between plots hold none. Usage: test_report.sh RLCPP_BINARY
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_report.sh RLCPP_BINARY}")
source "$(dirname "$0")/lib.sh"
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "FAIL no chromium on the PATH: scripts/deps.sh installs Debian's chromium package"; exit 1
fi

"$here/make_toy_task.sh" "$rlcpp" "$fixtures" || bad toy-task
"$rlcpp" train -m toy -d data.jsonl -g 4 -tbs 2 -tMbs 1 -tmbs 4 --mnt 8 -lr 3e-3 --max-steps 6 -sd runs -p rep \
  --reward-cmd "python3 $here/data/digits_reward.py" -rsd rollouts -ed '{"toy": "data.jsonl"}' -ei 2 > train.log 2>&1 \
  || { bad train; tail -5 train.log; }
# Evaluation during training: -ed every -ei 2 steps and at the end, figures and per-sample files.
if python3 - runs/rep/metrics.jsonl <<'PY'
import json, sys
lines = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
steps = [d["step"] for d in lines if "eval" in d]
e = lines[-1]["eval"]["toy"]
sys.exit(0 if steps == [2, 4, 6] and e["prompts"] == 8 and e["samples"] == 8 and 0 <= e["accuracy"] <= 1
         and all(k in e for k in ("pass_at_n", "maj_at_n", "format_accuracy", "response_length_mean", "truncated_fraction")) else 1)
PY
then
  [ "$(wc -l < runs/rep/eval/toy/step-6.jsonl)" -eq 8 ] && [ -s runs/rep/eval/toy/step-2.jsonl ] && ok eval-during-training \
    || bad eval-during-training-files
else
  bad eval-during-training
fi
"$rlcpp" eval -m toy --eval-dataset '{"a": "data.jsonl", "b": "data.jsonl"}' --eval-n 2 --mnt 8 --json -o evals > evals.json 2> evals.log \
  && python3 -c 'import json,sys; d = json.load(open("evals.json")); sys.exit(0 if list(d) == ["a", "b"] and d["a"]["samples"] == 16 else 1)' \
  && [ "$(wc -l < evals/b.jsonl)" -eq 16 ] && ok eval-command-sets || bad eval-command-sets
"$rlcpp" train -m toy -d data.jsonl -ed '{"x": "missing.jsonl"}' > bad-ed.log 2>&1
[ $? -eq 2 ] && grep -q 'eval-dataset: set "x": no such file missing.jsonl' bad-ed.log && ok eval-set-missing || bad eval-set-missing
"$rlcpp" train -m toy -d data.jsonl -ed 'data.jsonl' > bad-ed2.log 2>&1
[ $? -eq 2 ] && grep -q 'not a JSON map' bad-ed2.log && ok eval-set-malformed || bad eval-set-malformed

"$rlcpp" report runs/rep -o report.html > /dev/null && [ -s report.html ] && ok report-written || bad report-written
"$rlcpp" report runs/nothing > missing.log 2>&1
[ $? -eq 2 ] && grep -q 'runs/nothing: no metrics.jsonl there' missing.log && ok report-missing-run || bad report-missing-run

# Self-contained: no URL but the SVG namespace, no external script, stylesheet or image.
if ! grep -oE '(https?:)?//[a-zA-Z0-9.-]+' report.html | grep -v '^http://www.w3.org$' | grep -q . \
   && ! grep -qiE '<(script|img|link|iframe)[^>]+(src|href)=' report.html \
   && grep -q 'Sample rollouts' report.html && grep -q '<td>best</td>' report.html; then
  ok report-self-contained
else
  bad report-self-contained
fi

# Axes: value ticks are round (equal steps of 1, 2 or 5 times a power of ten, every label a multiple
# of the step), and fraction, time, length, KL and norm plots start at 0.
if python3 - report.html <<'PY'
import math, re, sys
html = open(sys.argv[1]).read()
starts_at_zero = ("Reward and accuracy", "Eval accuracy", "Truncated fraction", "Clip fraction", "Time per step",
                  "Response length", "KL", "Gradient norm", "Learning rate", "Entropy")
bad = []
for svg in re.findall(r'<svg class="plot".*?</svg>', html, re.S):
    title = re.search(r'font-weight="bold" fill="#222">([^<]*)<', svg).group(1)
    ticks = [float(t) for t in re.findall(r'text-anchor="end">([^<]*)</text>', svg)]
    if len(ticks) < 2:
        bad.append((title, "fewer than 2 ticks", ticks)); continue
    steps = [b - a for a, b in zip(ticks, ticks[1:])]
    step = steps[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    if any(abs(s - step) > 1e-6 * step for s in steps) or min(abs(mantissa - m) for m in (1, 2, 5, 10)) > 1e-3 \
       or any(abs(t / step - round(t / step)) > 1e-3 for t in ticks):
        bad.append((title, "not round", ticks))
    if title.startswith(starts_at_zero) and ticks[0] != 0:
        bad.append((title, "does not start at 0", ticks))
    if title.startswith(("Reward and accuracy", "Truncated fraction", "Clip fraction")) and ticks[-1] < 1:
        bad.append((title, "a fraction axis short of 1", ticks))
print("\n".join(map(str, bad)))
sys.exit(1 if bad else 0)
PY
then ok report-round-axes; else bad report-round-axes; fi

"$browser" --headless --no-sandbox --disable-gpu --force-device-scale-factor=1 --hide-scrollbars \
  --window-size=1280,1900 --screenshot="$tmp/shot.png" "file://$tmp/report.html" > browser.log 2>&1
if [ ! -s shot.png ]; then bad screenshot; tail -5 browser.log; exit 1; fi
if python3 - report.html shot.png <<'PY'
import json, re, struct, sys, zlib

def read_png(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4]); kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]; pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw, stride = zlib.decompress(idat), width * channels
    rows, prev, p = [], bytearray(stride), 0
    for _ in range(height):
        f, line = raw[p], bytearray(raw[p + 1:p + 1 + stride]); p += 1 + stride
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]; c = prev[i - channels] if i >= channels else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line); prev = line
    return width, height, channels, rows

html = open(sys.argv[1]).read()
layout = json.loads(re.search(r'<script type="application/json" id="plot-layout">(.*?)</script>', html, re.S).group(1))
width, height, channels, rows = read_png(sys.argv[2])

def coloured(x0, y0, w, h):  # pixels of a line's colour (not white, grey or text black)
    n = 0
    for y in range(y0, min(y0 + h, height)):
        row = rows[y]
        for x in range(x0, min(x0 + w, width)):
            r, g, b = row[x * channels], row[x * channels + 1], row[x * channels + 2]
            if max(r, g, b) - min(r, g, b) > 60: n += 1
    return n

failed = False
for plot in layout:
    n = coloured(plot["x"], plot["y"], plot["width"], plot["height"])
    print(f"     {plot['title']:28s} {n:6d} line pixels")
    failed |= n < 40
gap = coloured(layout[0]["x"] + layout[0]["width"] + 30, layout[0]["y"], 8, layout[0]["height"])  # between the columns
print(f"     {'gap between plots':28s} {gap:6d} line pixels")
sys.exit(1 if failed or gap != 0 or len(layout) < 10 else 0)
PY
then ok plots-drawn-in-browser; else bad plots-drawn-in-browser; fi
exit $failed
