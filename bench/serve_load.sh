#!/usr/bin/env bash
# bench/serve_load: `rlcpp serve` under sustained load, over real HTTP from other processes (hey and
# a Python client), not in-process like bench/serve.sh. Three parts, each a plain table:
#   load   hey for DURATION s at each client count against POST /v1/completions (a short prompt,
#          max_tokens NEW, ignore_eos so every answer has NEW tokens, temperature 1, a seed):
#          requests/s, generated tokens/s (requests/s × NEW), p50/p99 latency, answers not 200
#   ttft   streamed completions from C Python clients for TTFT_SECONDS s: time to the first token's
#          event and the mean gap between the later ones (time per output token), p50/p99; each C
#          twice, over keep-alive connections (what API clients' pools do) and over a fresh
#          connection per request, so that a stall of the first event (Nagle's algorithm against
#          the client's delayed ACK) shows as the difference of the two rows
#   soak   SOAK s at SOAK_CLIENTS clients (hey -z), the server's VmRSS sampled every 10 s: at the
#          start, at the end, the max and the growth over the last half (a server that holds no
#          per-request state grows by ~0), and the requests that failed
#   bench/serve_load.sh [BUILD_DIR]      (RLCPP=path/to/rlcpp overrides BUILD_DIR/rlcpp)
# Env: CLIENTS ("1 8 32 64 128 256"), DURATION (20), NEW (16), TTFT_CLIENTS ("1 8 64"),
#      TTFT_SECONDS (5), SOAK (600; 0 skips it), SOAK_CLIENTS (64), TIMEOUT (120: hey's per-request
#      limit, a request over it is a failure), SERVE_ARGS (extra `rlcpp serve` flags), HEY_ARGS
#      (extra hey flags of the load table and the soak, e.g. -disable-keepalive),
#      LAYERS (unset: the bundled models/arith-tiny, enough for RSS and the request path's cost;
#      set: a random Qwen2.5-0.5B-shaped fp32 model of LAYERS layers with the real Qwen tokenizer,
#      as bench/serve.sh builds it, with the real Qwen3 tokenizer of tests/data/tokenizers).
# Needs hey (Debian's package, `make deps`), curl and python3. Exit status: 1 when a request failed
# (an answer not 200, a hey error or timeout, a broken stream) or the server died, else 0.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$src/build}")
rlcpp=${RLCPP:-$build/rlcpp}
clients=${CLIENTS:-1 8 32 64 128 256}
duration=${DURATION:-20}
new=${NEW:-16}
ttft_clients=${TTFT_CLIENTS:-1 8 64}
ttft_seconds=${TTFT_SECONDS:-5}
soak=${SOAK:-600}
soak_clients=${SOAK_CLIENTS:-64}
timeout=${TIMEOUT:-120}
for tool in hey curl python3; do
  command -v $tool > /dev/null || { echo "bench/serve_load.sh: $tool is missing (make deps)" >&2; exit 2; }
done
[ -x "$rlcpp" ] || { echo "bench/serve_load.sh: $rlcpp is missing: make build" >&2; exit 2; }

work=$(mktemp -d)
server_pid=
hey_pid=
cleanup() {
  if [ -n "$hey_pid" ]; then kill "$hey_pid" 2> /dev/null || true; fi
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2> /dev/null; then
    kill "$server_pid" 2> /dev/null || true
    wait "$server_pid" 2> /dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ -n "${LAYERS:-}" ]; then
  source "$src/bench/qwen_shape.sh"
  qwen_shape_model "$rlcpp" "$work/model" "$src/tests/data/tokenizers/qwen3" 896 4864 "$LAYERS" 14 2 > /dev/null
  model=$work/model
  what="Qwen2.5-0.5B-shaped, $LAYERS layers, fp32, random weights"
else
  model=$src/models/arith-tiny
  what="models/arith-tiny (4 layers, hidden 128)"
fi

