#!/usr/bin/python3
"""PyTorch-eager anchor of bench/train_step.sh and bench/memory.sh: GRPO steps written the way an
HF/TRL-style eager loop runs them on CPU, timed per phase, on the Hugging Face-style Qwen2 of
torch_qwen2.py (full fine-tune, fp32, no reference model).

    /usr/bin/python3 bench/anchors/torch_grpo_step.py [--prompts 2 --group 8 --prompt-len 64 --new 64
        --micro 4 --steps 2] [shape flags]

Each step: --prompts random prompts of --prompt-len tokens, each repeated --group times;
  generate      sampling at temperature 1 with a per-layer KV cache, --new tokens per sample (no stop
                token, so every response has that length); the prefill projects every prompt
                position through the LM head, as model(...).logits does;
  old_logprobs  the sampling policy's log-probs of the response tokens, no grad, in micro-batches
                of --micro samples;
  train         per micro-batch: log-probs again, ratio to the old ones, the clipped surrogate
                (eps 0.2) with group-normalised advantages of random rewards, mean over each
                response then over the batch, backward; then grad-norm clipping to 1 and AdamW.
Rewards are random: the figures measure cost, not learning. One line per step:
    step 0: total 12.34s | generate 5.67s | old_logprobs 1.23s | train 5.43s | gen 45.6 tok/s
(bench/train_step.sh reads every "NAME SECONDSs" pair). Needs Debian's python3-torch.
"""
import argparse
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from torch_qwen2 import Qwen2ForCausalLM, add_shape_flags, causal_mask, set_threads, shape_of  # noqa: E402

CLIP_EPS = 0.2


@torch.no_grad()
def generate(model, prompt_ids, n_new):
    """prompt_ids [B, P] -> sampled response ids [B, n_new]."""
    b, p = prompt_ids.shape
    caches = [dict() for _ in model.layers]
    logits = model(prompt_ids, torch.arange(p), causal_mask(p), caches)[:, -1]  # [B, V]
    out = []
    for step in range(n_new):
        token = torch.multinomial(torch.softmax(logits, dim=-1), 1)  # [B, 1]
        out.append(token)
        position = p + step
        # One new query sees every cached key and itself: an all-zero additive mask [1, position + 1].
        logits = model(token, torch.tensor([position]), torch.zeros(1, position + 1), caches)[:, -1]
    return torch.cat(out, dim=1)


def response_logprobs(model, ids, prompt_len):
    """ids [B, P + N] -> log-probs of the N response tokens under model, [B, N]."""
    t = ids.shape[1] - 1
    logits = model(ids[:, :-1], torch.arange(t), causal_mask(t))[:, prompt_len - 1:]  # [B, N, V]
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, prompt_len:, None]).squeeze(-1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_flags(parser)
    for name, default in [("prompts", 2), ("group", 8), ("prompt-len", 64), ("new", 64), ("micro", 4), ("steps", 2)]:
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    threads = set_threads(args.threads)
    torch.manual_seed(0)
    policy = Qwen2ForCausalLM(shape_of(args))
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6, weight_decay=0.01)
    n_samples = args.prompts * args.group
    print(f"PyTorch eager GRPO: {sum(p.numel() for p in policy.parameters()) / 1e6:.0f}M parameters, "
          f"{args.prompts} prompts x {args.group} samples, prompts of {args.prompt_len} tokens, {args.new} new, "
          f"micro-batch {args.micro}, {threads} threads", flush=True)

    for step in range(args.steps):
        phases = {}
        start = time.perf_counter()
        prompts = torch.randint(0, args.vocab, (args.prompts, args.prompt_len)).repeat_interleave(args.group, 0)
        responses = generate(policy, prompts, args.new)
        phases["generate"] = time.perf_counter() - start
        ids = torch.cat([prompts, responses], dim=1)
        rewards = torch.rand(args.prompts, args.group)
        advantages = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).reshape(-1, 1)
        micro_batches = [slice(i, i + args.micro) for i in range(0, n_samples, args.micro)]

        mark = time.perf_counter()
        with torch.no_grad():
            old = torch.cat([response_logprobs(policy, ids[mb], args.prompt_len) for mb in micro_batches])
        phases["old_logprobs"] = time.perf_counter() - mark

        mark = time.perf_counter()
        optimizer.zero_grad()
        for mb in micro_batches:
            ratio = torch.exp(response_logprobs(policy, ids[mb], args.prompt_len) - old[mb])
            adv = advantages[mb]
            surrogate = torch.min(ratio * adv, ratio.clamp(1 - CLIP_EPS, 1 + CLIP_EPS) * adv)
            loss = -surrogate.mean(1).mean() * (ids[mb].shape[0] / n_samples)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
        phases["train"] = time.perf_counter() - mark

        total = time.perf_counter() - start
        print(f"step {step}: total {total:.2f}s | " + " | ".join(f"{k} {v:.2f}s" for k, v in phases.items())
              + f" | gen {responses.numel() / phases['generate']:.1f} tok/s", flush=True)


if __name__ == "__main__":
    main()
