#!/usr/bin/env bash
# bench/all.sh (`make bench`): every side-by-side benchmark of rlcpp against its anchors in one run,
# then one table of ratios, rlcpp over each anchor from this run, under a description of the machine
# (CPU, SIMD features, cores, measured memory read bandwidth and fp32 FMA peak, LibTorch and its BLAS).
#   bash bench/all.sh [BUILD_DIR]
#
# Runs, in this order, each printing its own table as it goes (and into $WORK/NAME.log):
#   llamacpp          bench/llamacpp.sh: the engine vs llama.cpp (llama-cpp-python) and transformers'
#                     generate (prefill, decode of 1 and of S sequences)
#   forward_backward  bench/forward_backward.sh: forward and forward+backward vs PyTorch eager
#   train_step        ANCHOR="torch trl" bench/train_step.sh -- -kl 0: a GRPO step, phase by phase, vs
#                     PyTorch eager and vs TRL's GRPOTrainer (and peak RSS)
#   trl_learning      bench/trl_learning.sh: GRPO on the arith task from models/arith-tiny, rlcpp vs TRL:
#                     held-out accuracy after the same steps, time per step, peak RSS
# It installs the anchors' Python packages (bash bench/anchors/install.sh: TRL, llama-cpp-python
# compiled for the CPU, into ~/.cache/rlcpp/bench-venv over rlcpp's environment); PyTorch,
# transformers and numpy come from `make deps` (the pinned wheels of rlcpp's Python environment,
# the LibTorch rlcpp runs too).
# The default workloads are those of the README's figures; a full run takes hours on 2 cores.
#
# Env: QUICK=1 (a smoke run of minutes: 2 layers, 1 rep, short sequences), ONLY (a subset of the
# names above), WORK (default /tmp/rlcpp-bench: logs, models kept between runs), and the scripts'
# own knobs, which pass through: LAYERS (24), REPS (3), THREADS, PP, TG, PAR, PAR_STEPS (llamacpp),
# LENGTHS, BATCH (forward_backward), STEPS, G, TBS, MNT, TMBS (train_step), LEARN_STEPS, LEARN_G,
# LEARN_TBS, LEARN_TMBS, LEARN_MNT, LEARN_LR, LEARN_KL, EVAL_LIMIT (trl_learning), HF=0 (llamacpp
# without the transformers column).
# Exit status: 0 when every benchmark ran or was skipped for want of a tool (exit 77), 1 when one
# failed (the table says which), 2 when something to run them with is missing.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
build=$(realpath -m "${1:-build}")
work=${WORK:-/tmp/rlcpp-bench}
only=${ONLY:-llamacpp forward_backward train_step trl_learning}
for name in $only; do
  case $name in llamacpp|forward_backward|train_step|trl_learning) ;;
    *) echo "bench/all.sh: ONLY names $name; the benchmarks are llamacpp, forward_backward, train_step and trl_learning" >&2
       exit 2 ;;
  esac
done
if [ "${QUICK:-0}" = 1 ]; then
  export LAYERS=${LAYERS:-2} REPS=${REPS:-1} PP=${PP:-32} TG=${TG:-8} PAR=${PAR:-4} PAR_STEPS=${PAR_STEPS:-8}
  export LENGTHS=${LENGTHS:-64} STEPS=${STEPS:-2} G=${G:-2} TBS=${TBS:-1} MNT=${MNT:-8}
  export LEARN_STEPS=${LEARN_STEPS:-2} LEARN_G=${LEARN_G:-4} LEARN_TBS=${LEARN_TBS:-4} EVAL_LIMIT=${EVAL_LIMIT:-16}
fi

for bin in rlcpp bench/bench_kernels bench/bench_generate bench/bench_forward; do
  [ -x "$build/$bin" ] || { echo "bench/all.sh: $build/$bin is missing: make build" >&2; exit 2; }
done
py=$(bash "$src/scripts/python_env.sh" --python)  # the pinned torch wheel: rlcpp's LibTorch and the anchors'
"$py" -c 'import torch, numpy' 2>/dev/null ||
  { echo "bench/all.sh: the anchors need torch and numpy in rlcpp's Python environment ($py): make deps" >&2; exit 2; }
case " $only " in *" llamacpp "*|*" train_step "*|*" trl_learning "*)
  bash bench/anchors/install.sh > /dev/null || exit 2 ;;  # once, before any timing; idempotent
esac
mkdir -p "$work"
ratios=$work/ratios.tsv status=$work/status.tsv
: > "$ratios"; : > "$status"

# The machine, measured before the benchmarks load it.
{
  echo "cpu	$(awk -F': ' '/^model name|^Model name|^Hardware/ {print $2; exit}' /proc/cpuinfo)"
  echo "flags	$(awk -F': ' '/^flags|^Features/ {print $2; exit}' /proc/cpuinfo)"
  echo "cpus	$(nproc)"
  echo "cores	$(lscpu 2>/dev/null | awk -F': *' '/^Core\(s\) per socket/ {c = $2} /^Socket\(s\)/ {s = $2} END {if (c && s) print c * s}')"
  peak=$("$build/bench/bench_kernels" --peak --reps 3)
  echo "bandwidth	$(sed -n 's/^memory read bandwidth: \([0-9.]*\) GB\/s.*/\1/p' <<< "$peak")"
  echo "fma	$(sed -n 's/^fp32 FMA peak: \([0-9.]*\) GFLOP\/s.*/\1/p' <<< "$peak")"
  echo "simd	$(sed -n 's/^kernels: \([^ ]*\) .*/\1/p' <<< "$peak")"
  echo "kernel_threads	$(sed -n 's/^kernels: .*, \([0-9]*\) kernel threads.*/\1/p' <<< "$peak")"
  # rlcpp and the PyTorch anchors run the same LibTorch (the pinned wheel): its version and BLAS.
  echo "torch	$("$py" -c 'import torch; print(torch.__version__, "MKL" if torch.backends.mkl.is_available() else "no MKL", "CPU capability", torch.backends.cpu.get_cpu_capability())')"
} > "$work/machine.tsv"

