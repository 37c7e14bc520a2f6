# Sourced by the shell tests after they resolve their arguments: `here` (the tests folder),
# `fixtures`, a scratch directory `tmp` that becomes the working directory and is removed at exit
# (with `cleanup_extra`, if the test defines it, run first), and ok/bad reporting into `failed`.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fixtures=${RLCPP_FIXTURES:-${RLCPP_DEFAULT_FIXTURES:-}}
tmp=$(mktemp -d)
trap 'declare -F cleanup_extra > /dev/null && cleanup_extra; rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
failed=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; failed=1; }

# For the tests that run mpirun: as root too (CI), more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# `rlcpp train` ($rlcpp) under mpirun ($mpiexec) with one LibTorch thread per process (ranks share
# the cores; also makes runs comparable).
run_mpi() { local np=$1; shift; timeout 300 "$mpiexec" --oversubscribe -x OMP_NUM_THREADS=1 -np "$np" "$rlcpp" train "$@"; }
# metrics.jsonl without wall-clock and mode-specific fields, for comparing runs
metrics_of() { python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    for k in ("time", "tokens_per_s", "staleness", "weight_sync"): d.pop(k, None)
    print(json.dumps(d, sort_keys=True))' "$1"; }
