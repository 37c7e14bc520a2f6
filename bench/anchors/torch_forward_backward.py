#!/usr/bin/python3
"""PyTorch-eager anchor of bench/forward_backward.sh: forward and forward+backward tokens/s of a
Qwen2-shaped model written the Hugging Face way (torch_qwen2.py), on random token ids.

    /usr/bin/python3 bench/anchors/torch_forward_backward.py [--batch 1 --seq 512 --reps 3] [shape flags]

forward: one no-grad pass over [batch, seq] ids with full logits. fwd+bwd: the fp32 log-prob of
every next token (full logits, cross-entropy over seq-1 positions) and its backward into every
parameter. Each is run once untimed, then --reps times; tokens/s counts batch x seq tokens.
Output, one line each (bench/forward_backward.sh reads the last field):
    forward: params 494M B=1 T=512 threads=2 tokens/s min/med/max 120/130/134
    fwd+bwd: params 494M B=1 T=512 threads=2 tokens/s min/med/max 24/25/26
Needs Debian's python3-torch (run with /usr/bin/python3).
"""
import argparse
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from torch_qwen2 import Qwen2ForCausalLM, add_shape_flags, causal_mask, set_threads, shape_of  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_flags(parser)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    threads = set_threads(args.threads)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(shape_of(args))
    n_params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, args.vocab, (args.batch, args.seq))
    t = args.seq

    def forward():
        with torch.no_grad():
            model(ids, torch.arange(t), causal_mask(t))

    def forward_backward():
        logits = model(ids[:, :-1], torch.arange(t - 1), causal_mask(t - 1))  # [B, T-1, V]
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), ids[:, 1:].reshape(-1))
        loss.backward()

    for label, step in (("forward", forward), ("fwd+bwd", forward_backward)):
        step()  # untimed: first-touch allocations and thread start-up
        seconds = []
        for _ in range(args.reps):
            start = time.perf_counter()
            step()
            seconds.append(time.perf_counter() - start)
        seconds.sort()
        tokens = args.batch * args.seq
        slowest, median, fastest = tokens / seconds[-1], tokens / seconds[len(seconds) // 2], tokens / seconds[0]
        print(f"{label}: params {n_params / 1e6:.0f}M B={args.batch} T={args.seq} threads={threads} "
              f"tokens/s min/med/max {slowest:.1f}/{median:.1f}/{fastest:.1f}", flush=True)


if __name__ == "__main__":
    main()
