# Sourced by the shell tests after they resolve their arguments: `here` (the tests folder),
# `fixtures`, a scratch directory `tmp` that becomes the working directory and is removed at exit
# (with `cleanup_extra`, if the test defines it, run first), and ok/bad reporting into `failed`.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fixtures=${RLCPP_FIXTURES:-${RLCPP_DEFAULT_FIXTURES:-$here/fixtures}}
if [ ! -f "$fixtures/qwen2-tiny/config.json" ]; then
  echo "FAIL no test fixtures under '$fixtures' (\$RLCPP_FIXTURES, else tests/fixtures): \`make fixtures\` writes them" >&2
  exit 1
fi
# The Python of rlcpp's environment (scripts/python_env.sh): transformers, PEFT, tokenizers, openai.
py=${RLCPP_PYTHON:-$(bash "$here/../scripts/python_env.sh" --python)}
tmp=$(mktemp -d)
trap 'declare -F cleanup_extra > /dev/null && cleanup_extra; rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
failed=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; failed=1; }
# expect NAME EXPECTED_RC PATTERN -- COMMAND...: COMMAND exits with EXPECTED_RC and prints PATTERN (an ERE).
expect() {  # expect NAME EXPECTED_RC PATTERN -- COMMAND...
  local name=$1 rc_want=$2 pattern=$3; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -ne "$rc_want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    bad "$name: rc=$rc (want $rc_want), output lacks /$pattern/:"; echo "$out" | tail -20
  else
    ok "$name"
  fi
}

# For the tests that run mpirun: as root too (CI), more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# `rlcpp train` ($rlcpp) under mpirun ($mpiexec) with one LibTorch thread per process (ranks share
# the cores; also makes runs comparable).
run_mpi() { local np=$1; shift; timeout 300 "$mpiexec" --oversubscribe -x OMP_NUM_THREADS=1 -np "$np" "$rlcpp" train "$@"; }
# metrics.jsonl: a line per step ({"step": N, ...}), then the run's status line: {"status":
# "finished", "steps": N} for a run that did what was asked, {"status": "failed", "steps": N,
# "error": "..."} for one ended by an error. A status line has no "step" key; a process killed -9
# writes none, and --resume auto moves it (with the steps it discards) to metrics.discarded.jsonl.
# step_lines/step_count: a file's step lines and their number (nothing, 0, when it is absent; a
# "step" key is the only way '"step":' occurs in a JSON line). The Python checks read the steps as
# [r for r in map(json.loads, open(path)) if "step" in r].
step_lines() { [ -f "$1" ] && grep '"step":' "$1"; }  # FILE
step_count() { if [ -f "$1" ]; then grep -c '"step":' "$1"; else echo 0; fi; }  # FILE
# FILE ends with its only status line, STATUS ("finished" or "failed") after STEPS steps; a failed
# one's error matches ERROR_REGEX (Python re, when given), a finished one has none. Says what it
# found otherwise.
ends_with_status() {  # FILE STATUS STEPS [ERROR_REGEX]
  python3 - "$@" <<'PY'
import json, re, sys
path, status, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
pattern = sys.argv[4] if len(sys.argv) > 4 else None
try:
    rows = [json.loads(l) for l in open(path) if l.strip()]
except (OSError, ValueError) as e:
    sys.exit(f"     {path}: {e}")
ends = [i for i, r in enumerate(rows) if "status" in r and "step" not in r]
last = rows[-1] if rows else None
want_error = status == "failed"
good = (ends == [len(rows) - 1] and last["status"] == status and last.get("steps") == steps
        and ("error" in last) == want_error and (pattern is None or re.search(pattern, last.get("error", ""))))
if not good:
    print(f"     {path}: want one status line {status!r} after {steps} steps, last line: {json.dumps(last)[:200]}; "
          f"status lines at {ends} of {len(rows)}")
sys.exit(0 if good else 1)
PY
}
# metrics.jsonl without wall-clock and mode-specific fields, for comparing runs (the status line
# too: two equal runs, a killed and resumed one included, end with the same one)
metrics_of() { python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    for k in ("time", "tokens_per_s", "staleness", "weight_sync", "communication"): d.pop(k, None)
    for figures in (d.get("eval") or {}).values(): figures.pop("seconds", None) if isinstance(figures, dict) else None
    print(json.dumps(d, sort_keys=True))' "$1"; }
# max |a - b| / max |b| over every tensor of two safetensors files (F64 or F32), read without numpy;
# with "overall", |a - b| / |b| over all the tensors together (2-norms)
weights_close() {  # A B TOLERANCE [overall]
  python3 - "$@" <<'PY'
import json, struct, sys
def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__": continue
        b, e = info["data_offsets"]
        size, code = {"F64": (8, "d"), "F32": (4, "f")}[info["dtype"]]
        out[name] = struct.unpack(f"<{(e - b) // size}{code}", data[b:e])
    return out
a, b, tol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
assert a.keys() == b.keys() and a, "different tensors"
worst = 0.0
if sys.argv[4:] == ["overall"]:
    diff = sum((x - y) ** 2 for name in a for x, y in zip(a[name], b[name]))
    worst = (diff / max(sum(y * y for name in b for y in b[name]), 1e-300)) ** 0.5
for name in a if not sys.argv[4:] else []:
    scale = max(max(abs(x) for x in b[name]), 1e-30)
    worst = max(worst, max(abs(x - y) for x, y in zip(a[name], b[name])) / scale)
print(f"     max relative difference {worst:.2e} (tolerance {tol:g})")
sys.exit(0 if worst <= tol else 1)
PY
}
# metrics.jsonl of two runs equal up to the order of sums (relative 1e-9), timings aside (their
# status lines too: both end the same way)
metrics_close() {  # A B [KEY...]: the keys also left out
  python3 - "$@" <<'PY'
import json, sys
skip = {"time", "tokens_per_s", "staleness", "weight_sync", "communication", *sys.argv[3:]}
def rows(path): return [{k: v for k, v in json.loads(l).items() if k not in skip} for l in open(path)]
def close(a, b):
    if isinstance(a, dict):  # an evaluation's own "seconds" are timings too
        return isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k]) for k in a if k != "seconds")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)): return abs(a - b) <= 1e-9 * max(abs(a), abs(b)) + 1e-12
    return a == b
