#!/usr/bin/env bash
# bench/pp: the trainer's step under pipeline parallelism (bench_pp) at each pipeline size, every
# size given the same cores (each rank an equal share): step time, peak RSS per rank, MB each
# stage sends per step, and the measured bubble against 1F1B's (p-1)/(m+p-1).
#   bench/pp.sh [BUILD_DIR]
# Env: SIZES ("1 2 4"), LAYERS (24), MICROS (8), TOKENS (64), STEPS (2), BALANCE (work; time:
# measured at start-up), MPIEXEC (mpirun).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:-$src/build}")
sizes=${SIZES:-1 2 4} layers=${LAYERS:-24} micros=${MICROS:-8} tokens=${TOKENS:-64} steps=${STEPS:-2}
balance=${BALANCE:-work}
mpiexec=${MPIEXEC:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(nproc)
echo "bench_pp: Qwen2.5-0.5B shape, $layers layers, fp32, $cores cores shared by the stages"
for p in $sizes; do
  threads=$(( cores / p > 0 ? cores / p : 1 ))
  "$mpiexec" --oversubscribe -np "$p" -x OMP_NUM_THREADS="$threads" -x RLCPP_KERNEL_THREADS="$threads" \
    "$build/bench/bench_pp" --layers "$layers" --micro-batches "$micros" --tokens "$tokens" --steps "$steps" --balance "$balance" ||
    echo "pp $p failed"
done
