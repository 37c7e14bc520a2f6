"""llama.cpp's figures for bench/llamacpp.sh: bare llama_decode calls on a GGUF model, through the
low-level C API that llama-cpp-python (the pinned sdist of bench/anchors/requirements.txt, compiled
here for the CPU) binds with ctypes: the workload bench_generate --llama-workload runs on rlcpp's
engine.

    python bench/anchors/llamacpp/llama_bench.py --model M.gguf [--threads N] [--reps 3] [--pp 256]
        [--tg 64] [--par 8,32,64] [--par-steps 32] [--kv F32|F16] [--fa off|on|auto] [--json OUT]

  pp<N>       one llama_decode of N random prompt tokens into an empty KV cache, logits of the last
              one only: N / seconds (llama-bench's -p N)
  tg<N>       N llama_decode calls of one token each, from an empty cache, logits every step:
              N / seconds (llama-bench's -n N)
  par<S>x<N>  S sequences decoding together: N llama_decode calls of S tokens (one per sequence),
              logits for all: S * N / seconds
No sampling: the ids are random. Each context first decodes a few untimed tokens (as bench_generate
warms the engine up), then each measurement runs --reps times; the min, median and max tokens/s are
printed and, with --json, written as
  {"tests": [{"name": "pp256", "min": .., "median": .., "max": .., "runs": [..]}, ...], "systemInfo": .., ...}.
Defaults: every core, F32 KV cache, flash attention off (what bench/llamacpp.sh passes). The batch
is filled through ctypes before each timed llama_decode; filling S <= 64 entries costs microseconds
against the milliseconds of a decode. LLAMA_LOG_LEVEL=2 shows llama.cpp's info log (errors only by
default). Exit 2 on a bad flag or when llama_cpp is not installed (bash bench/anchors/install.sh).
"""
import argparse
import ctypes
import json
import os
import sys
import time

sys.dont_write_bytecode = True
PINNED = "0.3.36"

try:
    import llama_cpp as L
except ImportError as error:
    print(f"llama_bench.py: llama_cpp is not importable ({error}): run with the python that "
          "bash bench/anchors/install.sh prints", file=sys.stderr)
    sys.exit(2)

KV = {"F32": L.GGML_TYPE_F32, "F16": L.GGML_TYPE_F16}
FA = {"auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO, "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED, "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED}
MIN_LOG_LEVEL = int(os.environ.get("LLAMA_LOG_LEVEL", "4"))  # 4: GGML_LOG_LEVEL_ERROR; 5: continuation


@L.llama_log_callback
def _log(level, text, user_data):
    if level >= MIN_LOG_LEVEL and level != 5:
        sys.stderr.write(f"[llama.cpp] {text.decode(errors='replace')}")


class Context:
    """A model and one context on it, with a batch of `capacity` tokens to fill and decode."""

    def __init__(self, model_path, n_ctx, n_batch, n_seq_max, threads, kv, fa):
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(model_path.encode(), mp)
        if not self.model:
            fail(f"llama.cpp could not load {model_path} (LLAMA_LOG_LEVEL=2 shows why)")
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = min(512, n_batch)  # llama.cpp's default physical batch
        cp.n_seq_max = n_seq_max
        cp.n_threads = cp.n_threads_batch = threads
        cp.type_k = cp.type_v = KV[kv]
        cp.flash_attn_type = FA[fa]
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            fail("llama_init_from_model failed (LLAMA_LOG_LEVEL=2 shows why)")
        self.memory = L.llama_get_memory(self.ctx)
        self.capacity = n_batch
        self.batch = L.llama_batch_init(n_batch, 0, n_seq_max)

    def decode(self, n, token, pos, seq, want_logits):
        """Decodes n tokens: token(i) at position pos(i) of sequence seq(i), logits where want_logits(i)."""
        if n > self.capacity:
            fail(f"a batch of {n} tokens exceeds the context's {self.capacity}")
        b = self.batch
        for i in range(n):
            b.token[i] = token(i)
            b.pos[i] = pos(i)
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq(i)
            b.logits[i] = 1 if want_logits(i) else 0
        b.n_tokens = n
        status = L.llama_decode(self.ctx, b)
        if status != 0:
            fail(f"llama_decode returned {status}")

    def synchronize(self):
        L.llama_synchronize(self.ctx)

    def clear(self):
        L.llama_memory_clear(self.memory, True)

    def close(self):
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)