run() {  # NAME COMMAND...: the command's output to the terminal and NAME.log; its exit status to status.tsv
  local name=$1; shift
  case " $only " in *" $name "*) ;; *) return 0 ;; esac
  echo; echo "== $name: $*"
  local rc=0
  RATIOS=$ratios "$@" 2>&1 | tee "$work/$name.log" || rc=${PIPESTATUS[0]}
  printf '%s\t%s\n' "$name" "$rc" >> "$status"
}
run llamacpp env WORK="$work/llamacpp" bash bench/llamacpp.sh "$build"
run forward_backward bash bench/forward_backward.sh "$build"
run train_step env ANCHOR="torch trl" bash bench/train_step.sh "$build/rlcpp" -- -kl 0
run trl_learning bash bench/trl_learning.sh "$build/rlcpp"

python3 - "$work" <<'PY'
import json, os, sys
work = sys.argv[1]
machine = dict(line.rstrip("\n").split("\t", 1) for line in open(f"{work}/machine.tsv"))
flags = set(machine["flags"].split())
# The features that decide which kernels run, as the vendors name them.
features = [name for flag, name in [
    ("avx2", "AVX2"), ("fma", "FMA"), ("f16c", "F16C"), ("avx512f", "AVX-512F"), ("avx512bw", "AVX-512BW"),
    ("avx512vl", "AVX-512VL"), ("avx512_vnni", "AVX-512-VNNI"), ("avx512_bf16", "AVX-512-BF16"),
    ("avx512_fp16", "AVX-512-FP16"), ("avx_vnni", "AVX-VNNI"), ("amx_tile", "AMX"), ("amx_bf16", "AMX-BF16"),
    ("amx_int8", "AMX-INT8"), ("asimd", "NEON"), ("asimddp", "DOTPROD"), ("bf16", "BF16"), ("i8mm", "I8MM"),
    ("sve", "SVE"), ("sve2", "SVE2"), ("sme", "SME")] if flag in flags]
cores = machine["cores"]
print("\n" + "=" * 100)
print("rlcpp over its anchors, all from this run (ratio above 1: rlcpp faster or smaller; accuracy: the difference)")
print(f"  CPU        {machine['cpu'] or 'unknown'}: {machine['cpus']} CPUs to run on"
      + (f", {cores} physical cores" if cores else ""))
print(f"  features   {' '.join(features) or 'none of note'}")
print(f"  measured   memory read {machine['bandwidth'] or '?'} GB/s, fp32 FMA peak {machine['fma'] or '?'} GFLOP/s"
      f" ({machine['simd']}, {machine['kernel_threads']} threads; bench_kernels --peak)")
print(f"  LibTorch   {machine['torch']} (rlcpp and the PyTorch anchors alike)")
statuses = dict(line.split() for line in open(f"{work}/status.tsv"))
llama_json = f"{work}/llamacpp/llama-f32.json"
if statuses.get("llamacpp") == "0" and os.path.exists(llama_json):  # this run's, not a stale file
    print(f"  llama.cpp  {json.load(open(llama_json)).get('systemInfo', '').strip()}")
print()
print(f"  {'benchmark':<28} {'measure':<30} {'anchor':<15} {'rlcpp':>14} {'anchor':>14} {'ratio':>7}")
rows = [line.rstrip("\n").split("\t") for line in open(f"{work}/ratios.tsv") if line.strip()]
last = None
for bench, measure, anchor, ours, theirs, unit in rows:
    ours, theirs = float(ours), float(theirs)
    label = bench if bench != last else ""
    last = bench
    fmt = {"s": lambda v: f"{v:.2f} s", "MiB": lambda v: f"{v:.0f} MiB",
           "acc": lambda v: f"{100 * v:.1f} %"}.get(unit, lambda v: f"{v:.1f} tok/s")
    if unit == "acc":  # held-out accuracy: rlcpp's minus the anchor's, in points
        print(f"  {label:<28} {measure:<30} {anchor:<15} {fmt(ours):>14} {fmt(theirs):>14} {100 * (ours - theirs):+5.1f}pt")
        continue
    if (unit == "s" and (ours < 0.01 or theirs < 0.01)) or ours <= 0 or theirs <= 0:  # not run (on-policy: no old log-probs)
        print(f"  {label:<28} {measure:<30} {anchor:<15} {'skipped':>14} {fmt(theirs):>14} {'':>7}")
        continue
    # times and memory: anchor over rlcpp; rates: rlcpp over anchor
    ratio = theirs / ours if unit in ("s", "MiB") else ours / theirs
    print(f"  {label:<28} {measure:<30} {anchor:<15} {fmt(ours):>14} {fmt(theirs):>14} {ratio:6.2f}x")
failed = False
for name, rc in statuses.items():
    if rc == "77":
        print(f"  {name}: skipped (something it needs is missing; see {work}/{name}.log)")
    elif rc != "0":
        failed = True
        print(f"  {name}: FAILED with exit status {rc}; see {work}/{name}.log")
print("=" * 100)
sys.exit(1 if failed else 0)
PY
