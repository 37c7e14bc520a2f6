"""Rollout anchor of bench/llamacpp.sh: transformers' own `generate` (the pinned transformers and
torch of rlcpp's environment, CPU, fp32 by default, its default attention and dynamic KV cache) on a
Hugging Face model directory, on the workload bench_generate --llama-workload runs on rlcpp's engine.

    python bench/anchors/hf_generate.py --model DIR [--threads N] [--reps 3] [--pp 256] [--tg 64]
        [--par 8,32,64] [--par-steps 32] [--dtype float32|bfloat16] [--json OUT]

  pp<N>       one forward of N random prompt tokens into an empty cache, logits of the last one only
              (logits_to_keep=1): N / seconds
  tg<N>       generate() of one sequence from a 1-token prompt, N new tokens (N forwards, sampling at
              temperature 1 from the full vocabulary, no stop token): N / seconds
  par<S>x<N>  the same for S sequences at once (one batch of S 1-token prompts): S * N / seconds
Like rlcpp's decode steps and unlike llama_bench's bare llama_decode calls, generate() samples
every token. Each measurement is run once untimed, then --reps times; min, median and max tokens/s
are printed and, with --json, written as llama_bench.py writes them ({"tests": [{"name", "min",
"median", "max", "runs"}], ...}).
"""
import argparse
import json
import os
import sys
import time

sys.dont_write_bytecode = True


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    for name, default in [("reps", 3), ("pp", 256), ("tg", 64), ("par-steps", 32)]:
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--par", default="8,32,64")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--json")
    args = parser.parse_args()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).eval()
    vocab = min(model.config.vocab_size, 151643)  # ordinary tokens, not a Qwen vocabulary's control tokens
    gen = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, eos_token_id=None, pad_token_id=0,
               use_cache=True)
    results = {"model": os.path.abspath(args.model), "anchor": f"transformers {transformers.__version__} generate",
               "torch": torch.__version__, "threads": torch.get_num_threads(), "reps": args.reps,
               "dtype": args.dtype, "attention": model.config._attn_implementation, "tests": []}
    print(f"transformers {transformers.__version__} generate (torch {torch.__version__}): {args.model}, {args.dtype}, "
          f"{torch.get_num_threads()} threads, attention {model.config._attn_implementation}, {args.reps} reps",
          flush=True)

    def measure(name, tokens, once):
        once()  # warm-up
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

    def generate(batch, steps):
        prompt = torch.randint(0, vocab, (batch, 1))
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=steps,
                                 min_new_tokens=steps, **gen)
        assert out.shape == (batch, 1 + steps), out.shape

    with torch.no_grad():
        if args.pp > 0:
            measure(f"pp{args.pp}", args.pp,
                    lambda: model(torch.randint(0, vocab, (1, args.pp)), use_cache=True, logits_to_keep=1))
        if args.tg > 0:
            measure(f"tg{args.tg}", args.tg, lambda: generate(1, args.tg))
        for s in [int(x) for x in args.par.split(",") if x]:
            measure(f"par{s}x{args.par_steps}", s * args.par_steps, lambda: generate(s, args.par_steps))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
