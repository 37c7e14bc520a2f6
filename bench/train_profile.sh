#!/usr/bin/env bash
# bench/train_profile: where the train phase's time goes, by profiler. The GRPO step of
# bench/train_step.sh (Qwen2.5-0.5B shape, real Qwen tokenizer, GSM8K prompts) runs as `-t 1 -i 1`
# under mpirun, so the trainer is a process of its own; `perf record` samples that process only and
# each sample is put in one category by its symbol and library: the products (OpenBLAS), attention,
# the log-prob head, element-wise ATen kernels, rlcpp's own kernels, the optimizer, autograd's
# engine, memory (allocation, copies, page faults), the trainer's waits (MPI polling: the rollout
# worker's generation, not training) and the rest. Prints each category's share of the trainer's
# busy samples and its milliseconds per step, against the metrics' train phase; with the
# trace spans of the step (--profile-dir) beside them.
#   bench/train_profile.sh [RLCPP_BINARY] [-- extra train flags]
# Env: STEPS (4), G (4), TBS (2), MNT (64), LAYERS (24), TMBS (G), FREQ (499 samples/s), MPIEXEC (mpirun),
# PERF_FLAGS (more `perf record` flags, e.g. -g), KEEP=DIR (keep the work directory: perf.data, trace, runs).
# CTest runs it once with LAYERS=2 (bench_train_profile) so it keeps working.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
rlcpp=$(realpath "${1:-$src/build/rlcpp}"); shift || true; [ "${1:-}" = "--" ] && shift
steps=${STEPS:-4} g=${G:-4} tbs=${TBS:-2} mnt=${MNT:-64} layers=${LAYERS:-24} tmbs=${TMBS:-${G:-4}} freq=${FREQ:-499}
mpiexec=${MPIEXEC:-mpirun}
# Without perf (Debian's linux-perf), or where it may not sample, or without mpirun: exit 77, a
# skipped test for CTest's short sample (bench_train_profile).
perf record -q -o /dev/null true > /dev/null 2>&1 || { echo "bench/train_profile.sh: needs perf (Debian's linux-perf), allowed to sample" >&2; exit 77; }
command -v "$mpiexec" > /dev/null || { echo "bench/train_profile.sh: needs $mpiexec (OpenMPI)" >&2; exit 77; }
tokenizer="$src/tests/data/tokenizers/qwen3"  # the real Qwen tokenizer
work=$(mktemp -d); trap '[ -n "${KEEP:-}" ] && cp -r "$work" "$KEEP"; rm -rf "$work"' EXIT
source "$src/bench/qwen_shape.sh"
qwen_shape_model "$rlcpp" "$work/model" "$tokenizer" 896 4864 "$layers" 14 2 > /dev/null
head -n $((steps * tbs)) "$src/examples/gsm8k/train.jsonl" > "$work/data.jsonl"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
flags=(-m "$work/model" -d "$work/data.jsonl" -a GRPO -kl 0 -g "$g" -tbs "$tbs" -tMbs "$tbs" -tmbs "$tmbs" --mnt "$mnt"
       --max-steps "$steps" -sd "$work/runs" -p bench -lr 1e-6 -t 1 -i 1 --profile-dir "$work/trace" "$@")
echo "rlcpp train -t 1 -i 1: GRPO, $steps steps of $tbs prompts x $g samples, max $mnt new tokens; perf on the trainer"
# MPMD: rank 0 (the trainer) under perf, rank 1 (the rollout worker) as it is.
"$mpiexec" --oversubscribe -x OMP_NUM_THREADS \
  -np 1 perf record ${PERF_FLAGS:-} -F "$freq" -k CLOCK_MONOTONIC -o "$work/perf.data" -q "$rlcpp" train "${flags[@]}" : \
  -np 1 "$rlcpp" train "${flags[@]}" > "$work/log" 2>&1 || { tail -20 "$work/log"; exit 1; }