class Failure(Exception):
    pass


def fail(message):
    raise Failure(message)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    for name, default in [("reps", 3), ("pp", 256), ("tg", 64), ("par-steps", 32)]:
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--par", default="8,32,64")
    parser.add_argument("--kv", choices=list(KV), default="F32")
    parser.add_argument("--fa", choices=list(FA), default="off")
    parser.add_argument("--json")
    args = parser.parse_args()
    if not os.path.isfile(args.model):
        parser.error(f"--model {args.model} is not a file")
    if L.__version__ != PINNED:
        print(f"llama_bench.py: llama-cpp-python {L.__version__} is installed, the anchor pins {PINNED}: "
              "bash bench/anchors/install.sh", file=sys.stderr)
        return 2
    parallel = [int(s) for s in args.par.split(",") if s]
    L.llama_log_set(_log, ctypes.c_void_p())
    L.llama_backend_init()

    state = 12345  # a fixed linear congruential sequence, so both rounds decode the same kind of ids

    def random_id(n):
        nonlocal state
        state = (state * 1103515245 + 12345) & 0xFFFFFFFF
        return state % n

    results = {"model": os.path.abspath(args.model), "anchor": f"llama-cpp-python {L.__version__}",
               "threads": args.threads, "reps": args.reps, "kv": args.kv, "fa": args.fa,
               "python": sys.version.split()[0], "tests": [],
               "systemInfo": L.llama_print_system_info().decode(errors="replace")}

    def measure(name, tokens, once):
        runs = []
        for _ in range(args.reps):
            start = time.perf_counter()
            once()
            runs.append(tokens / (time.perf_counter() - start))
        s = sorted(runs)
        entry = {"name": name, "min": s[0], "median": s[len(s) // 2], "max": s[-1], "runs": runs}
        results["tests"].append(entry)
        print(f"{name:<10} tokens/s  min {entry['min']:8.2f}  median {entry['median']:8.2f}  max {entry['max']:8.2f}",
              flush=True)

    print(f"llama.cpp (llama-cpp-python {L.__version__}): {args.model}, {args.threads} threads, {args.kv} KV cache, "
          f"flash attention {args.fa}, {args.reps} reps", flush=True)
    common = dict(threads=args.threads, kv=args.kv, fa=args.fa)
    pp, tg, steps = args.pp, args.tg, args.par_steps
    ctx = Context(args.model, n_ctx=max(pp, tg) + 16, n_batch=max(512, pp), n_seq_max=1, **common)
    vocab = min(ctx.n_vocab, 151643)  # ordinary tokens of a Qwen-sized vocabulary, not control tokens
    results["nVocab"] = ctx.n_vocab
    ctx.decode(16, lambda i: random_id(vocab), lambda i: i, lambda i: 0, lambda i: i == 15)  # warm-up
    ctx.decode(1, lambda i: random_id(vocab), lambda i: 16, lambda i: 0, lambda i: True)
    if pp > 0:
        def prefill():
            ctx.clear()
            ctx.decode(pp, lambda i: random_id(vocab), lambda i: i, lambda i: 0, lambda i: i == pp - 1)
            ctx.synchronize()
        measure(f"pp{pp}", pp, prefill)
    if tg > 0:
        def generate():
            ctx.clear()
            for step in range(tg):
                ctx.decode(1, lambda i: random_id(vocab), lambda i: step, lambda i: 0, lambda i: True)
            ctx.synchronize()
        measure(f"tg{tg}", tg, generate)
    ctx.close()
    for s in parallel:
        # n_ctx is shared by the sequences: each gets par-steps positions and some slack.
        par = Context(args.model, n_ctx=s * (steps + 16), n_batch=max(512, s), n_seq_max=s, **common)
        par.decode(s, lambda i: random_id(vocab), lambda i: 0, lambda i: i, lambda i: True)  # warm-up

        def together():
            par.clear()
            for step in range(steps):
                par.decode(s, lambda i: random_id(vocab), lambda i: step, lambda i: i, lambda i: True)
            par.synchronize()
        measure(f"par{s}x{steps}", s * steps, together)
        par.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as error:
        print(f"llama_bench.py: {error}", file=sys.stderr)
        sys.exit(1)
