#!/usr/bin/env bash
# bench/train_step: the per-phase time split of `rlcpp train` steps (generate / reward / old+ref
# log-probs / train / sync) on a Qwen2.5-0.5B-shaped random model with the real Qwen tokenizer and
# GSM8K prompts, at a small realistic setting. Prints the mean over the steps after the first, and
# the train phase's model FLOP utilisation against the fp32 FMA peak bench_kernels measures.
#   bench/train_step.sh [RLCPP_BINARY] [-- extra train flags]
# Env: STEPS (4), G (4), TBS (2), MNT (64), LAYERS (24), ALGO (GRPO: KL with a reference model),
# TMBS (G: samples per forward/backward).
# ANCHOR=1 (or torch): then the PyTorch-eager GRPO step of bench/anchors/torch_grpo_step.py (the pinned
# torch wheel) on the same workload (TBS prompts x G samples, prompts of the run's mean length,
# MNT new tokens, micro-batch TMBS, the same cores; no reference model: run with `-- -kl 0`), and
# each phase's ratio. The anchor samples every response to MNT tokens; so does a random-weight model
# here (it rarely stops). RATIOS=FILE appends the side-by-side rows for bench/all.sh.
# ANCHOR=trl (or "torch trl" for both): TRL's GRPOTrainer (bench/anchors/trl_grpo_step.py, the pinned
# trl of bench/anchors/requirements.txt, installed by bench/anchors/install.sh) on the same model
# directory, the run's prompts, G, TBS, TMBS, MNT, learning rate (-lr), loss aggregation
# (--loss-variation: sample_level = TRL's grpo, token_level = dapo, seq_mean_token_sum_norm =
# dr_grpo) and KL (-kl; the preset's 0.01 when not given), with its phases and peak RSS beside
# rlcpp's (GRPO only).
# CTest runs it once with LAYERS=2 (bench_train_step) so it keeps working.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
rlcpp=$(realpath "${1:-$src/build/rlcpp}"); shift || true; [ "${1:-}" = "--" ] && shift
steps=${STEPS:-4} g=${G:-4} tbs=${TBS:-2} mnt=${MNT:-64} layers=${LAYERS:-24} algo=${ALGO:-GRPO} tmbs=${TMBS:-${G:-4}}
tokenizer="$src/tests/data/tokenizers/qwen3"  # the real Qwen tokenizer
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
anchors=" ${ANCHOR:-} "; anchors=${anchors/ 1 / torch }
if [[ $anchors == *" torch "* ]]; then
  py=$(bash "$src/scripts/python_env.sh" --python)  # torch from the pinned wheel, as rlcpp's LibTorch
  "$py" -c 'import torch' 2>/dev/null ||
    { echo "bench/train_step.sh: ANCHOR=1 needs torch in rlcpp's Python environment ($py): make deps" >&2; exit 2; }
  echo "anchor: torch_grpo_step.py --prompts $tbs --group $g --prompt-len $prompt_len --new $mnt --layers $layers --micro $tmbs --steps $steps"
  "$py" "$src/bench/anchors/torch_grpo_step.py" --prompts "$tbs" --group "$g" --prompt-len "$prompt_len" \
    --new "$mnt" --layers "$layers" --micro "$tmbs" --steps "$steps" | tee "$anchor_log"
fi
trl_json=$work/trl.json
if [[ $anchors == *" trl "* ]]; then
  # The run's -lr, -kl and --loss-variation, as the TRL side must use them (the last one given wins).
  lr=1e-6 kl=0.01 loss=sample_level prev=""
  for arg in "$@"; do
    case $prev in -lr|--lr|--learning-rate) lr=$arg ;; -kl|--kl|--kl-coeff) kl=$arg ;; --loss-variation) loss=$arg ;; esac
    prev=$arg
  done
  case $loss in sample_level) loss_type=grpo ;; token_level) loss_type=dapo ;; seq_mean_token_sum_norm) loss_type=dr_grpo ;;
    *) loss_type="" ;; esac
  if [ "${algo^^}" != GRPO ] || [ -z "$loss_type" ]; then
    echo "anchor trl: skipped (it maps -a GRPO with sample_level, token_level or seq_mean_token_sum_norm losses)"
  else
    bench_py=$(bash "$src/bench/anchors/install.sh") || exit 2
    echo "anchor: trl_grpo_step.py step --group $g --tbs $tbs --tmbs $tmbs --mnt $mnt --lr $lr --beta $kl --loss-type $loss_type --steps $steps"
    "$bench_py" "$src/bench/anchors/trl_grpo_step.py" step --model "$work/model" --prompts "$work/data.jsonl" \
      --group "$g" --tbs "$tbs" --tmbs "$tmbs" --mnt "$mnt" --lr "$lr" --beta "$kl" --loss-type "$loss_type" \
      --steps "$steps" --json "$trl_json" | grep -v '^{'
  fi
fi
python3 - "$work/runs/bench/metrics.jsonl" "$(grep 'Maximum resident' "$work/log" | awk '{print $NF}' || true)" "$anchor_log" \
  "${RATIOS:-}" "$work/model/config.json" "$prompt_len" "$((tbs * g))" "${peak:-0}" "$trl_json" <<'PY'
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
if os.path.exists(sys.argv[9]):
    trl = json.load(open(sys.argv[9]))
    theirs = trl["mean"]
    ours = {"generate": mean["generate"], "logprobs": mean["logprobs"], "train": mean["train"], "total": mean["total"]}
    print(f"\nside by side with TRL {trl['trl']} GRPOTrainer (mean of the steps after the first; ratio = TRL / rlcpp,"
          f" above 1: rlcpp faster)")
    print(f"  {'phase':13s} {'TRL':>9s} {'rlcpp':>9s} {'ratio':>7s}")
    for k in ["generate", "logprobs", "train", "total"]:
        ratio = f"{theirs[k] / ours[k]:6.2f}x" if ours[k] >= 0.01 and theirs[k] >= 0.01 else " (skipped: on-policy, no KL)"
        print(f"  {k:13s} {theirs[k]:8.2f}s {ours[k]:8.2f}s {ratio}")
    rss = int(sys.argv[2]) / 1024 if sys.argv[2] else 0
    print(f"  {'peak RSS':13s} {trl['peak_rss_mib']:6.0f} MiB" + (f" {rss:6.0f} MiB {trl['peak_rss_mib'] / rss:6.2f}x" if rss else ""))
    if sys.argv[4]:
        with open(sys.argv[4], "a") as f:
            for k in ["generate", "logprobs", "train", "total"]:
                f.write(f"GRPO step vs TRL\t{k}\tTRL {trl['trl']}\t{ours[k]}\t{theirs[k]}\ts\n")
            if rss:
                f.write(f"GRPO step vs TRL\tpeak RSS\tTRL {trl['trl']}\t{rss}\t{trl['peak_rss_mib']}\tMiB\n")
PY