a, b = rows(sys.argv[1]), rows(sys.argv[2])
if len(a) != len(b) or not a:
    print(f"     {len(a)} metrics lines against {len(b)}"); sys.exit(1)
for x, y in zip(a, b):
    keys = [k for k in sorted(x.keys() | y.keys()) if not close(x.get(k), y.get(k))]
    if keys:
        k = keys[0]
        print(f"     step {x.get('step', x.get('status'))}: {', '.join(keys[:6])} differ (first: {x.get(k)!r} against {y.get(k)!r})")
        sys.exit(1)
PY
}
# The weights moved: a run that trained nothing would pass every comparison.
weights_moved() { [ -f "$1" ] && [ -f "$2" ] && ! weights_close "$1" "$2" 1e-6 > /dev/null; }
# kill -9 of world rank RANK of the running `rlcpp train ... -p NAME`: prints its pid (nothing when
# no such process runs).
rank_pid() {  # NAME RANK: the process of world rank RANK of `run_mpi NP ARGS... -p NAME`, if running
  local pid
  for pid in $(pgrep -f "rlcpp train .*-p $1\$"); do
    if tr "\0" "\n" 2>/dev/null < "/proc/$pid/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$pid"
      return
    fi
  done
}
kill_rank() {  # NAME RANK
  local pid
  pid=$(rank_pid "$1" "$2")
  [ -n "$pid" ] && kill -9 "$pid" && echo "$pid"
}
# kill -9 of world rank RANK of `run_mpi NP ARGS... -p NAME` (checkpoints under runs/) once its
# step-STEP is written: the job must end non-zero by itself (no rank left waiting in a collective;
# 124 is a hang), reported as NAME-ends-job.
kill_rank_after() {  # NAME NP RANK STEP ARGS...
  local name=$1 np=$2 rank=$3 step=$4; shift 4
  run_mpi "$np" "$@" -p "$name" > "$name.log" 2>&1 &
  local job=$! victim rc
  for _ in $(seq 1 600); do [ -e "runs/$name/step-$step" ] && break; sleep 0.05; done
  victim=$(kill_rank "$name" "$rank")
  wait $job
  rc=$?
  [ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && ok "$name-ends-job" \
    || { bad "$name-ends-job"; echo "victim '$victim' rc $rc (124: it hung)"; }
}
# The same as `-p killed` at its second checkpoint.
killed_rank_ends_job() { kill_rank_after killed "$1" "$2" 2 "${@:3}"; }  # NP RANK ARGS...
# `rlcpp serve ARGS...` ($rlcpp) in the background on a free loopback port, its output in LOG:
# sets server_pid and server_url once it listens (its first stdout line says where). Fails when it
# exits first or does not listen within 60 s. The caller kills it (cleanup_extra).
start_server() {  # LOG ARGS...
  local log=$1; shift
  "$rlcpp" serve --port 0 "$@" > "$log" 2>&1 &
  server_pid=$! server_url=""
  for _ in $(seq 1 600); do
    server_url=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$log" | head -1 | cut -d' ' -f3)
    [ -n "$server_url" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# Two "hosts": network namespaces $ns_a and $ns_b (10.77.0.1 and .2) joined by a veth pair
# (veth_a$$, veth_b$$). mpirun in the first starts the second's ranks through an "rsh" agent
# (agent.sh) that enters that namespace; MPI moves everything over TCP. two_host_setup says whether
# it could (root and iproute2); two_host_cleanup removes the namespaces (call it from cleanup_extra).
# two_host_mpi NP ARGS...: `rlcpp train ARGS...` over both hosts, slots=1 each unless NP > 2.
ns_a=rlcpp_a$$ ns_b=rlcpp_b$$
two_host_setup() {
  ip netns add "$ns_a" 2>/dev/null && ip netns add "$ns_b" 2>/dev/null \
    && ip link add "veth_a$$" type veth peer name "veth_b$$" 2>/dev/null || return 1
  ip link set "veth_a$$" netns "$ns_a" && ip link set "veth_b$$" netns "$ns_b"
  ip -n "$ns_a" addr add 10.77.0.1/24 dev "veth_a$$" && ip -n "$ns_b" addr add 10.77.0.2/24 dev "veth_b$$"
  for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
  ip -n "$ns_a" link set "veth_a$$" up && ip -n "$ns_b" link set "veth_b$$" up
  cat > "$tmp/agent.sh" <<AGENT
#!/bin/sh
# agent.sh HOST COMMAND...: runs COMMAND "on" HOST, i.e. in its network namespace
host=\$1; shift
case \$host in 10.77.0.2) exec ip netns exec $ns_b unshare --uts sh -c "hostname hostb; ip -o addr > $tmp/hostb.addr; \$*";;
                        *) exec ip netns exec $ns_a sh -c "\$*";; esac
AGENT
  chmod +x "$tmp/agent.sh"
}
two_host_cleanup() { ip netns del "$ns_a" 2>/dev/null; ip netns del "$ns_b" 2>/dev/null; }
two_host_link() { ip -n "$ns_b" link set "veth_b$$" "$1"; }  # up|down
two_host_mpi() {  # NP ARGS...
  local np=$1 slots=1 args; shift
  args=$(printf '%q ' "$@")
  [ "$np" -gt 2 ] && slots=$(( (np + 1) / 2 ))
  printf '10.77.0.1 slots=%s\n10.77.0.2 slots=%s\n' "$slots" "$slots" > "$tmp/hosts"
  timeout 300 ip netns exec "$ns_a" unshare --uts sh -c "hostname hosta; exec $mpiexec --hostfile $tmp/hosts -np $np \
      --mca plm_rsh_agent $tmp/agent.sh --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 \
      --mca oob_tcp_if_include 10.77.0.0/24 -x OMP_NUM_THREADS=1 ${RLCPP_FAILPOINT:+-x RLCPP_FAILPOINT} --wdir $tmp \
      $rlcpp train $args"
}

# What a --group-order completion run (runs/RUN, its rollouts saved to rollouts/RUN) trained in
# steps FIRST-STEP..LAST-STEP: each group once, GROUPS-A-STEP a step, none also held in the pool at
# the end, and (from step 1) every picked prompt trained, filtered out or held, with some pairs
# trained out of pick order unless REORDERED is 0. Writes RUN.held and RUN.trained.
check_pool() {  # RUN LAST-STEP [FIRST-STEP [GROUPS-A-STEP [REORDERED]]]
  python3 - "runs/$1" "rollouts/$1" "$2" "${3:-1}" "${4:-2}" "${5:-1}" <<'PY'
import glob, json, sys
run, rollouts, last, first, per_step, reordered = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
trained, discarded = {}, set()  # group id: step; the group filter's
for path in glob.glob(rollouts + "/step-*.jsonl"):
    for line in map(json.loads, open(path)):
        if not line["trained"]:
            discarded.add(line["group"])
        elif first <= line["step"]:
            assert trained.get(line["group"], line["step"]) == line["step"], f"group {line['group']} trained twice"
            trained[line["group"]] = line["step"]
state = json.load(open(f"{run}/step-{last}/trainer_state/state.json"))
held = {p["id"] for engine in state["round"]["pool"] for p in engine}
assert not held & (set(trained) | discarded), f"groups delivered and still held: {held & (set(trained) | discarded)}"
out_of_order = sum(1 for a in trained for b in trained if a < b and trained[a] > trained[b])
print(f"     {len(trained)} groups trained in steps {first}-{last}, {len(discarded)} filtered out, {len(held)} held at "
      f"the end; pairs trained out of pick order {out_of_order}")
assert len(trained) == per_step * (last - first + 1), len(trained)
if first == 1:
    ids = sorted(held | set(trained) | discarded)  # the dataset cursor's positions, every one picked
    assert ids == list(range(ids[0], ids[0] + len(ids))), ids
    assert out_of_order > 0 or not reordered
json.dump(sorted(held), open(f"{run}.held", "w"))
json.dump(sorted(trained), open(f"{run}.trained", "w"))
PY
}
