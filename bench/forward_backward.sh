#!/usr/bin/env bash
# bench/forward_backward: forward and forward+backward tokens/s of rlcpp (build/bench/bench_forward)
# and of the PyTorch-eager anchor (bench/anchors/torch_forward_backward.py, the pinned torch wheel, in rlcpp's Python environment)
# on the same Qwen2.5-0.5B shape and the same cores, interleaved in one run, and the ratios. The
# anchor reports the min/median/max of its repetitions; rlcpp its best. Both take the fp32 log-prob
# of every position (rlcpp through its chunked head, the anchor through full logits and cross-entropy).
#   bench/forward_backward.sh [BUILD_DIR]
# Env: LENGTHS ("256 1024"), BATCH (1), LAYERS (24), REPS (3), RATIOS (a file to which
# bench/all.sh's ratio rows are appended).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
lengths=${LENGTHS:-256 1024} batch=${BATCH:-1} layers=${LAYERS:-24} reps=${REPS:-3}
anchor=$src/bench/anchors/torch_forward_backward.py
[ -x "$build/bench/bench_forward" ] || { echo "bench/forward_backward.sh: $build/bench/bench_forward is missing: cmake --build $build --target bench_forward" >&2; exit 2; }
py=$(bash "$src/scripts/python_env.sh" --python)  # torch from the pinned wheel, as rlcpp's LibTorch
"$py" -c 'import torch' 2>/dev/null || { echo "bench/forward_backward.sh: the anchor needs torch in rlcpp's Python environment ($py): make deps" >&2; exit 2; }

printf '%-14s %12s %14s %8s %12s %14s %8s\n' "B x T" "rlcpp fwd" "torch fwd med" "ratio" "rlcpp f+b" "torch f+b med" "ratio"
for t in $lengths; do
  ours=$("$build/bench/bench_forward" --batch "$batch" --length "$t" --layers "$layers" --repeats "$reps" --skip-memory)
  theirs=$("$py" "$anchor" --batch "$batch" --seq "$t" --layers "$layers" --reps "$reps")
  fwd=$(awk '/^  forward  /{print $2}' <<< "$ours"); fb=$(awk '/^  forward\+backward/{print $2}' <<< "$ours")
  # "fwd+bwd: ... tokens/s min/med/max A/B/C": the median, and the best for the note.
  tfwd=$(awk '/^forward:/{split($NF, v, "/"); print v[2]}' <<< "$theirs"); tfb=$(awk '/^fwd\+bwd:/{split($NF, v, "/"); print v[2]}' <<< "$theirs")
  tfb_best=$(awk '/^fwd\+bwd:/{split($NF, v, "/"); print v[3]}' <<< "$theirs")
  awk -v bt="${batch} x ${t}" -v f="$fwd" -v tf="$tfwd" -v fb="$fb" -v tfb="$tfb" -v best="$tfb_best" 'BEGIN {
    printf "%-14s %12.1f %14.1f %7.2fx %12.1f %14.1f %7.2fx   (torch f+b best %.1f: %.2fx)\n", bt, f, tf, f / tf, fb, tfb, fb / tfb, best, fb / best }'
  if [ -n "${RATIOS:-}" ]; then  # bench/all.sh's rows: benchmark, measure, anchor, rlcpp, anchor figure, unit
    printf 'forward vs PyTorch eager\tforward, %s x %s\tPyTorch eager\t%s\t%s\ttokens/s\n' "$batch" "$t" "$fwd" "$tfwd" >> "$RATIOS"
    printf 'forward vs PyTorch eager\tforward+backward, %s x %s\tPyTorch eager\t%s\t%s\ttokens/s\n' "$batch" "$t" "$fb" "$tfb" >> "$RATIOS"
  fi
done