# The server, on a free port; its line on stdout names the port.
# shellcheck disable=SC2086
"$rlcpp" serve --model "$model" --served-model-name bench --port 0 ${SERVE_ARGS:-} > "$work/serve.log" 2>&1 &
server_pid=$!
port=
for _ in $(seq 600); do
  port=$(sed -n 's|^rlcpp serve: listening on http://[^:]*:\([0-9]*\) .*|\1|p' "$work/serve.log")
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2> /dev/null || { echo "bench/serve_load.sh: the server died at start:" >&2; cat "$work/serve.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "bench/serve_load.sh: the server printed no port in 60 s" >&2; exit 1; }
url=http://127.0.0.1:$port
for _ in $(seq 100); do curl -sf "$url/health" > /dev/null && break; sleep 0.1; done
curl -sf "$url/health" > /dev/null || { echo "bench/serve_load.sh: $url/health does not answer" >&2; exit 1; }

failed=0  # requests that failed, all parts together
alive() {
  kill -0 "$server_pid" 2> /dev/null && return 0
  echo "bench/serve_load.sh: the server died; its log's end:" >&2
  tail -20 "$work/serve.log" >&2
  exit 1
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status"; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

prompt="What is 17 + 29? Answer with the number."
body=$(printf '{"model": "bench", "prompt": "%s", "max_tokens": %d, "temperature": 1, "seed": 1234, "ignore_eos": true}' \
  "$prompt" "$new")
printf '%s' "$body" > "$work/body.json"

# Every answer has NEW tokens (ignore_eos), so generated tokens/s is requests/s × NEW: check it.
answer=$(curl -sf -X POST -H 'Content-Type: application/json' --data-binary @"$work/body.json" "$url/v1/completions")
got=$(printf '%s' "$answer" | python3 -c 'import json, sys; print(json.load(sys.stdin)["usage"]["completion_tokens"])')
if [ "$got" != "$new" ]; then
  echo "bench/serve_load.sh: an answer has $got tokens, not $new (is ignore_eos honoured?): $answer" >&2
  exit 1
fi

echo "bench/serve_load: rlcpp serve of $what, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  POST /v1/completions: a $(printf '%s' "$answer" | python3 -c 'import json, sys; print(json.load(sys.stdin)["usage"]["prompt_tokens"])')-token prompt, max_tokens $new (ignore_eos), temperature 1, seed"
echo "  server RSS after start: $(mib "$(rss_kb)") MiB"

# hey's summary -> "requests/s p50_s p99_s n_200 n_other n_errors"
hey_summary() {
  awk '
    /^  Requests\/sec:/ {rps = $2}
    /^  50% in/ {p50 = $3}
    /^  99% in/ {p99 = $3}
    /^Status code distribution:/ {section = "status"; next}
    /^Error distribution:/ {section = "error"; next}
    section == "status" && /^  \[[0-9]+\]/ {code = $1; gsub(/[\[\]]/, "", code); if (code == 200) ok += $2; else other += $2}
    section == "error" && /^  \[[0-9]+\]/ {n = $1; gsub(/[\[\]]/, "", n); errors += n}
    END {printf "%s %s %s %d %d %d\n", rps == "" ? 0 : rps, p50 == "" ? "nan" : p50, p99 == "" ? "nan" : p99, ok, other, errors}
  ' "$1"
}
run_hey() {  # SECONDS CLIENTS LOG, in the background: $hey_pid
  # shellcheck disable=SC2086
  hey -z "${1}s" -c "$2" -t "$timeout" ${HEY_ARGS:-} -m POST -T application/json -D "$work/body.json" "$url/v1/completions" > "$3" 2>&1 &
  hey_pid=$!
}

# --- a. the load table ---------------------------------------------------------------------
echo
echo "load: hey -z ${duration}s ${HEY_ARGS:+$HEY_ARGS }per row (a percentile hey has too few requests for: -)"
printf '%8s %10s %12s %10s %10s %9s %10s\n' clients "req/s" "gen tok/s" "p50 ms" "p99 ms" requests "not 200"
for c in $clients; do
  run_hey "$duration" "$c" "$work/hey-$c.log"
  wait "$hey_pid" || true
  read -r rps p50 p99 ok other errors <<< "$(hey_summary "$work/hey-$c.log")"
  bad=$((other + errors))
  failed=$((failed + bad))
  awk -v c="$c" -v rps="$rps" -v new="$new" -v p50="$p50" -v p99="$p99" -v n=$((ok + bad)) -v bad="$bad" '
    function ms(x) { return x == "nan" ? sprintf("%10s", "-") : sprintf("%10.1f", x * 1000) }
    BEGIN {printf "%8d %10.1f %12.0f %s %s %9d %10d\n", c, rps, rps * new, ms(p50), ms(p99), n, bad}'
  if [ "$bad" -gt 0 ]; then sed -n '/^Status code distribution:/,$p' "$work/hey-$c.log" | grep . | sed 's/^/    /'; fi
  alive
done
echo "  server RSS after the load table: $(mib "$(rss_kb)") MiB"

# --- b. time to first token and per output token -------------------------------------------
cat > "$work/stream.py" << 'PY'
# Streamed completions from C threads for S seconds: per request, the time from sending it to the
# first event carrying a token (TTFT) and the mean gap between the later tokens' events (TPOT).
import http.client, json, sys, threading, time
port, clients, seconds, new, prompt = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
keep_alive = sys.argv[6] == "keep-alive"
body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": new, "temperature": 1, "seed": 1234,
                   "ignore_eos": True, "stream": True})
ttft, tpot, failures, lock = [], [], [], threading.Lock()
deadline = time.monotonic() + seconds