perf script -i "$work/perf.data" -F time,ip,sym,dso 2> /dev/null > "$work/samples"
python3 - "$work/samples" "$work/runs/bench/metrics.jsonl" "$work/trace" <<'PY'
import bisect, glob, json, re, sys
rows = [r for r in map(json.loads, open(sys.argv[2])) if "step" in r]
later = rows[1:] or rows
train = sum(r["time"]["train"] for r in later) / len(later)
total = sum(r["time"]["total"] for r in later) / len(later)
# The train phase's spans on the trainer after step 1 (steady clock = CLOCK_MONOTONIC, perf's -k).
trace = json.load(open(glob.glob(sys.argv[3] + "/*/trace.rank-0.json")[0]))
origin = trace["otherData"]["steady_clock_origin_us"] / 1e6
steps = sorted((e["ts"], e["dur"]) for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] == "step")
first_after = origin + (steps[0][0] + steps[0][1]) / 1e6 if len(steps) > 1 else 0.0
windows = sorted((origin + e["ts"] / 1e6, origin + (e["ts"] + e["dur"]) / 1e6) for e in trace["traceEvents"]
                 if e.get("ph") == "X" and e["name"] in ("forward_backward", "optimizer")
                 and origin + e["ts"] / 1e6 >= first_after)
starts = [w[0] for w in windows]
span_seconds = sum(b - a for a, b in windows)
# Categories, first match wins: (name, dso pattern, symbol pattern).
rules = [
    ("MPI (gradient and weight traffic, polling)", r"libmpi|libopen-pal|libopen-rte|libucp|libucs|libuct|mca_|libevent|libfabric|libhwloc", r""),
    ("products (OpenBLAS GEMM/GEMV)", r"openblas|libblas", r""),
    ("attention", r"", r"attention|Attention|softmax|Softmax"),
    ("log-prob head", r"", r"logprob|LogProb|log_softmax|logsumexp|LogSoftmax|nll_loss|ExpSum|RowMax"),
    ("optimizer (AdamW)", r"", r"adamw|AdamW|Adam"),
    ("rlcpp kernels (norm, SiLU, RoPE, ...)", r"rlcpp", r"N_AVX|N_SSE|hwy"),
    ("memory: page zeroing and faults", r"\[kernel", r"clear_page|page_fault|do_anonymous|alloc_pages|rmqueue|__tlb|zap_|unmap|folio|lru_|release_pages|handle_mm|do_user_addr|get_page|free_pages|free_unref"),
    ("memory: malloc, copies, fills", r"libc\.so", r"malloc|free|memcpy|memmove|memset|_int_|cfree"),
    ("memory: malloc, copies, fills", r"", r"CPUAllocator|alloc_cpu|free_cpu|copy_|_copy_from|fill_|zero_|BlockCache|block_cache"),
    ("autograd engine and dispatch", r"", r"autograd|Dispatcher|dispatch|OperatorHandle|boxed|c10::impl|VariableHooks|TensorImpl|intrusive_ptr|ThreadLocal|RecordFunction|at::_ops|TensorIterator|TensorBase|c10::"),
    ("element-wise and reductions (ATen)", r"libtorch", r""),
    ("kernel (other)", r"\[kernel", r""),
]
cats, inside, outside = {}, 0, 0
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d.]+):\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
    if not m:
        continue
    t, sym, dso = float(m.group(1)), m.group(2).strip(), m.group(3)
    k = bisect.bisect_right(starts, t) - 1
    if k < 0 or t > windows[k][1]:
        outside += 1
        continue
    inside += 1
    name = "other (libstdc++, rlcpp's own code, unresolved)"
    for cat, dso_re, sym_re in rules:
        if (not dso_re or re.search(dso_re, dso)) and (not sym_re or re.search(sym_re, sym)):
            name = cat
            break
    cats[name] = cats.get(name, 0) + 1
print(f"\nper step (mean of steps {min(2, len(rows))}..{len(rows)}): train phase {train * 1000:.0f} ms of {total * 1000:.0f} ms")
print(f"perf samples in the train phase's spans (forward_backward, optimizer) after step 1: {inside} "
      f"({inside / max(span_seconds, 1e-9):.0f}/s over {span_seconds:.1f} s); {outside} outside them")
print(f"{'category':46s} {'share':>7s} {'ms/step':>8s}")
for name, n in sorted(cats.items(), key=lambda kv: -kv[1]):
    print(f"{name:46s} {100 * n / max(inside, 1):6.1f}% {train * 1000 * n / max(inside, 1):8.0f}")
PY
