#!/bin/bash
# bench/llamacpp.sh: rlcpp's engine and llama.cpp side by side, in one run, on the same random
# Qwen2.5-0.5B-shaped weights, and the ratios. llama.cpp is the anchor of bench/anchors/llamacpp:
# llama-cpp-python (pinned in bench/anchors/requirements.txt, compiled from its sdist for the CPU by
# bash bench/anchors/install.sh into ~/.cache/rlcpp/bench-venv), its low-level C API called from
# llama_bench.py; it is run, not vendored. Beside it, transformers' generate (bench/anchors/
# hf_generate.py, rlcpp's pinned transformers and torch) on the same HF weights, fp32.
#
#   bash bench/llamacpp.sh [BUILD_DIR]
#
# Env: HF (1; 0 leaves transformers' generate out), WORK (default /tmp/rlcpp-llamacpp:
# the models, their GGUF files and the JSON results, kept between runs), LAYERS (24), REPS (3),
# PP (256), TG (64), PAR (8,32,64), PAR_STEPS (32), THREADS (every core), RATIOS (a file to which
# bench/all.sh's ratio rows are appended).
#
# Measured, each the median of REPS runs: pp<N> one prefill of N tokens; tg<N> N decode steps of
# one sequence from an empty cache; par<S>x<N> S sequences decoding together. llama.cpp runs with
# F32 KV cache and flash attention off, on f32 weights and on f16 weights; rlcpp with an fp32 KV
# cache on fp32 weights and on bf16, int8 and fp8 rollout weights (--rollout-dtype; 8-bit with a
# scale per output channel). rlcpp's decode
# steps include sampling from the full vocabulary, and so do transformers' generate calls;
# llama.cpp's bare llama_decode calls do not.
# Also printed: the machine's memory read bandwidth and the fraction batch-1 decode reaches.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ANCHOR=bench/anchors/llamacpp
WORK=${WORK:-/tmp/rlcpp-llamacpp}
LAYERS=${LAYERS:-24} REPS=${REPS:-3} PP=${PP:-256} TG=${TG:-64} PAR=${PAR:-8,32,64} PAR_STEPS=${PAR_STEPS:-32}
THREADS=${THREADS:-$(nproc)}

for bin in rlcpp bench/bench_generate bench/bench_kernels; do
  if [ ! -x "$BUILD/$bin" ]; then
    echo "bench/llamacpp.sh: $BUILD/$bin is missing: make build (or cmake --build $BUILD --target ${bin##*/})" >&2
    exit 2
  fi
done
py=$(bash bench/anchors/install.sh) || exit 2  # the bench environment: llama_cpp, and numpy for the GGUF writer
HF=${HF:-1}

# The weights: `rlcpp init` of the shape, with the repository's small tokenizer (the benchmark
# feeds random ids; the GGUF files carry a synthetic vocabulary of the same size).
mkdir -p "$WORK"
model=$WORK/qwen2.5-0.5b-shape-${LAYERS}l
if [ ! -f "$model/config.json" ]; then
  source bench/qwen_shape.sh
  qwen_shape_model "$BUILD/rlcpp" "$model" models/arith-tiny 896 4864 "$LAYERS" 14 2
fi
for type in f32 f16; do
  [ "$model-$type.gguf" -nt "$model/config.json" ] ||
    "$py" "$ANCHOR/hf_to_gguf.py" "$model" "$model-$type.gguf" --type "$type"
done