def one(conn):
    start = time.monotonic()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"status {resp.status}: {resp.read()[:200]!r}")
    times, done = [], False
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            done = True
            continue
        event = json.loads(data)
        if "error" in event:
            raise RuntimeError(f"error event: {event['error']}")
        now = time.monotonic()
        for choice in event.get("choices", []):
            times.extend([now] * len(choice.get("token_ids", [])))
    if not done or len(times) != new:
        raise RuntimeError(f"a stream of {len(times)} tokens, {'with' if done else 'without'} [DONE]")
    return times[0] - start, (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None

def client():
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while time.monotonic() < deadline:
        try:
            first, gap = one(conn)
            if not keep_alive:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            with lock:
                ttft.append(first)
                if gap is not None:
                    tpot.append(gap)
        except Exception as e:  # noqa: BLE001 - every failure is counted and shown
            with lock:
                failures.append(repr(e))
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.close()

threads = [threading.Thread(target=client) for _ in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()

def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")

print(f"{clients:8d} {sys.argv[6]:>10} {len(ttft):9d} {pct(ttft, .5):10.1f} {pct(ttft, .99):10.1f} {pct(tpot, .5):10.2f} {pct(tpot, .99):10.2f} {len(failures):7d}")
for f in sorted(set(failures))[:5]:
    print(f"    {f}")
sys.exit(1 if failures else 0)
PY
echo
echo "ttft: streamed completions (\"stream\": true), ${ttft_seconds}s per row, Python http.client threads"
printf '%8s %10s %9s %10s %10s %10s %10s %7s\n' clients connection requests "TTFT p50" "TTFT p99" "TPOT p50" "TPOT p99" failed
printf '%8s %10s %9s %10s %10s %10s %10s %7s\n' "" "" "" ms ms ms ms ""
for c in $ttft_clients; do
  for connection in keep-alive fresh; do
    python3 "$work/stream.py" "$port" "$c" "$ttft_seconds" "$new" "$prompt" $connection > "$work/stream.out" 2>&1 || true
    cat "$work/stream.out"
    n=$(awk 'NR == 1 {print $NF}' "$work/stream.out")
    [[ "$n" =~ ^[0-9]+$ ]] || n=1  # the client itself failed (its error is shown)
    failed=$((failed + n))
    alive
  done
done

echo "  server RSS after the streams: $(mib "$(rss_kb)") MiB"

# --- c. the soak -----------------------------------------------------------------------------
if [ "$soak" -gt 0 ]; then
  echo
  echo "soak: ${soak}s at $soak_clients clients (hey -z), the server's VmRSS every 10 s"
  run_hey "$soak" "$soak_clients" "$work/hey-soak.log"
  t0=$(date +%s.%N)
  : > "$work/rss"
  while kill -0 "$hey_pid" 2> /dev/null; do
    alive
    printf '%s %s\n' "$(awk -v t0="$t0" -v t="$(date +%s.%N)" 'BEGIN {printf "%.0f", t - t0}')" "$(rss_kb)" >> "$work/rss"
    for _ in $(seq 20); do kill -0 "$hey_pid" 2> /dev/null || break; sleep 0.5; done
  done
  wait "$hey_pid" || true
  alive
  printf '%s %s\n' "$(awk -v t0="$t0" -v t="$(date +%s.%N)" 'BEGIN {printf "%.0f", t - t0}')" "$(rss_kb)" >> "$work/rss"
  printf '%8s %10s\n' "t (s)" "RSS MiB"
  awk '{if ((NR - 1) % 6 == 0 || NR == n) printf "%8d %10.1f\n", $1, $2 / 1024}' n="$(wc -l < "$work/rss")" "$work/rss"
  read -r rps p50 p99 ok other errors <<< "$(hey_summary "$work/hey-soak.log")"
  bad=$((other + errors))
  failed=$((failed + bad))
  awk -v soak="$soak" '
    {t[NR] = $1; r[NR] = $2; if ($2 > max) max = $2}
    END {
      half = 1; for (k = 1; k <= NR; ++k) if (t[k] <= t[NR] / 2) half = k
      printf "  RSS MiB: start %.1f, end %.1f, max %.1f, growth over the last half (%d s -> %d s) %+.1f\n",
        r[1] / 1024, r[NR] / 1024, max / 1024, t[half], t[NR], (r[NR] - r[half]) / 1024
    }' "$work/rss"
  awk -v rps="$rps" -v new="$new" -v p50="$p50" -v p99="$p99" -v n=$((ok + bad)) -v bad="$bad" '
    function ms(x) { return x == "nan" ? "-" : sprintf("%.1f", x * 1000) }
    BEGIN {printf "  requests %d, %.1f req/s (%.0f gen tok/s), p50 %s ms, p99 %s ms, failed %d\n", n, rps, rps * new, ms(p50), ms(p99), bad}'
  if [ "$bad" -gt 0 ]; then sed -n '/^Status code distribution:/,$p' "$work/hey-soak.log" | grep . | sed 's/^/    /'; fi
fi

alive
warnings=$(grep -ciE 'error|warn' "$work/serve.log" || true)
echo
echo "server: alive, RSS $(mib "$(rss_kb)") MiB, $warnings error/warning lines in its log"
if [ "$warnings" -gt 0 ]; then grep -iE 'error|warn' "$work/serve.log" | sort | uniq -c | sort -rn | head -5 | sed 's/^/    /'; fi
if [ "$failed" -gt 0 ]; then
  echo "bench/serve_load.sh: $failed requests failed"
  exit 1
fi