llama() {  # weights type
  "$py" "$ANCHOR/llama_bench.py" --model "$model-$1.gguf" --threads "$THREADS" --kv F32 --fa off --reps "$REPS" \
    --pp "$PP" --tg "$TG" --par "$PAR" --par-steps "$PAR_STEPS" --json "$WORK/llama-$1.json"
}
hf() {  # transformers' generate on the HF directory, fp32
  rm -f "$WORK/hf-float32.json"
  [ "$HF" = 1 ] || return 0
  "$py" bench/anchors/hf_generate.py --model "$model" --threads "$THREADS" --reps "$REPS" \
    --pp "$PP" --tg "$TG" --par "$PAR" --par-steps "$PAR_STEPS" --json "$WORK/hf-float32.json"
}
rlcpp() {  # rollout dtype
  RLCPP_KERNEL_THREADS=$THREADS "$BUILD/bench/bench_generate" --model "$model" --llama-workload --rollout-dtype "$1" \
    --reps "$REPS" --pp "$PP" --tg "$TG" --par ${PAR//,/ } --par-steps "$PAR_STEPS" --json "$WORK/rlcpp-$1.json"
}
# Interleaved, so a slow spell of the machine falls on both programs.
llama f32
rlcpp float32
hf
llama f16
rlcpp bfloat16
rlcpp int8
rlcpp fp8
bandwidth=$(RLCPP_KERNEL_THREADS=$THREADS "$BUILD/bench/bench_kernels" --peak --reps 3 |
  sed -n 's/^memory read bandwidth: \([0-9.]*\) GB\/s.*/\1/p')

python3 - "$WORK" "${bandwidth:-0}" "$LAYERS" "${RATIOS:-}" <<'EOF'
import json, os, sys
work, bandwidth, layers, ratios = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def load(name):
    with open(f"{work}/{name}.json") as f:
        return {t["name"]: t["median"] for t in json.load(f)["tests"]}
ll32, ll16, rl32, rl16 = load("llama-f32"), load("llama-f16"), load("rlcpp-float32"), load("rlcpp-bfloat16")
rl8, rlf8 = load("rlcpp-int8"), load("rlcpp-fp8")
hf = load("hf-float32") if os.path.exists(f"{work}/hf-float32.json") else {}
print()
print(f"{'tokens/s (median)':<14} {'llama f32':>10} {'llama f16':>10} {'rlcpp f32':>10} {'rlcpp bf16':>11}"
      f" {'rlcpp int8':>11} {'rlcpp fp8':>10} {'f32/llama f32':>14} {'bf16/llama f32':>15} {'bf16/llama f16':>15}"
      f" {'int8/llama f32':>15} {'fp8/llama f32':>14} {'int8/bf16':>10} {'fp8/bf16':>9}")
names = [n for n in ll32 if n in rl32]
for name in names:
    print(f"{name:<14} {ll32[name]:10.2f} {ll16.get(name, 0):10.2f} {rl32[name]:10.2f} {rl16.get(name, 0):11.2f}"
          f" {rl8.get(name, 0):11.2f} {rlf8.get(name, 0):10.2f}"
          f" {rl32[name] / ll32[name]:13.2f}x {rl16.get(name, 0) / ll32[name]:14.2f}x"
          f" {rl16.get(name, 0) / max(ll16.get(name, 0), 1e-9):14.2f}x"
          f" {rl8.get(name, 0) / ll32[name]:14.2f}x {rlf8.get(name, 0) / ll32[name]:13.2f}x"
          f" {rl8.get(name, 0) / max(rl16.get(name, 0), 1e-9):9.2f}x {rlf8.get(name, 0) / max(rl16.get(name, 0), 1e-9):8.2f}x")
if hf:
    print(f"\n{'tokens/s (median)':<14} {'HF generate f32':>16} {'rlcpp f32':>10} {'f32/HF f32':>11}")
    for name in names:
        if name in hf:
            print(f"{name:<14} {hf[name]:16.2f} {rl32[name]:10.2f} {rl32[name] / hf[name]:10.2f}x")
if ratios:  # bench/all.sh's rows: benchmark, measure, anchor, rlcpp, anchor figure, unit
    with open(ratios, "a") as f:
        for name in names:
            f.write(f"engine vs llama.cpp\t{name}, f32 weights\tllama.cpp f32\t{rl32[name]}\t{ll32[name]}\ttokens/s\n")
        for name in names:
            if name in rl16 and name in ll16:
                f.write(f"engine vs llama.cpp\t{name}, bf16 weights\tllama.cpp f16\t{rl16[name]}\t{ll16[name]}\ttokens/s\n")
        for label, figures in [("int8", rl8), ("fp8", rlf8)]:
            for name in names:
                if name in figures:
                    f.write(f"engine vs llama.cpp\t{name}, {label} weights\tllama.cpp f32\t{figures[name]}\t{ll32[name]}\ttokens/s\n")
        for name in names:
            if name in hf:
                f.write(f"engine vs HF generate\t{name}, f32 weights\tHF generate f32\t{rl32[name]}\t{hf[name]}\ttokens/s\n")
# Every weight is read once per batch-1 token (the tied embedding as the head).
params = 151936 * 896 + layers * (896 * (896 + 2 * 128) + (896 + 2 * 128) + 896 * 896 + 3 * 896 * 4864 + 2 * 896) + 896
tg = next((n for n in rl32 if n.startswith("tg")), None)
if bandwidth > 0 and tg:
    print(f"\nmemory read bandwidth {bandwidth:.1f} GB/s; batch-1 decode reads the weights at:")
    for label, tps, size in [("rlcpp f32", rl32[tg], 4), ("rlcpp bf16", rl16[tg], 2), ("rlcpp int8", rl8[tg], 1),
                             ("rlcpp fp8", rlf8[tg], 1),
                             ("llama f32", ll32[tg], 4), ("llama f16", ll16[tg], 2)]:
        gbs = tps * params * size / 1e9
        print(f"  {label:<11} {gbs:6.1f} GB/s  ({gbs / bandwidth:.0%} of the read bandwidth)")
EOF
